"""`index`'s progress, as people read it: a bar on a terminal, a line every interval elsewhere,
nothing with --quiet; the figures (files, chunks, vectors, rates, ETA) are the run's own.

The runs are the real CLI in a subprocess, its stderr a pipe or a pseudo-terminal (Python's
pty), behind an embedding model on loopback that takes its time (so the run lasts several
intervals); METIS_PROGRESS_INTERVAL_S makes the interval short instead of the 10 s default.
"""

from __future__ import annotations

import fcntl
import io
import itertools
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from conftest import ROOT
from loopback import Loopback, Quiet

from metis_lite.base.core import Base
from metis_lite.cli.progress import IndexProgress

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
BATCH_DELAY_S = 0.15
"""How long the slow model takes over each batch of passages."""

LINE = re.compile(
    r"^indexing (?P<base>\S+): files (?P<files>[\d,]+)/(?P<total>[\d,]+) · chunks (?P<chunks>[\d,]+)"
    r"(?: \([\d,]+/s\))?(?: · vectors (?P<vectors>[\d,]+)/(?P<of>[\d,]+)(?: \([\d,.]+/s\))?)?"
    r"(?: · (?:ETA|words done in) [\d.]+ (?:s|min|h))?$"
)


class SlowModel:
    """TEI on loopback: vectors that depend on the text alone, each batch after a pause."""

    def __init__(self) -> None:
        class Handler(Quiet):
            def do_POST(self):  # noqa: N802 - http.server's name
                texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
                time.sleep(BATCH_DELAY_S)
                body = json.dumps([[1.0, float(len(t) % 7), 0.5] for t in texts]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.loopback = Loopback(Handler)
        self.server, self.url = self.loopback.server, self.loopback.url

    def close(self) -> None:
        self.loopback.close()


@pytest.fixture
def slow_base(tmp_path):
    """A base of 30 small files (~60 chunks) whose model answers each batch in BATCH_DELAY_S:
    with batches of 4, the run lasts a few seconds."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(30):
        (src / f"f{n:02d}.md").write_text(
            f"# File {n}\n\n" + f"Sentence {n} of the file, about topic {n}. " * 40, "utf-8"
        )
    model = SlowModel()
    with Base(tmp_path / "b.db", create=True) as base:
        base.configure(embedding={"provider": "tei", "url": model.url, "timeout_s": 30})
        base.add_source(src)
    yield tmp_path / "b.db"
    model.close()


def index_command(base: Path, *extra: str) -> list[str]:
    return [sys.executable, str(RUNNER), "--embed-batch", "4", "--", "index", str(base), *extra]


def environment(interval: str = "0.2") -> dict[str, str]:
    return {**os.environ, "METIS_PROGRESS_INTERVAL_S": interval}


def number(text: str | None) -> int:
    return int((text or "0").replace(",", ""))


def test_a_pipe_gets_a_line_every_interval_with_the_runs_figures(slow_base):
    run = subprocess.run(
        index_command(slow_base),
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("indexing ")]
    assert len(lines) >= 5, run.stderr
    figures = []
    for line in lines:
        match = LINE.match(line)
        assert match, line
        assert match["base"] == str(slow_base)
        figures.append((number(match["files"]), number(match["chunks"]), number(match["vectors"])))
        assert number(match["total"]) == 30
        if match["vectors"] is not None:
            assert number(match["vectors"]) <= number(match["of"]) <= number(match["chunks"])
    for earlier, later in itertools.pairwise(figures):  # the run only goes forward
        assert all(a <= b for a, b in zip(earlier, later, strict=True)), (earlier, later)
    assert figures[-1][0] == 30 and figures[-1][2] > 0
    assert any("ETA" in line for line in lines)  # once both rates are known
    assert "\r" not in run.stderr and "[" not in "".join(lines)  # no bar in a log
    report = run.stdout.splitlines()[0]
    assert report.startswith(f"indexed {slow_base}: 30 added") and "0 without a vector" in report


def test_quiet_prints_no_progress(slow_base):
    run = subprocess.run(
        index_command(slow_base, "--quiet"),
        cwd=ROOT,
        env=environment("0.05"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "indexing " not in run.stderr and "\r" not in run.stderr
    assert run.stdout.startswith(f"indexed {slow_base}: 30 added")


def test_a_bad_interval_is_refused_before_a_base_is_made(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", "index", str(tmp_path / "new.db")],
        cwd=ROOT,
        env=environment("soon"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2 and "METIS_PROGRESS_INTERVAL_S" in run.stderr
    assert not (tmp_path / "new.db").exists()


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_a_terminal_gets_one_line_redrawn_in_place(slow_base):
    """stderr a terminal 80 columns wide: the bar, drawn again with \\r, never wider than
    the terminal (a wrapped line could not be redrawn), ended by a newline."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    process = subprocess.Popen(
        index_command(slow_base),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=terminal,
    )
    os.close(terminal)
    shown = io.BytesIO()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([controller], [], [], 1)
        if ready:
            try:
                block = os.read(controller, 65536)
            except OSError:  # the terminal's other end closed: the run ended
                break
            if not block:
                break
            shown.write(block)
        elif process.poll() is not None:
            break
    os.close(controller)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, shown.getvalue()
    text = shown.getvalue().decode("utf-8")
    draws = [part for part in text.replace("\r\n", "\n").split("\r") if part.strip()]
    assert len(draws) >= 5, text
    assert any(draw.startswith("words   [") and " files " in draw for draw in draws)
    assert any(draw.startswith("vectors [") and "files 30/30" in draw for draw in draws)
    assert all(len(draw.rstrip("\n").rstrip()) <= 79 for draw in draws), draws
    assert text.endswith("\n") and "indexing " not in text
    assert out.decode().startswith(f"indexed {slow_base}: 30 added")


