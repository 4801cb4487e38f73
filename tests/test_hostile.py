"""Hostile input through the real pipeline: any question against a real base, any document
text through parse → chunk → store → FTS5 → search → snippet, and a corpus of malformed and
adversarial files indexed within bounded time and memory.

tests/test_tokenizer.py, test_chunking.py and test_snippet.py hold the properties of each
piece alone; these hold them end to end.
"""

from __future__ import annotations

import functools
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from consistency import check_consistent, expected_chunks
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from made_pdfs import pdf_with_stream

from metis_lite import parsing
from metis_lite.base.core import Base
from metis_lite.indexing import parse_pool
from metis_lite.indexing.parse_pool import PDF_READERS_MAX, ParseJob
from metis_lite.parsing.pdf_worker import PDF_MEMORY_BUDGET
from metis_lite.records import Filters
from metis_lite.retrieval.snippet import ELLIPSIS
from metis_lite.settings import CHUNK_CHARS, KINDS, MODES, SNIPPET_CHARS
from metis_lite.text.chunking import chunk
from metis_lite.text.plain import plain_text
from metis_lite.text.tokenizer import tokens

WARNING_CODES = {
    "EMPTY_QUESTION",
    "EMBEDDING_MODEL_UNAVAILABLE",
    "RERANKER_UNAVAILABLE",
    "NO_VECTORS",
    "CHUNKS_WITHOUT_VECTORS",
    "NOTHING_INDEXED_YET",
    "NO_DOCUMENTS",
    "NO_MATCHING_DOCUMENTS",
    "MODEL_LANGUAGE_MISMATCH",
    "WORDS_INDEX_OUTDATED",
}

FTS5_SYNTAX = [
    '"',
    "'",
    "*",
    "(",
    ")",
    ":",
    "^",
    "-",
    "+",
    "AND",
    "OR",
    "NOT",
    "NEAR",
    "NEAR(",
    "{",
    "}",
    ",",
]

# Any text (lone surrogates too: a JSON body may carry them), and text built from FTS5's syntax.
QUESTIONS = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=200),
    st.lists(
        st.one_of(
            st.sampled_from(FTS5_SYNTAX), st.sampled_from(["vacation", "Xid", "79", "proxy"])
        ),
        max_size=12,
    ).map(" ".join),
)

FILTERS = st.builds(
    Filters,
    path_prefix=st.one_of(
        st.none(), st.sampled_from(["policies/", "it/", "ti/", ""]), st.text(max_size=10)
    ),
    kinds=st.lists(st.sampled_from(KINDS + ("note",)), max_size=3, unique=True).map(tuple),
    sources=st.lists(st.one_of(st.just("handbook"), st.text(max_size=8)), max_size=2).map(tuple),
)


@pytest.fixture(scope="module")
def handbook(example_base_file, tmp_path_factory):
    """The example base with its embedded model: questions are embedded for real."""
    copy = tmp_path_factory.mktemp("hostile") / "handbook.db"
    shutil.copy(example_base_file, copy)
    with Base(copy) as base:
        yield base


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    question=QUESTIONS,
    mode=st.sampled_from(MODES),
    top_k=st.integers(1, 30),
    rerank=st.booleans(),
    filters=FILTERS,
)
def test_any_question_in_any_mode_answers_at_most_top_k_whole_cited_results(
    handbook, question, mode, top_k, rerank, filters
):
    answer = handbook.search(question, mode=mode, top_k=top_k, rerank=rerank, filters=filters)
    assert answer.mode == mode
    assert {w.code for w in answer.warnings} <= WARNING_CODES
    assert len(answer.results) <= top_k
    assert len({r.chunk_id for r in answer.results}) == len(answer.results)
    scores = [r.score for r in answer.results]
    assert scores == sorted(scores, reverse=True)
    for result in answer.results:
        citation = result.citation
        if filters.path_prefix:
            assert citation.document.startswith(filters.path_prefix)
        if filters.kinds:
            assert citation.kind in filters.kinds
        if filters.sources:
            assert citation.source in filters.sources
        assert result.text and len(citation.snippet) <= SNIPPET_CHARS
        # A snippet is cut from the chunk as it reads (a Markdown chunk without its syntax).
        shown = " ".join(plain_text(result.text, citation.kind).split())
        assert citation.snippet.strip(ELLIPSIS)[:20] in shown
        if mode == "keyword":
            assert result.scores.dense is None and result.scores.keyword is not None
        if mode == "dense":
            assert result.scores.keyword is None and result.scores.dense is not None


