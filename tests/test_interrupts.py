"""Ctrl-C (SIGINT) and SIGTERM during `metis-lite index`, as a user at a terminal meets them.

Each run is the real CLI in a subprocess of its own process group, which the test signals as a
terminal does on Ctrl-C (the parse workers get it too), at a known point: while the embedding
model holds a batch (a stand-in TEI server on loopback that answers the first batches, then
holds the next one until the test ends), inside a document's transaction, while the base is
opened. A signalled run must end within a second (5 s asserted, for a loaded machine) with one
line, `interrupted: N of M chunks embedded — run `metis-lite index BASE` to go on`, exit 130
(143 for SIGTERM) and no traceback; `status` says `interrupted`; the base is consistent
(consistency.check_consistent); and the next ordinary run completes it to exactly what an
uninterrupted run gives. A second Ctrl-C exits at once, mid-transaction, with the same
guarantees (SQLite's WAL rolls the half-written transaction back).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from consistency import assert_same_content, check_consistent, content, expected_chunks
from loopback import Loopback, Quiet

from metis_lite import cli
from metis_lite.base.core import Base
from metis_lite.indexing import ingest

RUNNER = Path(__file__).resolve().parent / "crash_runner.py"
DIMENSION = 8
CHUNK_SIZE = 400
EMBED_BATCH = 4
ANSWERED = 2
"""Batches the stand-in answers before it holds the next one: the run is mid-embedding."""
EXIT_WITHIN_S = 5.0
"""How soon a signalled run must have exited (it takes ~0.1 s; a loaded machine is slower)."""
RUN_TIMEOUT_S = 60

LINE = re.compile(
    r"^interrupted: (?P<done>[\d,]+) of (?P<of>[\d,]+) chunks embedded — run "
    r"`metis-lite index (?P<base>\S+)` to go on$"
)


def vector_of(text: str) -> list[float]:
    """The stand-in's model: a text's words hashed into DIMENSION buckets, the same every run."""
    vector = np.full(DIMENSION, 0.01)
    for word in text.lower().split():
        vector[
            int.from_bytes(hashlib.sha256(word.encode()).digest()[:4], "little") % DIMENSION
        ] += 1
    return (vector / np.linalg.norm(vector)).tolist()


class Model:
    """TEI (POST /embed) on loopback: answers `answered` requests, then holds each one until
    `release` (set when the test ends); `holding` is set once it holds one."""

    def __init__(self) -> None:
        self.answered: int | None = None  # None: answers every request
        self.holding = threading.Event()
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.requests = 0
        model = self

        class Handler(Quiet):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
                with model.lock:
                    model.requests += 1
                    hold = model.answered is not None and model.requests > model.answered
                if hold:
                    model.holding.set()
                    model.release.wait(RUN_TIMEOUT_S)
                data = json.dumps([vector_of(t) for t in texts]).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the run that asked has ended
                    pass

        self.loopback = Loopback(Handler)
        self.url = self.loopback.url

    def hold_after(self, answered: int) -> None:
        with self.lock:
            self.requests, self.answered = 0, answered
        self.holding.clear()
        self.release.clear()

    def answer_all(self) -> None:
        with self.lock:
            self.answered = None
        self.release.set()

    def close(self) -> None:
        self.release.set()
        self.loopback.close()


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    served = Model()
    yield served
    served.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory, model):
    """A folder of 12 Markdown files (~36 chunks, 9 batches), an indexed-never base of it, the
    base an uninterrupted run gives, and each file's expected chunks."""
    root = tmp_path_factory.mktemp("interrupts")
    folder = root / "notes"
    folder.mkdir()
    for n in range(12):
        paragraphs = [
            f"Paragraph {p} of note {n}: " + " ".join(f"word{n}x{p}x{w}" for w in range(40))
            for p in range(3)
        ]
        (folder / f"note{n:02d}.md").write_text(
            f"# Note {n}\n\n" + "\n\n".join(paragraphs) + "\n", encoding="utf-8"
        )
    empty = root / "empty.db"
    with Base(empty, create=True) as base:
        base.configure(
            embedding={"provider": "tei", "url": model.url, "model": "stand-in", "timeout_s": 30},
            chunk_size=CHUNK_SIZE,
        )
        base.add_source(folder, name="notes")
    done = root / "done.db"
    shutil.copy(empty, done)
    model.answer_all()
    with Base(done) as base:
        report = base.index()
        assert report.without_vector == 0 and report.chunks > 2 * EMBED_BATCH * (ANSWERED + 1)
    return {"empty": empty, "done": content(done), "expected": expected_chunks(folder, CHUNK_SIZE)}


