"""What bounds a parse: a cap on the elements a page or a DOCX may build, checked from the bytes
before any parser runs; each parse worker's memory capped at its share of the run's budget; a
run of one that parses a large file in a worker, not in the indexer; and each file's deadline,
past which its worker is killed and the run goes on.

tests/test_hostile.py measures a whole run's memory on tag bombs; these check each bound alone.
"""

from __future__ import annotations

import io
import os
import random
import signal
import threading
import time
import zipfile
from pathlib import Path

import pytest
from conftest import words_only_base
from hypothesis import given, settings
from hypothesis import strategies as st
from test_hostile import _docx_with_body as docx_with_body
from test_pipeline import _children as children

from metis_lite import parsing
from metis_lite.errors import ParseError
from metis_lite.indexing import parse_pool
from metis_lite.indexing import workers as parse_workers
from metis_lite.indexing.parse_pool import ParseJob, ParsePool
from metis_lite.parsing import common, docx, html
from metis_lite.settings import CHUNK_CHARS


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def refuse_to_build(*args: object, **kwargs: object) -> None:
    raise AssertionError("the parser was started on a file its bound refuses")


# -- a cap on elements, counted from the bytes ------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(soup=st.text(alphabet="<>/p x!-", max_size=300))
def test_the_element_count_is_every_lt_that_opens_no_end_tag(soup):
    data = soup.encode()
    opening = sum(
        1 for at, byte in enumerate(data) if byte == ord("<") and data[at + 1 : at + 2] != b"/"
    )
    assert common.count_elements(data) == opening


def test_a_p_bomb_page_is_refused_from_its_bytes_before_lexbor_builds_a_tree(monkeypatch):
    monkeypatch.setattr(html, "LexborHTMLParser", refuse_to_build)
    bomb = b"<p>" * (common.HTML_ELEMENTS_MAX + 1)
    with pytest.raises(ParseError, match=r"more than 1,000,000 elements \(1,000,001 tags"):
        html.parse(bomb, name="bomb")


def test_a_page_at_the_cap_is_read_and_one_element_more_refused(monkeypatch):
    monkeypatch.setattr(html, "HTML_ELEMENTS_MAX", 50)
    page = b"<html><body>" + b"<p>word</p>" * 48  # 50 elements, the end tags not counted
    assert len(html.parse(page, name="at-cap").sections[0].text.split()) == 48
    with pytest.raises(ParseError, match="more than 50 elements"):
        html.parse(page + b"<p>word</p>", name="past-cap")


def test_a_docx_of_too_many_elements_is_refused_before_python_docx_reads_it(monkeypatch):
    """Random text compresses ~3×, far below the zip-bomb ratio: only the count refuses it,
    as it inflates, before python-docx builds a tree of 2 million elements."""
    rng = random.Random(5)
    paragraphs = docx.DOCX_ELEMENTS_MAX // 3 + 1000  # 3 elements each
    body = "".join(
        f"<w:p><w:r><w:t>{rng.getrandbits(48):x}</w:t></w:r></w:p>" for _ in range(paragraphs)
    )
    data = docx_with_body(body)
    monkeypatch.setattr(docx.docx, "Document", refuse_to_build)
    with pytest.raises(ParseError, match=r"DOCX with more than 2,000,000 elements"):
        docx.parse(data, name="many")


@pytest.mark.parametrize("block", [1, 2, 7, 1 << 20])
def test_a_docx_is_counted_alike_whatever_the_blocks_it_inflates_in(monkeypatch, block):
    """An end tag split between two blocks counts once: the count is the whole part's."""
    data = docx_with_body("<w:p><w:r><w:t>word</w:t></w:r></w:p>" * 40)
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        xml = [m for m in package.infolist() if m.filename.endswith((".xml", ".rels"))]
        whole = sum(common.count_elements(package.read(m)) for m in xml)
    monkeypatch.setattr(docx, "READ_BYTES", block)
    monkeypatch.setattr(docx, "DOCX_ELEMENTS_MAX", whole)
    docx.check_zip(data)  # exactly at the cap
    monkeypatch.setattr(docx, "DOCX_ELEMENTS_MAX", whole - 1)
    with pytest.raises(ParseError, match=f"more than {whole - 1:,} elements"):
        docx.check_zip(data)


# -- each worker's memory capped at its share of the run's ------------------------------------

MEMORY_SHARE = 192 * 1024 * 1024
"""A worker's share in the tests below: enough for Python and the parsers (~60 MiB) and a
small file, not for lexbor's tree of 800,000 paragraphs (~300 MiB)."""


