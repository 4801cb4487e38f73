"""Tesseract, Debian's `tesseract-ocr`, run as a command: the text of a scanned page or image.

Each page is one `tesseract stdin - -l LANGS` process, fed the image on its stdin: its own
time (OCR_PAGE_S, then killed) and memory (its data segment capped at OCR_MEMORY, or at the
caller's own cap when lower: a parse worker's share, a PDFium worker's), so a page that
tesseract cannot read, or that crashes it, costs that page only. A Python binding (tesserocr)
reads a page ~0.5 CPU s faster, but with a Tesseract of its own wheel, not Debian's, and inside
the process that calls it: the command was chosen (docs/parsing.md, OCR, has the figures).

Tesseract reads a file that is no image it knows as a list of file names, each of which it
then opens and reads: only bytes whose format was checked from their header (image.py, or a
page this package rendered itself) are ever handed to it.

A long scan says its pages: each page OCR is about to read is told, in order, to the listener
of the thread that parses the file (`told`; scans.py tells them from PDFium's worker, through
pdf_worker.py's answer stream), which in an index run passes it on to the run's progress line
(indexing/ocr_pages.py). Where no one listens, nothing is told.

Languages: `+`-joined names of Tesseract's language packs (`eng+deu`); by default the packs
installed here (`tesseract --list-langs`), osd aside, English first, at most
DEFAULT_LANGUAGES_MAX of them (each pack read slows each page).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from metis_lite.errors import InvalidRequest, ParseError

TESSERACT = "tesseract"
"""The command, looked up on PATH when a run starts (Debian: /usr/bin/tesseract)."""

NO_TEXT_LAYER = "NO_TEXT_LAYER"
"""The code of a page or image left unread because it has no text layer and no OCR is here:
each such file's reason starts with it, and a run warns once with the count."""

TOO_SMALL = "TOO_SMALL"
"""The code of an image too small to hold text, refused from its header (image.py): a run
leaves it out without a word (indexing/ocr_run.py)."""

INSTALL_HINT = "install tesseract-ocr to read scanned pages and images (docs/parsing.md, OCR)"
"""What a person does about NO_TEXT_LAYER."""

OCR_PAGE_S = 60.0
"""The longest one page's OCR may take; then tesseract is killed and the page left unread.
A 300 dpi A4 page takes ~0.8 s on one core of a busy 2-core machine (docs/parsing.md)."""

OCR_FILE_S = 600.0
"""The longest the OCR of one file's pages may take in all: the pages after it are left
unread, said in the run's report (a 2,000-page scan at ~1 s a page is read in part, not
for half an hour on one core). The file's parse deadline grows by as much (`deadline_s`)."""

OCR_MEMORY = 768 * 1024 * 1024
"""The data segment a tesseract process is capped at (RLIMIT_DATA), or its caller's own cap
when lower. A 300 dpi A4 page takes tesseract ~70 MB; a page of OCR_PIXELS_MAX, kept at 4
bytes a pixel by Leptonica, ~200 MB more."""

OCR_PIXELS_MAX = 50_000_000
"""The largest image OCR reads, in pixels (an A4 page at 600 dpi is 35 million): a larger
one is refused from its header before anything decodes it (an image bomb declares 10
gigapixels in a few bytes); a PDF page is rendered at OCR_DPI or less, to fit."""

OCR_DPI = 300
"""The resolution a PDF page is rendered at for OCR: Tesseract's own advice."""

DEFAULT_LANGUAGES_MAX = 3
"""The most installed language packs read by default (each one costs each page time)."""

OCR_THREADS_ENV = {"OMP_THREAD_LIMIT": "1"}
"""Tesseract on one thread: a parse worker is one core's, and on a busy 2-core machine its
OpenMP threads made ten pages 4× slower (95.8 s against 23.2 s: docs/parsing.md)."""

_LANGUAGE = re.compile(r"[A-Za-z0-9_]{1,40}(/[A-Za-z0-9_]{1,40})?")
"""A pack's name: `eng`, `chi_sim`, or a script's, `script/Latin` (never a path upward)."""


Listener = Callable[[int, int], None]
"""listener(page, pages): OCR reads page `page` (1-based) of a file of `pages` pages next."""

_listening = threading.local()


@contextmanager
def told(listener: Listener | None) -> Iterator[None]:
    """Tell `listener` the pages OCR reads in this thread meanwhile (None: no one)."""
    before = getattr(_listening, "listener", None)
    _listening.listener = listener
    try:
        yield
    finally:
        _listening.listener = before