@pytest.fixture
def base_file(world, tmp_path) -> Path:
    path = tmp_path / "base.db"
    shutil.copy(world["empty"], path)
    return path


def start(base: Path, *runner_options: str, given: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    """`metis-lite index BASE [given…]` through the crash runner, in a process group of its
    own."""
    return subprocess.Popen(
        [sys.executable, str(RUNNER), "--embed-batch", str(EMBED_BATCH), *runner_options]
        + ["--", "index", str(base), *given, "--quiet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def signal_and_wait(run: subprocess.Popen[str], number: int) -> tuple[float, str]:
    """Send `number` to the run's process group (as a terminal sends Ctrl-C); the seconds it
    took to exit, and its stderr."""
    sent = time.monotonic()
    os.killpg(run.pid, number)
    run.wait(RUN_TIMEOUT_S)
    took = time.monotonic() - sent
    _, err = run.communicate()
    return took, err


def ctrl_c_at_pause(pause: Path, run: subprocess.Popen[str]) -> str:
    """Once the run is paused, Ctrl-C (its process group), then let it go on: it must exit 130
    with no traceback, of its own or a worker's. Its stderr."""
    wait_for_pause(pause, run)
    os.killpg(run.pid, signal.SIGINT)
    (pause / "resume").touch()
    run.wait(RUN_TIMEOUT_S)
    _, err = run.communicate()
    assert run.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    return err


def wait_for_pause(pause: Path, run: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while not (pause / "paused").exists():
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "the run never reached its pause"
        time.sleep(0.02)


def status_line(base: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert cli.main(["status", str(base)]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if "last indexing" in line)


def vectors_of(base: Path) -> tuple[int, int]:
    """(chunks, chunks with a vector)."""
    with Base(base) as opened:
        status = opened.status()
    return status.chunks, status.chunks - status.chunks_without_vector


def completes(base: Path, world: dict, model: Model) -> None:
    """The base is consistent, and the next ordinary run completes it to what an uninterrupted
    run gives."""
    check_consistent(base, world["expected"])
    model.answer_all()
    with Base(base) as opened:
        report = opened.index()
        assert report.without_vector == 0 and not report.interrupted, report.warnings
        assert opened.status().last_indexing["state"] == "done"
    check_consistent(base, world["expected"])
    assert_same_content(content(base), world["done"])


@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_embedding_ends_the_run_within_a_second(
    world, model, base_file, capsys, number, code
):
    model.hold_after(ANSWERED)
    run = start(base_file)
    assert model.holding.wait(RUN_TIMEOUT_S), run.communicate()
    took, err = signal_and_wait(run, number)
    with capsys.disabled():  # the figure, with -s
        print(f" {signal.Signals(number).name}: exited {took:.3f} s after the signal")
    assert run.returncode == code, err
    assert took < EXIT_WITHIN_S
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    said = LINE.match(lines[0])
    assert said, err
    chunks, with_vector = vectors_of(base_file)
    assert said["base"] == str(base_file)
    assert int(said["done"].replace(",", "")) == with_vector > 0  # what it says is what is there
    assert int(said["of"].replace(",", "")) == chunks > with_vector
    assert "last indexing: interrupted" in status_line(base_file, capsys)
    completes(base_file, world, model)


def test_ctrl_c_in_a_transaction_with_parse_workers_lets_it_finish_then_stops(
    world, model, base_file, tmp_path, capsys
):
    """Ctrl-C while a document's transaction is open (paused inside it), the files parsed by
    worker processes that get the Ctrl-C too: the transaction commits, the run stops before
    the next one; no worker prints a traceback."""
    model.hold_after(0)
    pause = tmp_path / "pause"
    pause.mkdir()
    run = start(base_file, "--pool-always", "--pause", str(pause), "--kill", "parsed", "--at", "3")
    err = ctrl_c_at_pause(pause, run)
    assert [line for line in err.splitlines() if LINE.match(line)] == err.splitlines(), err
    with Base(base_file) as opened:
        assert opened.status().documents >= 3  # the third file's transaction was committed
    assert "last indexing: interrupted" in status_line(base_file, capsys)
    completes(base_file, world, model)


def test_a_second_ctrl_c_exits_at_once_and_the_base_stays_consistent(
    world, model, base_file, tmp_path, capsys
):
    """The first Ctrl-C asks the run to stop, but it is held inside a transaction (between a
    document's chunk inserts); the second ends the process there and then."""
    model.hold_after(0)
    pause = tmp_path / "pause"
    pause.mkdir()
    run = start(
        base_file,
        *("--pause", str(pause), "--kill", "sql", "--at", "5"),
        *("--pattern", r"^INSERT INTO chunks \("),
    )
    wait_for_pause(pause, run)
    os.killpg(run.pid, signal.SIGINT)
    time.sleep(0.3)  # the first one is taken (nothing to wait on: the run is held)
    assert run.poll() is None, run.communicate()
    took, err = signal_and_wait(run, signal.SIGINT)
    with capsys.disabled():
        print(f" second SIGINT: exited {took:.3f} s after it")
    assert run.returncode == 130, err
    assert took < EXIT_WITHIN_S
    assert "Traceback" not in err, err
    assert err.startswith("interrupted again: stopped at once"), err
    assert "last indexing: interrupted" in status_line(base_file, capsys)
    completes(base_file, world, model)


def test_ctrl_c_at_start_up_says_one_line_and_leaves_no_base(model, tmp_path, world):
    """Ctrl-C while the CLI opens a new base (the commands imported, nothing written yet)."""
    pause = tmp_path / "pause"
    pause.mkdir()
    new = tmp_path / "new.db"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\nSome text.\n", encoding="utf-8")
    run = subprocess.Popen(
        [sys.executable, str(RUNNER), "--pause", str(pause), "--kill", "open", "--"]
        + ["index", str(new), str(folder), "--quiet"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for_pause(pause, run)
    took, err = signal_and_wait(run, signal.SIGINT)
    assert run.returncode == 130, err
    assert err == "interrupted\n"
    assert took < EXIT_WITHIN_S
    assert not new.exists()


def test_a_run_given_a_stop_records_it_interrupted(world, model, base_file, monkeypatch):
    """Base.index(stop=…), the library's way (what `serve` uses at SIGTERM): set from another
    thread, the run returns an interrupted report and the base says so."""
    monkeypatch.setattr(ingest, "EMBED_BATCH", EMBED_BATCH)  # as the CLI's runs here
    model.hold_after(ANSWERED)
    stop = threading.Event()
    with Base(base_file) as base:
        releaser = threading.Thread(target=lambda: model.holding.wait(RUN_TIMEOUT_S) and stop.set())
        releaser.start()
        report = base.index(stop=stop)
        releaser.join()
        assert report.interrupted
        assert report.embedded == vectors_of(base_file)[1] >= EMBED_BATCH
        last = base.status().last_indexing
        assert (last["state"], last["embedded"], last["added"]) == (
            "interrupted",
            report.embedded,
            report.added,
        )
    completes(base_file, world, model)


def test_serve_ends_an_indexing_pass_the_same_way_at_sigterm(world, model, base_file, tmp_path):
    """`serve` indexes in-process: SIGTERM while its pass waits for the model stops the pass at
    its next point between transactions, recorded as interrupted, and the service exits."""
    from serving import serve

    model.hold_after(1)  # its first batch (32 chunks) answered, the rest held
    service = serve(tmp_path, str(base_file))
    try:
        assert model.holding.wait(RUN_TIMEOUT_S), service.output()
        sent = time.monotonic()
        service.process.terminate()
        assert service.process.wait(RUN_TIMEOUT_S) == 0, service.output()
        took = time.monotonic() - sent
    finally:
        if service.process.poll() is None:
            service.process.kill()
            service.process.wait()
    print(f" serve, SIGTERM: exited {took:.3f} s after it")
    assert took < EXIT_WITHIN_S, took
    assert "Traceback" not in service.output()
    chunks, with_vector = vectors_of(base_file)
    assert f"indexing base interrupted: {with_vector} of {chunks} chunks embedded" in (
        service.output()
    )
    with Base(base_file) as opened:
        assert opened.status().last_indexing["state"] == "interrupted"
    completes(base_file, world, model)


def test_ctrl_c_with_a_pdf_read_in_the_indexer_prints_no_worker_traceback(model, tmp_path):
    """A run of one parses a PDF through its own PDFium worker process, which the terminal's
    Ctrl-C reaches too: it ignores it and the indexer ends it."""
    from conftest import EXAMPLES

    folder = tmp_path / "folder"
    folder.mkdir()
    shutil.copy(EXAMPLES / "it" / "security-guide.pdf", folder)
    shutil.copy(EXAMPLES / "welcome.md", folder / "z-welcome.md")  # read after the PDF
    pause = tmp_path / "pause"
    pause.mkdir()
    model.hold_after(0)
    run = start(
        tmp_path / "new.db",
        *("--pause", str(pause), "--kill", "parsed", "--at", "2"),
        given=(str(folder), "--embedding", "tei", "--embedding-url", model.url),
    )
    err = ctrl_c_at_pause(pause, run)
    assert LINE.match(err.strip()), err
