"""Keeping an HTML page's nesting cheap to parse: a bound of its cost, and a flattened copy of
the few pages past it.

An HTML5 tree builder checks "is there a <p> in scope" on every `<div>`, and looks for the
element an end tag closes, by scanning its stack of open elements: 100,000 nested `<div>`s cost
quadratic time (lexbor takes ~20 s on that 500 KB file). Real pages nest a few dozen deep.

`scan_work` bounds that cost from the bytes alone, in C speed (NumPy): the stack's depth before
each tag is at most the number of tags opened before it and not yet closed — counting every
`<x` as an open and every `</` as a close, which over-counts (`<br>`, `a<b` in a script) and so
is a bound. A page under SCAN_BUDGET is parsed as it is. Above it, `flatten` rewrites the tags
the way browsers flatten over-deep trees: past FLATTEN_DEPTH open elements, the element on top
is closed (its end tag inserted) before the next one opens, so every word is kept, in order,
and the depth stays bounded. An end tag that closes elements above its own (`</div>` over an
open `<b>`) gets their end tags written before it: a browser reopens a formatting element
closed without one (HTML's active formatting elements), past the bound. Tables, foreign content (SVG, MathML) and the document's own
elements are never closed so: markup that still nests past MAX_OPEN_ELEMENTS is refused.
"""

from __future__ import annotations

import re

import numpy as np

from metis_lite.errors import ParseError

SCAN_BUDGET = 50_000_000
"""Open elements a parse may scan, summed over its tags: at lexbor's ~4 × 10⁸ a second, about
0.1 s. The largest page of Python's documentation (contents.html, 98,000 tags) bounds at 2.1 M."""

SAFE_TAGS = 10_000
"""A page with at most this many `<` costs at most SAFE_TAGS² / 2 scans, within the budget,
however it nests: it is not even bounded."""

BLOCK_BYTES = 1 << 22
"""The bound is computed over blocks of 4 MiB, so that its arrays stay small."""

FLATTEN_DEPTH = 64
"""Past this many open elements, the element on top is closed before the next one opens."""

MAX_OPEN_ELEMENTS = 512
"""A page that still nests deeper than this after flattening is refused (Chromium's limit)."""

KEPT = frozenset(
    b"html head body table caption colgroup thead tbody tfoot tr td th template select "
    b"svg math frameset".split()
)
"""Elements never closed early: their end tags do more than close them (tables, the document
itself), or they switch the parser into another mode (SVG, MathML)."""

VOID = frozenset(
    b"area base basefont bgsound br col embed frame hr image img input keygen link meta param "
    b"source track wbr".split()
)
"""Elements that never hold content: opening one pushes nothing."""

RAW_TEXT = frozenset(b"script style textarea title xmp iframe noembed noframes plaintext".split())
"""Elements whose content is text, not markup: a `<` inside them opens nothing."""

SPECIAL = frozenset(
    b"address applet area article aside base basefont bgsound blockquote body br button "
    b"caption center col colgroup dd details dir div dl dt embed fieldset figcaption figure "
    b"footer form frame frameset h1 h2 h3 h4 h5 h6 head header hgroup hr html iframe img input "
    b"keygen li link listing main marquee menu meta nav noembed noframes noscript object ol p "
    b"param plaintext pre script search section select source style summary table tbody td "
    b"template textarea tfoot th thead title tr track ul wbr xmp".split()
)
"""HTML's special elements: an end tag of another element never closes one."""

SCOPE = frozenset(b"applet caption html table td th marquee object template svg math".split())
"""Where "in scope" stops: a special element's end tag closes nothing past one of these."""

FORMATTING = frozenset(b"a b big code em font i nobr s small strike strong tt u".split())
"""Closed by their end tag even past a special element (the adoption agency), not past a scope
boundary."""

_TAG = re.compile(rb"<!--.*?(?:-->|\Z)|<(/?)([a-zA-Z][^\s/>]*)[^>]*>?", re.DOTALL)

_LT, _SLASH = ord("<"), ord("/")