# -- any document through the pipeline ------------------------------------------------------

WORDY = st.characters(
    categories=("L", "M", "N", "P", "S", "Zs"), include_characters="\n\t\x00\u200b"
)
PARAGRAPH = st.text(alphabet=WORDY, min_size=0, max_size=400)
MARKDOWN = st.lists(
    st.one_of(
        PARAGRAPH,
        st.builds(lambda n, t: "#" * n + " " + t.replace("\n", " "), st.integers(1, 7), PARAGRAPH),
        st.builds(lambda t: "```\n" + t + "\n```", PARAGRAPH),
        st.builds(lambda t: "| " + t.replace("\n", " | ") + " |", PARAGRAPH),
    ),
    max_size=12,
).map("\n\n".join)


def _left_over(wanted: str, text: str) -> str | None:
    """What of `text` is left once `wanted` is read in it in order (None: it is not there)."""
    rest: list[str] = []
    at = 0
    for char in text:
        if at < len(wanted) and char == wanted[at]:
            at += 1
        else:
            rest.append(char)
    return "".join(rest) if at == len(wanted) else None


def _non_space(text: str) -> str:
    return "".join(text.split())


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    files=st.lists(st.tuples(st.sampled_from(["md", "txt"]), MARKDOWN), min_size=1, max_size=3),
    chunk_size=st.sampled_from([100, 250, CHUNK_CHARS]),
)
def test_any_text_is_chunked_stored_found_and_snippeted_whole(files, chunk_size):
    with tempfile.TemporaryDirectory() as scratch:
        src = Path(scratch) / "src"
        src.mkdir()
        for n, (kind, text) in enumerate(files):
            (src / f"f{n}.{kind}").write_text(text, encoding="utf-8")
        with words_only_base(Path(scratch) / "b.db", src) as base:
            base.configure(chunk_size=chunk_size)
            report = base.index()
            stored = {
                path: [
                    r[0]
                    for r in base.store.db.execute(
                        "SELECT c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
                        " WHERE d.path = ? ORDER BY c.ordinal",
                        (path,),
                    )
                ]
                for (path,) in base.store.db.execute("SELECT path FROM documents")
            }
            skipped = {s.path.split("/", 1)[1] for s in report.skipped}
            # a file with the bytes and kind of another is that document's copy (stored once)
            copied = {r[0] for r in base.store.db.execute("SELECT path FROM document_copies")}
            every = {f"f{n}.{kind}" for n, (kind, _) in enumerate(files)}
            assert set(stored) | skipped | copied == every
            for path, texts in stored.items():
                document = parsing.parse(src / path)
                # Stored exactly as cut, each within the size, and nothing of a section lost.
                assert texts == [c.text for c in chunk(document, chunk_size=chunk_size)]
                assert all(0 < len(t) <= chunk_size for t in texts)
                # A section too short to stand alone joins its neighbour with its own headings
                # as a line in front: the sections' text, in order, and only headings besides.
                extra = _left_over(
                    _non_space("".join(s.text for s in document.sections)),
                    _non_space("".join(texts)),
                )
                headings = Counter(
                    _non_space("".join(" > ".join(s.headings) for s in document.sections))
                )
                assert extra is not None and not Counter(extra) - headings
            check_consistent(Path(scratch) / "b.db", expected_chunks(src, chunk_size))

            # The rarest word of each chunk finds it, and its snippet shows that word.
            counts = Counter(w for texts in stored.values() for t in texts for w in set(tokens(t)))
            for texts in stored.values():
                for text in texts:
                    words = [w for w in tokens(text) if len(w) < 30]
                    if not words:
                        continue
                    word = min(words, key=lambda w: (counts[w], w))
                    if counts[word] > 20:
                        continue
                    answer = base.search(  # each text, though another has its words
                        word, mode="keyword", top_k=50, rerank=False, collapse=False
                    )
                    hit = [r for r in answer.results if r.text == text]
                    assert hit, (word, text)
                    assert len(hit[0].citation.snippet) <= SNIPPET_CHARS
                    assert word in tokens(hit[0].citation.snippet), (word, hit[0])  # tokens folds


