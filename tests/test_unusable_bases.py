"""A service with a base it cannot use: it starts, serves the others, and answers every request
naming that base with its code (BASE_DAMAGED, NOT_A_BASE), never a 500; a base damaged while it
is served is answered the same way from then on."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
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
