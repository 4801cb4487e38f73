"""Parsers side by side on real documents, and whole-index throughput without embeddings.

    python benchmarks/bench_parsing.py                 # Python's HTML docs and texlive's PDFs
    python benchmarks/bench_parsing.py --limit 60      # the first 60 files of each kind
    python benchmarks/bench_parsing.py --kinds html --out parsing.json
    python benchmarks/bench_parsing.py --shipped-only  # no candidates beside: a quick rerun

The corpora are Debian packages (nothing is downloaded; a missing one is reported and skipped):
`apt-get install --no-install-recommends python3.11-doc texlive-latex-base-doc` puts Python's
HTML documentation in /usr/share/doc/python3.11/html (530 pages, 50 MB) and LaTeX's manuals in
/usr/share/doc/texlive-doc (~300 PDFs, ~115 MB). In one run, on one core, for each kind:

- parse only: each candidate parses every file from bytes already in memory, and the shipped
  chunker cuts what it gives: files/s, MB/s, chunks/s, and each one's time over the shipped
  parser's. HTML: lexbor (selectolax; shipped), lexbor without the ARIA-role rule, lxml's
  libxml2 HTML parser and html5lib (the parser before it; it decodes the bytes itself), the
  last two read by the shipped PageReader so that only the tree builder differs. PDF: PDFium
  (pypdfium2; shipped, in its worker process) and pypdf (the parser before it: its
  extract_text, cleaned by the same page_text). A candidate not installed is "not available".
- the text each gives beside the shipped parser's: the share of words (our tokenizer's) both
  give, files whose titles, heading chains or cited pages are the same, files one refuses.
- the whole `index` (walk, read, hash, parse, chunk, FTS5 words, write; the embedding model
  refuses at once, as in benchmarks/run.py, so nothing is embedded) on a copy of the corpus:
  chunks/s, and each stage's share of the run: read (files.read_all), parse (parsing.parse),
  chunk (chunking.chunk), words (the tokenizer, as FTS5 calls it while writing), write
  (Store.replace_document less its words), the rest (walking, hashing, the run's records).

Aims: whole index ≥ 5,000 chunks/s on the HTML and ≥ 1,000 chunks/s on the PDFs,
judged on wall time. Times on a shared machine drift: the load average is printed at the start
and the end, the ratios of one run are steadier than its absolute figures, and "per CPU s" (the
process's CPU time and its PDFium worker's) says what the cores gave it, which other
processes' load inflates far less (though not at all is too much to hope: they share caches).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from metis_lite import parsing  # noqa: E402
from metis_lite.base.core import Base  # noqa: E402
from metis_lite.errors import ParseError  # noqa: E402
from metis_lite.indexing import ingest  # noqa: E402
from metis_lite.parsing import html, pdf  # noqa: E402
from metis_lite.parsing.charset import html_utf8  # noqa: E402
from metis_lite.parsing.common import collapse, document  # noqa: E402
from metis_lite.records import Document, Section  # noqa: E402
from metis_lite.settings import CHUNK_CHARS  # noqa: E402
from metis_lite.store import Store  # noqa: E402
from metis_lite.text import chunking, tokenizer  # noqa: E402
from metis_lite.text.chunking import chunk  # noqa: E402

CORPORA = {
    "html": Path("/usr/share/doc/python3.11/html"),
    "pdf": Path("/usr/share/doc/texlive-doc"),
}
"""Where Debian's python3.11-doc and texlive-latex-base-doc put their files."""

SUFFIXES = {"html": (".html",), "pdf": (".pdf",)}