def test_a_file_past_its_workers_share_is_refused_and_the_worker_replaced(monkeypatch):
    monkeypatch.setattr(parse_pool, "PARSE_MEMORY_BUDGET", 2 * MEMORY_SHARE)
    heavy = b"<p>x" * 800_000  # under the element cap, over the share
    notes = [
        ParseJob(f"note-{n}.md", "md", b"# Note\n\nnotemarker%d here\n" % n, CHUNK_CHARS)
        for n in range(4)
    ]
    with ParsePool(2) as pool:
        assert pool.parse_memory == MEMORY_SHARE
        first = pool.submit(ParseJob("heavy.html", "html", heavy, CHUNK_CHARS)).result()
        rest = [pool.submit(job).result() for job in notes]
    assert "needs more than 192 MiB of memory" in (first.refused or ""), first
    assert [r.chunks[0].text for r in rest] == [f"notemarker{n} here" for n in range(4)]


def test_a_run_of_one_parses_a_large_file_in_a_worker_not_in_the_indexer(tmp_path, monkeypatch):
    """`index --workers 1`, and `serve --index-workers 1`: a file over LARGE_FILE_BYTES is
    parsed in a worker process (its memory capped), a small one here."""
    src = tmp_path / "src"
    write(src, "small.md", "# Small\n\nsmallmarker\n")
    write(src, "large.html", "<p>largemarker</p>" + "<p>filler words</p>" * 20_000)
    assert (src / "large.html").stat().st_size > parse_pool.LARGE_FILE_BYTES
    parsed_here: list[str] = []
    real_parse = parsing.parse

    def parse_recorded(path: Path, **kwargs: object):
        parsed_here.append(Path(path).name)
        return real_parse(path, **kwargs)

    monkeypatch.setattr(parsing, "parse", parse_recorded)
    with words_only_base(tmp_path / "b.db", src) as base:
        report = base.index(workers=1)
        assert (report.added, report.skipped, report.workers) == (2, (), 1)
        assert parsed_here == ["small.md"]
        for word in ("smallmarker", "largemarker"):
            assert base.search(word, mode="keyword").results, word


# -- each file's deadline: a stuck worker cannot stop a run -----------------------------------


DEADLINE_S = 2.0
"""Each file's deadline in the test below (PARSE_DEADLINE_S, its least, made small)."""

RUN_WAIT_S = 30.0
"""What the run may take with a worker stopped: its files, and the stuck one's deadline."""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_stopped_worker_costs_only_the_file_it_held(tmp_path, monkeypatch):
    """`kill -STOP` of the parse worker handed stuck.md (a child process of the indexer): the
    run kills it at the file's deadline, skips that file with why, starts another worker, and
    indexes every other file; the next run reads stuck.md."""
    src = tmp_path / "src"
    for n in range(12):
        write(src, f"f{n:02d}.md", f"# File {n}\n\nThe word{n}gamma.\n")
    write(src, "stuck.md", "# Stuck\n\nstuckmarker\n")
    monkeypatch.setattr(parse_workers, "POOL_MIN_SECONDS", 0.0)
    monkeypatch.setattr(parse_pool, "PARSE_DEADLINE_S", DEADLINE_S)
    stopped: list[int] = []
    real_parse = parse_pool._Worker.parse

    def parse_stopping(worker: parse_pool._Worker, job: ParseJob, deadline_s: float, *told):
        if job.name == "stuck.md" and not stopped:
            pid = worker.process.pid
            assert pid in children(os.getpid())
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        return real_parse(worker, job, deadline_s, *told)

    monkeypatch.setattr(parse_pool._Worker, "parse", parse_stopping)
    outcome: dict = {}
    with words_only_base(tmp_path / "b.db", src) as base:
        run = threading.Thread(target=lambda: outcome.update(report=base.index(workers=2)))
        started = time.monotonic()
        run.start()
        run.join(RUN_WAIT_S)
        for pid in set(stopped) & children(os.getpid()):  # a failed test leaves none stopped
            os.kill(pid, signal.SIGKILL)
        run.join()
        assert time.monotonic() - started < RUN_WAIT_S, "the run waited on the stopped worker"
        report = outcome["report"]
        assert stopped and stopped[0] not in children(os.getpid())  # killed, and reaped
        why = {s.path: s.reason for s in report.skipped}
        assert list(why) == ["src/stuck.md"]
        assert "took longer than" in why["src/stuck.md"], why
        assert report.added == 12
        for n in range(12):
            assert base.search(f"word{n}gamma", mode="keyword").results, n
        again = base.index(workers=2)
        assert (again.added, again.skipped) == (1, ())
        assert base.search("stuckmarker", mode="keyword").results