def test_the_line_says_rates_and_the_later_of_the_two_ends():
    """The arithmetic, on a clock the test moves: the ETA is the later of the words pass's end
    (files left at the files' rate) and the vectors' (those waiting, and those the files left
    will add, at the vectors' rate); before any vector is made, only the words pass's."""
    now = [100.0]
    progress = IndexProgress("b.db", stream=io.StringIO(), terminal=False, clock=lambda: now[0])
    progress("vectors", 0, 0)
    now[0] += 10
    progress("files", 50, 100)
    progress("chunks", 1000, 0)
    assert progress.line() == (
        "files 50/100 · chunks 1,000 (100/s) · vectors 0/1,000 · words done in 10 s"
    )
    progress("vectors", 20, 1000)
    # vectors at 2/s: 980 waiting and ~1,000 still to come from the 50 files left → 990 s
    assert progress.line() == (
        "files 50/100 · chunks 1,000 (100/s) · vectors 20/1,000 (2.0/s) · ETA 16 min"
    )
    now[0] += 10
    progress("files", 100, 100)
    progress("chunks", 2000, 0)  # 1,000 more chunks since the vectors were told: they wait too
    assert progress.line() == "files 100/100 · chunks 2,000 · vectors 20/2,000 (1.0/s) · ETA 33 min"


def test_a_run_shorter_than_the_interval_says_its_first_and_last_figures(slow_base):
    """With the default 10 s interval, a run of a few seconds into a pipe still prints a line
    soon after it starts and one when it ends, with its final figures (every file, every
    vector): a log never ends on figures older than the run's end."""
    env = {k: v for k, v in os.environ.items() if k != "METIS_PROGRESS_INTERVAL_S"}
    run = subprocess.run(
        index_command(slow_base), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("indexing ")]
    assert len(lines) >= 2, run.stderr
    assert all(LINE.match(line) for line in lines), lines
    first, last = LINE.match(lines[0]), LINE.match(lines[-1])
    assert first and last
    assert number(first["vectors"]) < number(last["vectors"])  # said while the run went on
    with Base(slow_base) as base:
        chunks = base.status().chunks
    assert (number(last["files"]), number(last["total"])) == (30, 30)
    assert number(last["chunks"]) == number(last["vectors"]) == number(last["of"]) == chunks


def test_a_terminal_that_does_not_say_its_width_gets_the_whole_line():
    """A pseudo-terminal no one sized (0 columns, as `script` makes) gets the line whole, not
    cut one character short of nothing (`ETA 3 ` for `ETA 3 s`)."""
    controller, terminal = pty.openpty()  # 0 columns, 0 lines
    now = [0.0]
    with os.fdopen(terminal, "w", encoding="utf-8") as stream:
        progress = IndexProgress("b.db", stream=stream, terminal=True, clock=lambda: now[0])
        progress.start()
        now[0] += 10
        progress("chunks", 300, 0)
        progress("files", 30, 100)
        progress.stop()
    shown = os.read(controller, 65536).decode("utf-8")
    os.close(controller)
    line = "files 30/100 · chunks 300 (30/s) · ETA 23 s"
    assert progress.line() == line
    draws = [d.strip() for d in shown.replace("\r\n", "\n").split("\r") if d.strip()]
    assert draws and all(d.endswith(line) for d in draws), draws


def test_status_says_a_runs_counts_while_it_goes_on(slow_base):
    """While a run embeds (every file written, vectors coming), status's last indexing run
    counts the documents already written, as each transaction writes them: never `0 added`
    beside documents that are there."""
    process = subprocess.Popen(
        index_command(slow_base, "--quiet"),
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    seen = []
    try:
        with Base(slow_base) as base:
            while process.poll() is None:
                status = base.status()
                run = status.last_indexing
                if status.state == "Indexing" and run and run["state"] == "running":
                    seen.append((status.documents, run["added"]))
                time.sleep(0.02)
    finally:
        out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert any(documents > 0 for documents, _ in seen), seen
    assert all(added == documents for documents, added in seen), seen