AIMS = {"html": 5000.0, "pdf": 1000.0}
"""Chunks/s of the whole index, without embeddings (lexbor and PDFium)."""

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that refuses at once: indexing without embeddings."""

Parser = Callable[[bytes, str], Document]


# -- the candidates -----------------------------------------------------------------------------


def lexbor(data: bytes, name: str) -> Document:
    return html.parse(data, name=name)


def lexbor_without_roles(data: bytes, name: str) -> Document:
    """The shipped parser, the elements that ARIA roles mark as furniture kept."""
    real = html._drop_furniture_roles
    html._drop_furniture_roles = lambda tree: None  # type: ignore[assignment]
    try:
        return html.parse(data, name=name)
    finally:
        html._drop_furniture_roles = real


def _etree_reader(root, reader: html.PageReader) -> None:
    """Read an ElementTree-like tree (html5lib's, lxml's) as the shipped parser reads lexbor's,
    the same ARIA-role rule included."""
    stack = [(root, False)]
    while stack:
        element, leaving = stack.pop()
        tag = element.tag.rpartition("}")[2].lower() if isinstance(element.tag, str) else None
        if leaving:
            reader.leave(tag or "")
        elif tag is not None and not reader.skips(tag) and not _furniture_role(element):
            reader.enter(tag)
            if element.text:
                reader.text(element.text)
            stack.append((element, True))
            stack.extend((child, False) for child in reversed(element))
            continue
        if element.tail:
            reader.text(element.tail)


def _furniture_role(element) -> bool:
    role = element.get("role") or ""
    return any(word in html.SKIPPED_ROLES for word in role.lower().split())


def _title(root) -> str:
    found = root.find(".//title")
    return collapse("".join(found.itertext())) if found is not None else ""


def html5lib_parser(data: bytes, name: str) -> Document:
    import html5lib

    root = html5lib.HTMLParser(tree=html5lib.getTreeBuilder("etree"), namespaceHTMLElements=False)
    tree = root.parse(data)  # html5lib sniffs the encoding itself, as the parser before did
    reader = html.PageReader()
    _etree_reader(tree, reader)
    return reader.finish(_title(tree), name)


def lxml_parser(data: bytes, name: str) -> Document:
    import lxml.html

    tree = lxml.html.document_fromstring(html_utf8(data), parser=_lxml_parser())
    reader = html.PageReader()
    _etree_reader(tree, reader)
    return reader.finish(_title(tree), name)


@cache
def _lxml_parser():
    import lxml.html

    return lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)


def pdfium(data: bytes, name: str) -> Document:
    return pdf.parse(data, name=name)


def pypdf_parser(data: bytes, name: str) -> Document:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted and not reader.decrypt(""):
        raise ParseError("encrypted PDF (a password is needed to read it)")
    sections = []
    for number, page in enumerate(reader.pages, start=1):
        try:
            text = pdf.page_text(page.extract_text())
        except Exception:  # noqa: BLE001 - one damaged page, as the parser before skipped it
            continue
        if text:
            sections.append(Section(text=text, page=number))
    if not sections:
        raise ParseError("no text layer on any page")
    title = reader.metadata.title if reader.metadata and reader.metadata.title else ""
    first_line = sections[0].text.split("\n", 1)[0]
    return document(collapse(str(title)) or first_line or name, "pdf", sections)


CANDIDATES: dict[str, list[tuple[str, Parser, str]]] = {
    "html": [
        ("lexbor", lexbor, "selectolax"),
        ("lexbor, no role rule", lexbor_without_roles, "selectolax"),
        ("lxml (libxml2)", lxml_parser, "lxml"),
        ("html5lib (before)", html5lib_parser, "html5lib"),
    ],
    "pdf": [
        ("PDFium", pdfium, "pypdfium2"),
        ("pypdf (before)", pypdf_parser, "pypdf"),
    ],
}
"""Each kind's candidates, the shipped one first: (label, parse, the module it needs)."""


# -- parse only ----------------------------------------------------------------------------------


@dataclass
class Parsed:
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time, the PDFium worker's too: what the cores gave it
    chunks: int = 0
    refused: dict[str, str] = field(default_factory=dict)
    documents: dict[str, Document] = field(default_factory=dict)


def cpu_time() -> float:
    """CPU seconds of this process and of its children that ended: the PDFium worker's count
    once it is closed (close_workers)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def close_workers() -> None:
    pdf._WORKER.close()  # its CPU time is counted once it has ended; the next PDF starts another


def parse_all(files: dict[str, bytes], parser: Parser) -> Parsed:
    parsed = Parsed()
    close_workers()
    cpu = cpu_time()
    for relative, data in files.items():
        started = time.perf_counter()
        try:
            document = parser(data, Path(relative).stem)
            parsed.chunks += len(chunk(document, chunk_size=CHUNK_CHARS))
        except ParseError as exc:
            parsed.refused[relative] = exc.message
        else:
            parsed.documents[relative] = document
        parsed.seconds += time.perf_counter() - started
    close_workers()
    parsed.cpu_seconds = cpu_time() - cpu
    return parsed


def available(module: str) -> bool:
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 - not installed, or not importable here
        return False
    return True


def compare(shipped: Parsed, other: Parsed) -> dict:
    """How the text `other` gives differs from the shipped parser's, file by file."""
    same_words = words_shipped = words_other = 0
    titles = headings = pages = both = 0
    gained: Counter[str] = Counter()
    lost: Counter[str] = Counter()
    for relative, ours in shipped.documents.items():
        theirs = other.documents.get(relative)
        if theirs is None:
            continue
        both += 1
        a = Counter(w for s in ours.sections for w in tokenizer.tokens(s.text))
        b = Counter(w for s in theirs.sections for w in tokenizer.tokens(s.text))
        same_words += sum((a & b).values())
        words_shipped += sum(a.values())
        words_other += sum(b.values())
        gained.update(a - b)
        lost.update(b - a)
        titles += ours.title == theirs.title
        headings += [s.headings for s in ours.sections] == [s.headings for s in theirs.sections]
        pages += [s.page for s in ours.sections] == [s.page for s in theirs.sections]
    return {
        "files_both_read": both,
        "same_words_share": same_words / max(words_shipped, words_other, 1),
        "words_shipped": words_shipped,
        "words_other": words_other,
        "same_titles": titles,
        "same_heading_chains": headings,
        "same_cited_pages": pages,
        "refused_by_shipped_only": sorted(set(shipped.refused) - set(other.refused)),
        "refused_by_other_only": sorted(set(other.refused) - set(shipped.refused)),
        "words_only_shipped_gives": [w for w, _ in gained.most_common(12)],
        "words_only_other_gives": [w for w, _ in lost.most_common(12)],
    }


