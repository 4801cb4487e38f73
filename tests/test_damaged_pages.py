"""A base with any one page damaged: every command either answers (the damage lies in a page
it does not read) or is refused in one line, exit 1, with BASE_DAMAGED (NOT_A_BASE for the
first page, which holds SQLite's header) — never a traceback; `copy`, which reads every page,
refuses every one; and `serve` with such a base beside a good one starts and answers for the
good one.

Each page of a small base (about 30 pages of 4 KiB) is overwritten in turn with random bytes
(seeded by the page's number, so a failure is repeated exactly).
"""

from __future__ import annotations

import io
import random
import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing, redirect_stderr, redirect_stdout
from pathlib import Path

import httpx
import pytest
from conftest import ROOT, words_only_base
from serving import served

from metis_lite import cli

COMMANDS = {
    "status": ("status",),
    "search": ("search", "shared words", "--mode", "keyword"),
    "sources": ("sources",),
    "facts": ("facts",),
    "index": ("index",),
    "remember": ("remember", "A new fact."),
    "copy": ("copy", "{dest}"),
}
"""Every command that reads a base, run in this process (cli.main): an exception escaping it
fails the test, as a traceback would."""

ANSWERED = (0, 3)
"""A command that did not read the damaged page: done (3: its chunks wait for the model,
which never answers here)."""


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A small words-only base, every page in the main file (no -wal), none of them free."""
    folder = tmp_path_factory.mktemp("pristine")
    src = folder / "src"
    src.mkdir()
    for n in range(3):
        (src / f"d{n}.md").write_text(f"# Document {n}\n\nshared words {n}.\n")
    path = folder / "b.db"
    with words_only_base(path, src) as base:
        base.index()
        base.remember("A fact of the base.")
    with closing(sqlite3.connect(path)) as plain:
        plain.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert plain.execute("PRAGMA freelist_count").fetchone()[0] == 0  # every page in use
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    return path


def page_size(path: Path) -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as plain:
        return plain.execute("PRAGMA page_size").fetchone()[0]


def root_page(path: Path, table: str) -> int:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as plain:
        found = plain.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,))
        return found.fetchone()[0]


def damaged_copy(pristine: Path, folder: Path, page: int) -> Path:
    """A copy of the base with page `page` (1-based) overwritten by random bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"page{page}.db"
    shutil.copy(pristine, path)
    size = page_size(pristine)
    with path.open("r+b") as raw:
        raw.seek(size * (page - 1))
        raw.write(random.Random(page).randbytes(size))
    return path


def run(*args: str) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def refusal(done: subprocess.CompletedProcess) -> str | None:
    """The code a command was refused with, checked to be said as one would read it: exit 1,
    one error line, the last; None when the command answered."""
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in done.stderr, done.stderr
    if done.returncode in ANSWERED and not errors:
        return None
    assert done.returncode == 1, (done.args, done.returncode, done.stderr)
    assert len(errors) == 1 and done.stderr.splitlines()[-1] == errors[0], done.stderr
    return errors[0].split(":")[1].strip()


def test_every_damaged_page_is_refused_in_one_line_or_not_read_at_all(pristine, tmp_path):
    pages = pristine.stat().st_size // page_size(pristine)
    read_at_open = {root_page(pristine, "meta"), root_page(pristine, "spec")}
    refused: dict[tuple[int, str], str | None] = {}
    for page in range(1, pages + 1):
        for name, args in COMMANDS.items():
            folder = tmp_path / f"{page}-{name}"
            base = damaged_copy(pristine, folder, page)
            command = [a.format(dest=folder / "copy.db") for a in args]
            refused[page, name] = refusal(run(command[0], base, *command[1:]))
            if name == "copy":
                assert not (folder / "copy.db").exists()
    wrong = {
        key: code
        for key, code in refused.items()
        if code is not None and code != ("NOT_A_BASE" if key[0] == 1 else "BASE_DAMAGED")
    }
    assert not wrong, wrong
    # copy reads every page and checks what it read: each damaged page is found
    assert [p for p in range(1, pages + 1) if refused[p, "copy"] is None] == []
    # the pages every command reads when it opens the base refuse every command
    for page in sorted(read_at_open | {1}):
        assert all(refused[page, name] is not None for name in COMMANDS), (page, refused)


def test_serve_answers_for_a_good_base_beside_one_damaged_in_any_page(pristine, tmp_path):
    good = tmp_path / "good.db"
    shutil.copy(pristine, good)
    pages = pristine.stat().st_size // page_size(pristine)
    asked = {"question": "shared words", "mode": "keyword"}
    with httpx.Client(timeout=60) as http:
        for page in range(1, pages + 1):
            damaged = damaged_copy(pristine, tmp_path / "damaged", page)
            with served([f"good={good}", f"damaged={damaged}"]) as server:
                listed = http.get(f"{server.url}/v1/bases")
                mine = http.post(f"{server.url}/v1/bases/good/search", json=asked)
                theirs = http.post(f"{server.url}/v1/bases/damaged/search", json=asked)
                both = http.post(
                    f"{server.url}/v1/search", json={**asked, "bases": ["good", "damaged"]}
                )
            assert listed.status_code == 200, (page, listed.text)
            assert "good" in [b["name"] for b in listed.json()["bases"]], page
            assert mine.status_code == 200 and mine.json()["results"], (page, mine.text)
            for answer in (theirs, both):
                assert answer.status_code in (200, 400, 409), (page, answer.text)
                if answer.status_code != 200:
                    assert answer.json()["error"]["code"] in ("BASE_DAMAGED", "NOT_A_BASE")


def test_the_serve_command_starts_beside_a_base_whose_spec_page_is_damaged(pristine, tmp_path):
    """The repro: random bytes over the root page of the table named spec, which every opening reads."""
    good = tmp_path / "good.db"
    shutil.copy(pristine, good)
    damaged = damaged_copy(pristine, tmp_path / "damaged", root_page(pristine, "spec"))
    from serving import serve, stop

    service = serve(tmp_path, str(good), f"damaged={damaged}", "--poll", "0")
    try:
        with httpx.Client(timeout=60) as http:
            listed = http.get(f"{service.url}/v1/bases").json()
            found = http.post(f"{service.url}/v1/bases/good/search", json={"question": "shared"})
            refused = http.post(f"{service.url}/v1/bases/damaged/search", json={"question": "x"})
    finally:
        stop(service)
    assert [b["name"] for b in listed["bases"]] == ["good"]
    assert [(u["name"], u["code"]) for u in listed["unavailable"]] == [("damaged", "BASE_DAMAGED")]
    assert found.status_code == 200 and found.json()["results"]
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "BASE_DAMAGED")
    log = service.output()
    assert log.count("warning: base damaged is not served: BASE_DAMAGED") == 1, log
    assert "Traceback" not in log, log


def test_mcp_starts_beside_a_base_whose_spec_page_is_damaged(pristine, tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK (the extra mcp) is not installed")
    good = tmp_path / "good.db"
    shutil.copy(pristine, good)
    damaged = damaged_copy(pristine, tmp_path / "damaged", root_page(pristine, "spec"))
    done = subprocess.run(
        [sys.executable, "-m", "metis_lite", "mcp", str(good), f"damaged={damaged}"],
        input="",  # the client closes stdin at once: a server that started ends cleanly
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "warning: base damaged is not served: BASE_DAMAGED" in done.stderr
    assert "Traceback" not in done.stderr