# -- a corpus of malformed and adversarial files --------------------------------------------

PEAK_RSS_BYTES = 1536 * 1024 * 1024
"""The peak memory of the indexer and every process it started, together, on this corpus:
PDFium's budget for the run (1 GiB: its workers stay within it however many there are), the
indexer (~100 MB: the 20 MB line; up to 64 MiB of files read and not yet written) and the
parse workers (~60 MB each, more while one reads a large file: a tag bomb is refused from its
bytes, before lexbor builds a tree of it)."""

INDEX_TIMEOUT_S = 120
"""Generous; not a benchmark: it only says that no file makes the indexer hang or go quadratic."""


def _docx_with_body(body: str) -> bytes:
    """The example onboarding.docx with its body replaced by `body` (WordprocessingML)."""
    out = io.BytesIO()
    source = EXAMPLES / "people" / "onboarding.docx"
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "word/document.xml":
                head, tail = data.decode().split("<w:body>", 1)
                data = (head + "<w:body>" + body + tail[tail.index("<w:sectPr") :]).encode()
            zout.writestr(item, data)
    return out.getvalue()


def _lying_zip(data: bytes) -> bytes:
    """A DOCX whose directory says every part is 1 KB, while it inflates to far more."""
    patched = bytearray(data)
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = patched.find(signature)
        while at != -1:
            patched[at + offset : at + offset + 4] = (1024).to_bytes(4, "little")
            at = patched.find(signature, at + 4)
    return bytes(patched)


def _broken_xref_pdf() -> bytes:
    pdf = (EXAMPLES / "it" / "security-guide.pdf").read_bytes()
    at = pdf.rindex(b"startxref")
    pdf = pdf[:at] + b"startxref\n999999999\n%%EOF\n"
    xref = pdf.find(b"\nxref")
    if xref != -1:  # offsets that point nowhere
        pdf = pdf[:xref] + pdf[xref:].replace(b" 00000 n", b" 99999 n")
    return pdf


TAG_BOMB_BYTES = 49_000_000
"""A tag bomb's size: under a base's largest file (MAX_FILE_BYTES, 50 MiB)."""

TAG_BOMBS = {
    "p-bomb.html": b"<p>",  # 16 million: took a parse worker past 4 GB
    "px-bomb.html": b"<p>x",
    "br-bomb.html": b"<br>",
    "comment-bomb.html": b"<!---->",
    "anchor-bomb.html": b"<a b=c>",
}
"""HTML pages of one tag repeated, each costing lexbor ~300 bytes or more an element; five
such pages took a run's processes past 6 GB together."""