def parse_only(
    kind: str, files: dict[str, bytes], log: Callable[[str], None], *, shipped_only: bool
) -> dict:
    megabytes = sum(map(len, files.values())) / 1e6
    rows: dict[str, dict] = {}
    shipped: Parsed | None = None
    for label, parser, module in CANDIDATES[kind][: 1 if shipped_only else None]:
        if not available(module):
            rows[label] = {"available": False, "needs": module}
            log(f"  {label}: not available (needs {module})")
            continue
        parsed = parse_all(files, parser)
        row = {
            "available": True,
            "seconds": parsed.seconds,
            "files_per_s": len(files) / parsed.seconds,
            "mb_per_s": megabytes / parsed.seconds,
            "chunks": parsed.chunks,
            "chunks_per_s": parsed.chunks / parsed.seconds,
            "cpu_seconds": parsed.cpu_seconds,
            "chunks_per_cpu_s": parsed.chunks / parsed.cpu_seconds,
            "refused": len(parsed.refused),
        }
        if shipped is None:
            shipped = parsed
        else:
            row["time_over_shipped"] = parsed.seconds / shipped.seconds
            row["text"] = compare(shipped, parsed)
        rows[label] = row
        log(f"  {label}: {parsed.seconds:.2f} s, {row['chunks_per_s']:,.0f} chunks/s")
    return rows


# -- the whole index ---------------------------------------------------------------------------


