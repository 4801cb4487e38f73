"""A service with a base it cannot use: it starts, serves the others, and answers every request
naming that base with its code (BASE_DAMAGED, NOT_A_BASE, STORE_ERROR naming a permission),
never a 500; a base damaged while it is served is answered the same way from then on. A FIFO,
a device or an unreadable file named as a base is one such base; and the indexer's lock file,
made a FIFO, a link or a device, blocks no command and no worker of the service."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, words_only_base
from serving import serve, stop

http = httpx.Client(timeout=60)


def small_base(path: Path) -> Path:
    src = path.parent / f"src-{path.stem}"
    src.mkdir()
    for n in range(8):
        (src / f"{path.stem}{n}.md").write_text(f"# {path.stem} {n}\n\nshared words {n}.\n")
    with words_only_base(path, src) as base:
        base.index()
        base.remember(f"A fact of {path.stem}.")
    return path


def chunks_page(path: Path) -> tuple[int, int]:
    """(offset, size) of the chunks table's first page in the file."""
    with closing(sqlite3.connect(path)) as plain:
        root = plain.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'chunks'").fetchone()
        size = plain.execute("PRAGMA page_size").fetchone()[0]
    return (root[0] - 1) * size, size


def code_of(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def test_a_damaged_base_beside_good_ones_is_answered_with_its_code(tmp_path):
    good = small_base(tmp_path / "good.db")
    damaged = small_base(tmp_path / "damaged.db")
    damaged.write_bytes(damaged.read_bytes()[:8192])
    foreign = tmp_path / "foreign.db"
    with closing(sqlite3.connect(foreign)) as plain:
        plain.execute("CREATE TABLE t (x)")
    service = serve(tmp_path, str(good), str(damaged), str(foreign), "--poll", "0")
    try:
        bases = http.get(f"{service.url}/v1/bases")
        search = {
            name: http.post(f"{service.url}/v1/bases/{name}/search", json={"question": "words"})
            for name in ("good", "damaged", "foreign")
        }
        fact = http.post(f"{service.url}/v1/bases/damaged/facts", json={"text": "x"})
        facts = http.get(f"{service.url}/v1/bases/damaged/facts")
        many = http.post(
            f"{service.url}/v1/search", json={"question": "words", "bases": ["good", "damaged"]}
        )
        health = http.get(f"{service.url}/v1/health")
    finally:
        stop(service)
    assert health.status_code == 200 and bases.status_code == 200
    assert [b["name"] for b in bases.json()["bases"]] == ["good"]
    assert [(u["name"], u["code"]) for u in bases.json()["unavailable"]] == [
        ("damaged", "BASE_DAMAGED"),
        ("foreign", "NOT_A_BASE"),
    ]
    assert search["good"].status_code == 200 and search["good"].json()["results"]
    assert (search["damaged"].status_code, code_of(search["damaged"])) == (409, "BASE_DAMAGED")
    assert (search["foreign"].status_code, code_of(search["foreign"])) == (400, "NOT_A_BASE")
    assert code_of(fact) == code_of(facts) == code_of(many) == "BASE_DAMAGED"
    log = service.output()
    assert "warning: base damaged is not served: BASE_DAMAGED" in log
    assert "Traceback" not in log and " 500 " not in log


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="Debian's sqlite3 is not installed")
def test_a_base_damaged_while_served_is_answered_with_its_code_from_then_on(tmp_path):
    good = small_base(tmp_path / "good.db")
    victim = small_base(tmp_path / "victim.db")
    service = serve(tmp_path, str(good), str(victim), "--poll", "0")
    try:
        asked = {"question": "shared words", "mode": "keyword"}
        before = http.post(f"{service.url}/v1/bases/victim/search", json=asked)
        # Every page in the main file (none in the -wal), then one page of it overwritten,
        # then a commit by another client so the service's connections read the file again.
        subprocess.run(["sqlite3", str(victim), "PRAGMA wal_checkpoint(TRUNCATE);"], check=True)
        offset, size = chunks_page(victim)
        with victim.open("r+b") as raw:
            raw.seek(offset)
            raw.write(b"\xa5" * size)
        subprocess.run(["sqlite3", str(victim), "CREATE TABLE poke (x);"], check=True)
        after = [http.post(f"{service.url}/v1/bases/victim/search", json=asked) for _ in range(3)]
        status = http.get(f"{service.url}/v1/bases").json()
        fact = http.post(f"{service.url}/v1/bases/victim/facts", json={"text": "Not written."})
        indexed = http.post(f"{service.url}/v1/bases/victim/index")
        other = http.post(f"{service.url}/v1/bases/good/search", json=asked)
    finally:
        stop(service)
    assert before.status_code == 200 and before.json()["results"]
    assert [(r.status_code, code_of(r)) for r in after] == [(409, "BASE_DAMAGED")] * 3
    assert status["unavailable"] == [
        {"name": "victim", "code": "BASE_DAMAGED", "message": status["unavailable"][0]["message"]}
    ]
    assert [b["name"] for b in status["bases"]] == ["good"]
    assert code_of(fact) == "BASE_DAMAGED"  # never written once found damaged
    assert (indexed.status_code, code_of(indexed)) == (409, "BASE_DAMAGED")  # not a 202
    assert other.status_code == 200 and other.json()["results"]
    assert "Traceback" not in service.output()