def tell(page: int, pages: int) -> None:
    """OCR is about to read `page` of `pages`: told to this thread's listener, if any."""
    listener = getattr(_listening, "listener", None)
    if listener is not None:
        listener(page, pages)


def tesseract() -> str | None:
    """Where the tesseract command is, or None when OCR is not available here."""
    return shutil.which(TESSERACT)


@functools.lru_cache(maxsize=4)
def _installed(command: str) -> tuple[str, ...]:
    try:
        done = subprocess.run(
            [command, "--list-langs"], capture_output=True, timeout=30, env=_env(), check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    lines = done.stdout.decode("utf-8", "replace").splitlines()
    return tuple(line.strip() for line in lines[1:] if _LANGUAGE.fullmatch(line.strip()))


def installed_languages() -> tuple[str, ...]:
    """The language packs installed here (osd, the script detector, included); () without
    tesseract."""
    command = tesseract()
    return _installed(command) if command else ()


def default_languages() -> str:
    """The languages OCR reads when a source names none: the installed packs but osd,
    English first, at most DEFAULT_LANGUAGES_MAX; "" without tesseract."""
    packs = sorted((p for p in installed_languages() if p != "osd"), key=lambda p: (p != "eng", p))
    return "+".join(packs[:DEFAULT_LANGUAGES_MAX])


def check_languages(languages: str) -> str:
    """`languages` as stored with a source (`eng+deu`), or INVALID_REQUEST with why."""
    names = [name for name in languages.strip().split("+") if name]
    if not names or not all(_LANGUAGE.fullmatch(name) for name in names):
        raise InvalidRequest(
            f"OCR languages are Tesseract's pack names joined by '+' (eng+deu), not {languages!r}"
        )
    return "+".join(dict.fromkeys(names))


def languages_for(asked: str) -> tuple[str, tuple[str, ...]]:
    """The languages OCR reads for a source that asked for `asked` ("": the default), and
    those it asked for that are not installed (left out, with a warning: ingest). ("", ())
    without tesseract: OCR is off."""
    installed = installed_languages()
    if not installed:
        return "", ()
    if not asked:
        return default_languages(), ()
    names = asked.split("+")
    missing = tuple(name for name in names if name not in installed)
    kept = "+".join(name for name in names if name in installed)
    return (kept or default_languages()), missing


def deadline_s(kind: str) -> float:
    """The time a file of `kind` may take beyond its parse for its pages' OCR."""
    return OCR_FILE_S if kind in ("pdf", "image") else 0.0


def read(
    image: bytes | bytearray, languages: str, *, dpi: int | None = None, seconds: float = OCR_PAGE_S
) -> str:
    """The text tesseract reads in `image` (bytes whose format was checked: see the module),
    in `languages`; ParseError with why when it cannot (no time left, out of memory, an
    image it cannot decode, a language it cannot load)."""
    command = tesseract()
    if command is None:
        raise ParseError(f"{NO_TEXT_LAYER}: no text layer, and no OCR here: {INSTALL_HINT}")
    limit = _memory_cap() // 1024
    args = ["stdin", "-", "-l", languages, *(["--dpi", str(dpi)] if dpi else [])]
    script = f'ulimit -d {limit} 2>/dev/null; exec "$0" "$@"'
    try:
        done = subprocess.run(
            ["sh", "-c", script, command, *args],
            input=image,
            capture_output=True,
            timeout=seconds,
            env=_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ParseError(f"OCR took longer than {seconds:.0f} s on it") from exc
    except OSError as exc:
        raise ParseError(f"OCR could not run ({exc.strerror or exc})") from exc
    if done.returncode != 0:
        raise ParseError(f"OCR could not read it ({_why(done)})")
    return done.stdout.decode("utf-8", "replace")


def _why(done: subprocess.CompletedProcess[bytes]) -> str:
    if done.returncode < 0:
        return f"tesseract killed by signal {-done.returncode}: out of memory, or a crash"
    lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line]
    errors = [line for line in lines if "rror" in line or "annot" in line or "ailed" in line]
    return (errors or lines or [f"exit status {done.returncode}"])[0][:160]


def _memory_cap() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_DATA)[0]
    except (ImportError, AttributeError, ValueError, OSError):
        return OCR_MEMORY
    return OCR_MEMORY if soft in (resource.RLIM_INFINITY, -1) else min(OCR_MEMORY, soft)


def _env() -> dict[str, str]:
    return {**os.environ, **OCR_THREADS_ENV}