class Stages:
    """Time spent in each stage of an index run, by wrapping the functions that do them."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: object, attribute: str, stage: str) -> None:
        real = getattr(owner, attribute)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[stage] += time.perf_counter() - started

        setattr(owner, attribute, timed)
        self._undo.append(lambda: setattr(owner, attribute, real))

    def __enter__(self) -> Stages:
        self.wrap(ingest, "read_all", "read")
        self.wrap(parsing, "parse", "parse")
        self.wrap(chunking, "chunk", "chunk")  # parse_pool.parse_chunks calls it
        self.wrap(tokenizer, "tokens", "words")  # what FTS5 calls for each row it writes
        self.wrap(Store, "replace_document", "write")
        return self

    def __exit__(self, *exc: object) -> None:
        for undo in reversed(self._undo):
            undo()


def whole_index(kind: str, paths: Sequence[Path], root: Path, work: Path) -> dict:
    """One index run over a copy of `paths` (so that the files read are these alone)."""
    copy = work / f"corpus-{kind}"
    shutil.rmtree(copy, ignore_errors=True)
    for path in paths:
        target = copy / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    base_path = work / f"{kind}.db"
    base_path.unlink(missing_ok=True)
    with Stages() as stages, Base(base_path, create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING)
        base.add_source(copy)
        close_workers()
        cpu = cpu_time()
        report = base.index(workers=1)  # parsed here, where the wrappers see each stage
        close_workers()
        cpu = cpu_time() - cpu
    seconds = dict(stages.seconds)
    seconds["write"] = seconds.get("write", 0.0) - seconds.get("words", 0.0)
    seconds["rest"] = report.seconds - sum(seconds.values())
    return {
        "files": report.added,
        "skipped": len(report.skipped),
        "chunks": report.chunks,
        "seconds": report.seconds,
        "chunks_per_s": report.chunks / report.seconds,
        "cpu_seconds": cpu,
        "chunks_per_cpu_s": report.chunks / cpu,
        "shares": {stage: s / report.seconds for stage, s in seconds.items()},
        "aim": AIMS[kind],
    }


# -- the run -----------------------------------------------------------------------------------


def corpus_files(kind: str, folder: Path, limit: int | None = None) -> list[Path]:
    found = sorted(p for p in folder.rglob("*") if p.suffix in SUFFIXES[kind] and p.is_file())
    return found[:limit] if limit else found


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def table(results: dict) -> str:
    lines = [f"load average at start {results['load_start']}, at end {results['load_end']}"]
    for kind, figures in results["kinds"].items():
        if "missing" in figures:
            lines.append(f"\n{kind}: {figures['missing']}")
            continue
        lines.append(
            f"\n{kind}: {figures['files']} files, {figures['megabytes']:.1f} MB ({figures['where']})"
        )
        lines.append(
            f"  {'parse + chunk, one core':<26} {'s':>7} {'files/s':>8} {'MB/s':>6} "
            f"{'chunks/s':>9} {'per CPU s':>9} {'× time':>7} {'refused':>7} {'same words':>10}"
        )
        for label, row in figures["parse_only"].items():
            if not row["available"]:
                lines.append(f"  {label:<26} not available (needs {row['needs']})")
                continue
            ratio = row.get("time_over_shipped", 1.0)
            same = row["text"]["same_words_share"] if "text" in row else 1.0
            lines.append(
                f"  {label:<26} {row['seconds']:>7.2f} {row['files_per_s']:>8.1f} "
                f"{row['mb_per_s']:>6.1f} {row['chunks_per_s']:>9,.0f} "
                f"{row['chunks_per_cpu_s']:>9,.0f} {ratio:>7.2f} "
                f"{row['refused']:>7} {same:>10.1%}"
            )
        for label, row in figures["parse_only"].items():
            if "text" not in row:
                continue
            text = row["text"]
            both = text["files_both_read"]
            lines.append(
                f"  beside {label}: of {both} files both read, same titles {text['same_titles']}, "
                f"same heading chains {text['same_heading_chains']}, same cited pages "
                f"{text['same_cited_pages']}; refused by the shipped parser only "
                f"{len(text['refused_by_shipped_only'])}, by it only "
                f"{len(text['refused_by_other_only'])}"
            )
            lines.append(f"    words only the shipped gives: {text['words_only_shipped_gives']}")
            lines.append(f"    words only it gives:          {text['words_only_other_gives']}")
        index = figures.get("index")
        if index:
            verdict = "PASS" if index["chunks_per_s"] >= index["aim"] else "MISS"
            shares = ", ".join(f"{k} {v:.0%}" for k, v in index["shares"].items())
            lines.append(
                f"  whole index, no embeddings: {index['chunks']:,} chunks of {index['files']} "
                f"files in {index['seconds']:.1f} s = {index['chunks_per_s']:,.0f} chunks/s "
                f"(aim ≥ {index['aim']:,.0f}: {verdict}), "
                f"{index['chunks_per_cpu_s']:,.0f} per CPU second; {shares}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default="html,pdf", help="html, pdf or both (default)")
    parser.add_argument("--html", type=Path, default=CORPORA["html"], help="HTML corpus folder")
    parser.add_argument("--pdf", type=Path, default=CORPORA["pdf"], help="PDF corpus folder")
    parser.add_argument("--limit", type=int, help="only the first N files of each kind")
    parser.add_argument("--no-index", action="store_true", help="parse only, no whole index")
    parser.add_argument(
        "--shipped-only", action="store_true", help="only the shipped parsers (a quick rerun)"
    )
    parser.add_argument("--work", type=Path, help="folder for the corpus copies and bases")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # it logs each repair it makes

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    work = args.work or Path(tempfile.mkdtemp(prefix="metis-bench-parsing-"))
    work.mkdir(parents=True, exist_ok=True)
    results: dict = {"load_start": load(), "kinds": {}}
    try:
        for kind in [k.strip() for k in args.kinds.split(",") if k.strip()]:
            folder = getattr(args, kind)
            paths = corpus_files(kind, folder, args.limit) if folder.is_dir() else []
            if not paths:
                results["kinds"][kind] = {"missing": f"no {kind} files under {folder}"}
                log(f"{kind}: no files under {folder}")
                continue
            files = {str(p.relative_to(folder)): p.read_bytes() for p in paths}
            figures: dict = {
                "where": str(folder),
                "files": len(files),
                "megabytes": sum(map(len, files.values())) / 1e6,
            }
            log(f"{kind}: {len(files)} files, parse only …")
            figures["parse_only"] = parse_only(kind, files, log, shipped_only=args.shipped_only)
            if not args.no_index:
                log(f"{kind}: the whole index …")
                figures["index"] = whole_index(kind, paths, folder, work)
            results["kinds"][kind] = figures
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    results["load_end"] = load()
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