def tag_bombs() -> dict[str, bytes]:
    """The tag bombs, made here (49 MB each; nothing of them is committed)."""
    return {name: tag * (TAG_BOMB_BYTES // len(tag)) for name, tag in TAG_BOMBS.items()}


def adversarial_corpus(folder: Path) -> dict[str, str]:
    """Write the corpus; returns name → a word that must be found if the file is indexed."""
    rng = random.Random(79)
    folder.mkdir()
    files: dict[str, bytes] = {
        "deep.html": b"<div>" * 100_000 + b"deepmarker text" + b"</div>" * 100_000,
        "deep-inline.html": b"<b><i><u>" * 30_000 + b"inlinemarker text",
        "wide-table.html": b"<table><tr>" + b"<td>cell</td>" * 100_000 + b"</tr></table>",
        "huge-line.txt": b" ".join(b"linemarker%d" % (i % 1000) for i in range(1_700_000)),
        "one-word.txt": b"x" * 5_000_000,
        "million-paragraphs.md": b"".join(b"p%d\n\n" % i for i in range(1_000_000)),
        "headings.md": b"".join(
            b"# Heading %d\n\nheadingmarker%d\n\n" % (i, i) for i in range(10_000)
        ),
        "deep-headings.md": b"".join(b"#" * (1 + i % 6) + b" H%d\n" % i for i in range(10_000)),
        "long-heading.md": b"# " + b"title " * 200_000 + b"\n\nbody of the long heading\n",
        "garbage.md": rng.randbytes(2_000_000),
        "nul.txt": b"\x00" * 1_000_000,
        "bomb.docx": _docx_with_body("<w:p/>" * 3_500_000),
        "lying-bomb.docx": _lying_zip(
            _docx_with_body("<w:p><w:r><w:t>bomb</w:t></w:r></w:p>" * 300_000)
        ),
        "broken-xref.pdf": _broken_xref_pdf(),
        "half.pdf": (EXAMPLES / "it" / "security-guide.pdf").read_bytes()[:15_000],
        "bomb.pdf": pdf_with_stream(1 << 30),  # 1 GiB of spaces in 1 MB
        "ascii85-bomb.pdf": pdf_with_stream(1 << 30, ascii85=True),
        **tag_bombs(),
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return {
        "deep.html": "deepmarker",
        "deep-inline.html": "inlinemarker",
        "wide-table.html": "cell",
        "huge-line.txt": "linemarker999",
        "million-paragraphs.md": "p999999",
        "headings.md": "headingmarker9999",
        "long-heading.md": "body",
    }


SAMPLE_EVERY_S = 0.02
"""How often the memory of a measured command's processes is summed: a PDF bomb takes PDFium
a second or more to inflate to its cap, so its peak is seen."""

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """The resident memory of `root` and of every process under it, summed, now (from /proc;
    a page shared by two processes counts twice, so the sum errs high). A process that ends
    while it is read counts 0."""
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE_BYTES
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children") as children:
                    todo.extend(int(child) for child in children.read().split())
        except (OSError, ValueError):
            continue
    return total


def process_rss(pid: int) -> int:
    """The resident memory of one process, now (0 once it ended)."""
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * PAGE_BYTES
    except (OSError, ValueError):
        return 0


def run_measured(
    command: list[str], timeout: float, *, alone: bool = False
) -> tuple[int, int, str, str]:
    """(exit status, peak memory in bytes, stdout, stderr) of one command; the peak is the
    largest sum of the resident memory of the command and every process it started (its parse
    workers, their PDFium workers), sampled every SAMPLE_EVERY_S. Not wait4's ru_maxrss: that
    is the largest single process, not the sum of those running at once. `alone`: the peak of
    the command's own process, its children left out."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=out, stderr=err, start_new_session=True
        )
        peak = 0
        deadline = time.monotonic() + timeout
        while process.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(process.pid, signal.SIGKILL)  # the command and its workers
                process.wait()
                break
            peak = max(peak, process_rss(process.pid) if alone else tree_rss(process.pid))
            time.sleep(SAMPLE_EVERY_S)
        out.seek(0)
        err.seek(0)
        return process.returncode, peak, out.read().decode(), err.read().decode()


def test_a_corpus_of_adversarial_files_is_indexed_within_bounded_time_and_memory(tmp_path):
    src = tmp_path / "src"
    markers = adversarial_corpus(src)
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    started = time.monotonic()
    code, peak, out, err = run_measured(
        [sys.executable, "-m", "metis_lite", "index", str(base_file), "--json"], INDEX_TIMEOUT_S
    )
    elapsed = time.monotonic() - started
    assert code in (0, 3), (
        f"exit {code} after {elapsed:.0f} s (killed at {INDEX_TIMEOUT_S} s?): {err}"
    )
    assert "Traceback" not in err
    assert peak < PEAK_RSS_BYTES, f"peak RSS of every process together {peak / 2**20:.0f} MiB"
    report = json.loads(out)
    # Parsed by worker processes, one per core (and the peak above counts all of them at once).
    assert report["workers"] == min(len(os.sched_getaffinity(0)), len(list(src.iterdir())))

    # Every file is either a document or skipped with its reason: nothing silently lost.
    with Base(base_file) as base:
        indexed = {path for (path,) in base.store.db.execute("SELECT path FROM documents")}
        skipped = {s["path"].split("/", 1)[1]: s["reason"] for s in report["skipped"]}
        assert indexed | set(skipped) == {p.name for p in src.iterdir()}
        assert not indexed & set(skipped)
        assert all(skipped.values())
        assert "zip bomb" in skipped["bomb.docx"]
        assert "lying-bomb.docx" in skipped
        assert "PDF bomb" in skipped["bomb.pdf"] and "PDF bomb" in skipped["ascii85-bomb.pdf"]
        assert {"garbage.md", "nul.txt"} <= set(skipped)
        for name in TAG_BOMBS:
            assert "more than 1,000,000 elements" in skipped[name], skipped[name]
        for name, word in markers.items():
            assert name in indexed, skipped.get(name)
            hits = base.search(word, mode="keyword", top_k=5).results
            assert hits and hits[0].citation.document == name, (name, word)
        db = base.store.db
        assert [r[0] for r in db.execute("PRAGMA integrity_check")] == ["ok"]
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        for _, n, top in db.execute(
            "SELECT document_id, count(*), max(ordinal) FROM chunks GROUP BY document_id"
        ):
            assert top == n - 1


# -- PDFium's memory: one budget for a run, however many workers -------------------------------

PROCESS_BYTES = 64 * 1024 * 1024
"""What a process of a run holds besides PDFium's budget, at most, on a corpus of PDF bombs and
small notes: Python with the parsers imported (~30 MB a parse worker, ~20 MB an idle PDFium
worker, ~60 MB the indexer)."""


@functools.cache
def small_bomb() -> bytes:
    """A PDF bomb of 256 MiB (inflating it takes PDFium twice that): past any share of
    PDFium's budget a run gives, and quicker to make than the corpus's 1 GiB ones."""
    return pdf_with_stream(1 << 28)


def test_pdfium_stays_within_one_budget_however_many_workers_a_run_has(tmp_path):
    """Each parse worker reads its PDFs with a PDFium worker of its own; with 6 workers and 6
    PDF bombs, PDFium is capped at a share of one budget and reads at most PDF_READERS_MAX at
    once, so the whole run stays within the budget and a process's own memory each (a cap per
    worker would let 6 bombs take 6 GiB together)."""
    src = tmp_path / "src"
    src.mkdir()
    bomb = small_bomb()
    workers = 6
    for n in range(workers):
        (src / f"bomb-{n}.pdf").write_bytes(bomb + b"%% bomb %d\n" % n)  # each its own bytes
        (src / f"note-{n}.md").write_text(f"# Note {n}\n\nnotemarker{n} and more words.\n")
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    runner = Path(__file__).resolve().parent / "crash_runner.py"  # workers for a small folder
    command = [sys.executable, str(runner), "--pool-always", "--", "index", str(base_file)]
    code, peak, out, err = run_measured(
        [*command, "--json", "--workers", str(workers)], INDEX_TIMEOUT_S
    )
    assert code in (0, 3) and "Traceback" not in err, err
    processes = 1 + 2 * workers  # the indexer, each parse worker and its PDFium worker
    bound = PDF_MEMORY_BUDGET + processes * PROCESS_BYTES
    assert peak < bound, f"peak {peak / 2**20:.0f} MiB of every process together"
    report = json.loads(out)
    assert report["workers"] == workers and report["added"] == workers  # the notes
    share = PDF_MEMORY_BUDGET // PDF_READERS_MAX
    reasons = {s["path"]: s["reason"] for s in report["skipped"]}
    assert sorted(reasons) == [f"src/bomb-{n}.pdf" for n in range(workers)]
    assert all(f"more than {share >> 20:,} MiB" in why for why in reasons.values()), reasons


def test_a_pdf_waits_for_a_reader_while_the_files_behind_it_are_parsed(monkeypatch):
    """With one PDF reader for two workers, two PDFs are never read at once, and the notes
    queued behind the second are parsed while it waits (no worker kept idle by it); each
    PDFium worker is capped at the budget's share (here all of a small budget)."""
    monkeypatch.setattr(parse_pool, "PDF_READERS_MAX", 1)
    monkeypatch.setattr(parse_pool, "PDF_MEMORY_BUDGET", 128 * 1024 * 1024)
    bomb = small_bomb()
    jobs = [ParseJob(f"bomb-{n}.pdf", "pdf", bomb, CHUNK_CHARS) for n in range(2)]
    jobs += [
        ParseJob(f"note-{n}.md", "md", b"# Note\n\nsome words %d\n" % n, CHUNK_CHARS)
        for n in range(4)
    ]
    with parse_pool.ParsePool(2) as pool:
        assert (pool.pdf_readers, pool.pdf_memory) == (1, 128 * 1024 * 1024)
        futures = [pool.submit(job) for job in jobs]
        most_at_once = 0
        notes_done_before_second_pdf = False
        while not all(f.done() for f in futures):
            most_at_once = max(most_at_once, sum(f.running() for f in futures[:2]))
            if all(f.done() for f in futures[2:]) and not futures[1].done():
                notes_done_before_second_pdf = True
            time.sleep(0.001)
    assert most_at_once == 1
    assert notes_done_before_second_pdf
    for future in futures[:2]:
        assert "more than 128 MiB" in (future.result().refused or ""), future.result()
    assert all(f.result().chunks for f in futures[2:])


# -- a run of one: the indexer (and `serve --index-workers 1`) holds no large parse ------------

INDEXER_BYTES = 256 * 1024 * 1024
"""The indexer's own memory, at most, in a run of one over tag bombs and a heavy page: Python,
the base, the file it holds (a 49 MB bomb, twice while hashed and sent) — never a parser's tree."""


def test_a_run_of_one_parses_no_large_file_in_the_indexer(tmp_path):
    """`index --workers 1` (as `serve --index-workers 1` indexes): each tag bomb and a page of
    600,000 paragraphs (under the element cap; lexbor's tree of it ~250 MB) are parsed in a
    worker process, so the indexer's own memory stays that of the files it holds."""
    src = tmp_path / "src"
    src.mkdir()
    for name, data in tag_bombs().items():
        (src / name).write_bytes(data)
    (src / "heavy.html").write_bytes(b"<p>heavymarker</p>" + b"<p>x" * 600_000)
    (src / "note.md").write_text("# Note\n\nnotemarker\n")
    base_file = tmp_path / "b.db"
    words_only_base(base_file, src).close()
    command = [sys.executable, "-m", "metis_lite", "index", str(base_file), "--json"]
    code, peak, out, err = run_measured([*command, "--workers", "1"], INDEX_TIMEOUT_S, alone=True)
    assert code in (0, 3) and "Traceback" not in err, err
    assert peak < INDEXER_BYTES, f"the indexer alone peaked at {peak / 2**20:.0f} MiB"
    report = json.loads(out)
    assert report["workers"] == 1 and report["added"] == 2
    assert sorted(s["path"] for s in report["skipped"]) == sorted(f"src/{n}" for n in TAG_BOMBS)
    with Base(base_file) as base:
        for word in ("heavymarker", "notemarker"):
            assert base.search(word, mode="keyword").results, word