@pytest.mark.parametrize(
    "command",
    [
        ("serve", "{tmp}/nope.db", "--port", "0"),
        ("serve", "{good}", "{tmp}/nope.db"),
        ("mcp", "{tmp}/nope.db"),
    ],
)
def test_a_base_that_is_not_there_is_base_not_found_for_serve_and_mcp_too(tmp_path, command):
    good = small_base(tmp_path / "good.db")
    args = [a.format(good=good, tmp=tmp_path) for a in command]
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith(f"error: BASE_NOT_FOUND: no base at {tmp_path}/nope.db"), (
        run.stderr
    )
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "nope.db").exists()


# -- what cannot be a base at all, and a file this user may not read ------------------------

UNPRIVILEGED = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search")
"""Root without the capabilities that let it read any file: a file of mode 000 is then
unreadable to it, as to anyone else."""


def unprivileged() -> tuple[str, ...]:
    """The prefix that makes a command one that file permissions apply to; skips without one."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("root reads every file, and setpriv (to drop that) is not installed")
    tried = subprocess.run([*UNPRIVILEGED, "true"], capture_output=True, text=True)
    if tried.returncode != 0:
        pytest.skip(f"setpriv cannot drop root's capabilities here: {tried.stderr.strip()}")
    return UNPRIVILEGED


def metis(
    *args: str, prefix: tuple[str, ...] = (), timeout: float = 30
) -> subprocess.CompletedProcess:
    """A command in a process of its own: one that waits forever fails at the timeout."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "metis_lite", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )


def serving(folder: Path, *args: str, prefix: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """`serve ARGS --port 0` started (under `prefix`), and its URL once it says it serves."""
    with (folder / "serve.log").open("w") as log:
        process = subprocess.Popen(
            [*prefix, sys.executable, "-m", "metis_lite", "serve", *args, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
        )
    first = process.stdout.readline() if process.stdout else ""
    if not first.startswith("serving "):
        ended(process, folder)
        raise AssertionError(f"serve did not start: {first!r} {(folder / 'serve.log').read_text()}")
    return process, first.removeprefix("serving ").strip()


def ended(process: subprocess.Popen, folder: Path) -> str:
    """Stop the service; what it logged on stderr."""
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if process.stdout is not None:
        process.stdout.close()
    return (folder / "serve.log").read_text()


def test_a_fifo_a_device_and_an_unreadable_file_named_as_bases_never_stop_serve(tmp_path):
    prefix = unprivileged()
    good = small_base(tmp_path / "good.db")
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    unreadable = small_base(tmp_path / "unreadable.db")
    unreadable.chmod(0)
    tmp_path.chmod(0o755)  # setpriv's root reaches it by its mode, as any user would
    for path, code, said in (
        (fifo, "NOT_A_BASE", "is a FIFO, not a base file"),
        ("/dev/null", "NOT_A_BASE", "is a character device, not a base file"),
        (unreadable, "STORE_ERROR", "cannot be read: permission denied"),
    ):
        done = metis("status", path, prefix=prefix)
        assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"error: {code}: {path} {said}"), done.stderr
    process, url = serving(
        tmp_path,
        str(good),
        str(fifo),
        "null=/dev/null",
        str(unreadable),
        "--poll",
        "0",
        prefix=prefix,
    )
    try:
        listed = http.get(f"{url}/v1/bases").json()
        found = http.post(f"{url}/v1/bases/good/search", json={"question": "shared words"})
        refused = http.post(f"{url}/v1/bases/fifo/search", json={"question": "shared words"})
    finally:
        log = ended(process, tmp_path)
    assert [b["name"] for b in listed["bases"]] == ["good"]
    assert [(u["name"], u["code"]) for u in listed["unavailable"]] == [
        ("fifo", "NOT_A_BASE"),
        ("null", "NOT_A_BASE"),
        ("unreadable", "STORE_ERROR"),
    ]
    assert "permission denied" in listed["unavailable"][2]["message"]
    assert "-wal" not in listed["unavailable"][2]["message"]  # not blamed on a deleted WAL
    assert found.status_code == 200 and found.json()["results"]
    assert (refused.status_code, code_of(refused)) == (400, "NOT_A_BASE")
    assert "Traceback" not in log


# -- the indexer's lock file ------------------------------------------------------------------


def fifo_lock(lock: Path) -> None:
    os.mkfifo(lock)


def link_to_a_fifo(lock: Path) -> None:
    os.mkfifo(lock.with_name("elsewhere"))
    lock.symlink_to(lock.with_name("elsewhere"))


def device_lock(lock: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(lock, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is


@pytest.mark.parametrize("make", [fifo_lock, link_to_a_fifo, device_lock])
def test_a_lock_file_that_is_no_regular_file_blocks_nobody(tmp_path, make):
    base = small_base(tmp_path / "b.db")
    lock = Path(f"{base}.lock")
    lock.unlink(missing_ok=True)
    make(lock)
    status = metis("status", base)
    assert status.returncode == 0 and "documents 9" in status.stdout, status.stderr
    found = metis("search", base, "shared words", "--mode", "keyword")
    assert found.returncode == 0 and "b3.md" in found.stdout, found.stderr
    index = metis("index", base)
    assert index.returncode == 1 and "Traceback" not in index.stderr, index.stderr
    assert index.stderr.splitlines()[-1].startswith(f"error: STORE_ERROR: {lock} is a "), (
        index.stderr
    )
    process, url = serving(tmp_path, str(base), "--poll", "0")
    try:
        with ThreadPoolExecutor(8) as pool:  # more than the service's workers
            listed = list(pool.map(lambda _: http.get(f"{url}/v1/bases", timeout=15), range(8)))
        indexed = http.post(f"{url}/v1/bases/b/index", timeout=15)
    finally:
        log = ended(process, tmp_path)
    assert [r.status_code for r in listed] == [200] * 8
    assert (indexed.status_code, code_of(indexed)) == (500, "STORE_ERROR")  # never a 202
    assert str(lock) in indexed.json()["error"]["message"]
    assert "Traceback" not in log


def test_the_lock_file_is_its_owners_alone_and_a_busy_base_names_its_holder(tmp_path):
    base = small_base(tmp_path / "b.db")
    lock = Path(f"{base}.lock")
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    lock.chmod(0o644)  # as an older metis-lite made it
    assert metis("index", base).returncode in (0, 3)
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY);"
            " fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        busy = metis("index", base)
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert busy.returncode == 4, busy.stderr
    said = busy.stderr.splitlines()[-1]
    assert said.startswith(f"error: BASE_BUSY: {base} is being indexed by another process"), said
    if Path("/proc/locks").exists():
        assert f"(pid {holder.pid}: {sys.executable} -c import fcntl" in said, said
    assert metis("index", base).returncode in (0, 3)  # the holder gone, indexed again
