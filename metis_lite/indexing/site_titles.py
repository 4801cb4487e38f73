"""A site's title suffix: what most of a source's HTML pages append to their titles.

Generated documentation titles every page "<page> — <site>": "argparse — … — Python 3.11.2
documentation", "Install | Docusaurus". The site's part says nothing of the page and is in
every chunk's context (its words, its embedding text), so it is cut before the page is parsed
into chunks: each HTML page's job carries the suffix (parse_pool.ParseJob.title_suffix) and
parsing cuts it from its title.

The suffix is found from the pages as they are on disk, not from those a run happens to parse:
the `<title>` of up to SAMPLE_PAGES of the source's HTML files (all of them, or that many
spread evenly over their names in order), each read from its head alone, and
parsing.site_suffix's rule (an ending after a separator that more than half of them share).
So a page re-indexed alone gets the cut its site's other pages got. It is looked for once per
run and source, and only when one of the source's HTML pages is parsed: a run with nothing to
parse reads no head.
"""

from __future__ import annotations

import os

from metis_lite import parsing
from metis_lite.indexing.walk import SourceFile
from metis_lite.store.files import Unreadable, open_inside, read_all

SAMPLE_PAGES = 100
"""The most pages whose titles are read to find a site's suffix: reading a head costs ~0.1 ms
(open, read, lexbor), so a site of any size is settled in about 10 ms; 100 titles tell a
suffix most pages share from one a few do."""

HEAD_BYTES = 32 * 1024
"""How much of a page is read to find its `<title>`: a head's meta, link and style elements
come first (Docusaurus's and Material's heads put it within the first 4 KB)."""


class SiteTitles:
    """The title suffix of one source's HTML pages, found when first asked for."""

    def __init__(self, files: tuple[SourceFile, ...], real_root: str) -> None:
        self._pages = sorted((f for f in files if f.kind == "html"), key=lambda f: f.name)
        self._root = real_root
        self._suffix: str | None = None

    def suffix(self, kind: str) -> str:
        """The suffix to cut from the title of a page of `kind` ("" but for HTML)."""
        if kind != "html":
            return ""
        if self._suffix is None:
            self._suffix = parsing.site_suffix(self._titles())
        return self._suffix

    def _titles(self) -> list[str]:
        pages = self._pages
        if len(pages) > SAMPLE_PAGES:
            pages = [pages[n * len(pages) // SAMPLE_PAGES] for n in range(SAMPLE_PAGES)]
        titles = []
        for page in pages:
            try:
                fd, _ = open_inside(page.path, self._root)
            except Unreadable:
                continue  # skipped, with why, when the run reads it
            try:
                head = read_all(fd, HEAD_BYTES - 1)
            except OSError:
                continue
            finally:
                os.close(fd)
            if title := parsing.head_title(head):
                titles.append(title)
        return titles