def scan_work(data: bytes, *, safe_tags: int = SAFE_TAGS, block_bytes: int = BLOCK_BYTES) -> int:
    """A bound of the open elements an HTML parser scans on `data` (UTF-8), summed over tags;
    0 for a page of at most `safe_tags` tags, which is not even looked at."""
    if data.count(b"<") <= safe_tags:
        return 0
    total = 0
    depth = 0  # the bound's depth at the end of the block before
    for start in range(0, len(data), block_bytes):
        block = np.frombuffer(data, np.uint8, min(block_bytes + 1, len(data) - start), start)
        after = block[np.flatnonzero(block[:-1] == _LT) + 1]
        lower = after | 0x20  # lower case, for letters
        opens = (lower >= ord("a")) & (lower <= ord("z"))
        closes = after == _SLASH
        tags = opens | closes  # `<!--`, `<?`, `a < b` are no tags
        step = opens[tags].astype(np.int64) - closes[tags]
        running = depth + np.cumsum(step)
        # A close with nothing open closes nothing: the depth is the walk reflected at 0.
        depths = running - np.minimum(np.minimum.accumulate(running), 0)
        total += int(depths.sum())
        if len(depths):
            depth = int(depths[-1])
    return total


def bounded(data: bytes) -> bytes:
    """`data` as it is when its scan work is within SCAN_BUDGET, else flattened."""
    return data if scan_work(data) <= SCAN_BUDGET else flatten(data)


def flatten(data: bytes) -> bytes:
    """The page with an end tag inserted wherever its nesting goes past FLATTEN_DEPTH (see the
    module). Raises ParseError when it nests past MAX_OPEN_ELEMENTS even so."""
    out: list[bytes] = []
    stack = _OpenElements()
    copied = 0
    at = 0
    while (tag := _TAG.search(data, at)) is not None:
        at = tag.end()
        if tag[2] is None:
            continue  # a comment
        name = tag[2].lower()
        if tag[1]:
            closed = stack.end_tag(name)
            if len(closed) > 1:  # said outright, so no parser reopens a formatting one later
                out += (data[copied : tag.start()], *(b"</" + n + b">" for n in closed[:-1]))
                copied = tag.start()
            continue
        if name in VOID:
            continue
        if len(stack) >= FLATTEN_DEPTH:
            closers = []
            while len(stack) >= FLATTEN_DEPTH and stack.top not in KEPT:
                closers.append(b"</" + stack.pop() + b">")
            if closers:
                out += (data[copied : tag.start()], *closers)
                copied = tag.start()
            if len(stack) >= MAX_OPEN_ELEMENTS:
                raise ParseError(f"HTML nested too deeply (over {MAX_OPEN_ELEMENTS} elements)")
        if name in RAW_TEXT:
            end = re.compile(rb"</" + re.escape(name) + rb"[\s/>]", re.IGNORECASE).search(data, at)
            at = end.start() if end else len(data)
            continue
        stack.push(name)
    out.append(data[copied:])
    return b"".join(out)


class _OpenElements:
    """The stack of open elements as the page's own tags build it, with an end tag closing what
    a browser's would (HTML's "any other end tag", "in scope"), each step in O(1): where each
    name, the topmost special element and the topmost scope boundary stand is kept."""

    def __init__(self) -> None:
        self._names: list[bytes] = []
        self._at: dict[bytes, list[int]] = {}  # a name → where it is open, bottom to top
        self._special: list[int] = []
        self._scope: list[int] = []

    def __len__(self) -> int:
        return len(self._names)

    @property
    def top(self) -> bytes:
        return self._names[-1]

    def push(self, name: bytes) -> None:
        at = len(self._names)
        self._names.append(name)
        self._at.setdefault(name, []).append(at)
        if name in SPECIAL:
            self._special.append(at)
        if name in SCOPE:
            self._scope.append(at)

    def pop(self) -> bytes:
        name = self._names.pop()
        at = len(self._names)
        self._at[name].pop()
        if self._special and self._special[-1] == at:
            self._special.pop()
        if self._scope and self._scope[-1] == at:
            self._scope.pop()
        return name

    def end_tag(self, name: bytes) -> list[bytes]:
        """Close what `</name>` closes: the topmost `name`, unless a scope boundary stands
        above it (a special or formatting one), or a special element does (any other). Returns
        the elements closed, top first: `name` last, those above it before."""
        where = self._at.get(name)
        if not where:
            return []
        at = where[-1]
        if name in SPECIAL or name in FORMATTING:
            if self._scope and self._scope[-1] > at:
                return []
        elif self._special and self._special[-1] > at:
            return []
        return [self.pop() for _ in range(len(self._names) - at)]
