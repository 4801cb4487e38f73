"""The CLI's human output shows control characters and bidirectional overrides escaped —
visible, never obeyed by the terminal — wherever the text came from (a title, a file name, a
passage, a fact); `--json` keeps the text exact."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, words_only_base

from metis_lite.escapes import escape_controls

CLEAR_SCREEN = "\x1b[2J"
SET_TITLE = "\x1b]0;owned\x07"
RLO = "\u202e"
CSI = "\x9b"
FORBIDDEN = ("\x1b", "\x07", "\x9b", RLO, "\u2066", "\r")
"""What must never reach the terminal raw from a base's text."""


@pytest.mark.parametrize(
    "text, shown",
    [
        (CLEAR_SCREEN + "title", "\\x1b[2Jtitle"),
        (SET_TITLE, "\\x1b]0;owned\\x07"),
        ("line\nforged", "line\\nforged"),
        ("cr\rover", "cr\\rover"),
        ("tab\there", "tab\\there"),
        (f"invoice{RLO}fdp.exe", "invoice\\u202efdp.exe"),
        (CSI + "31m", "\\x9b31m"),
        ("del\x7f", "del\\x7f"),
        ("sep\u2028par\u2029", "sep\\u2028par\\u2029"),
        ("isolate\u2066x\u2069", "isolate\\u2066x\\u2069"),
        ("Configuração 設定 🙂 e\u0301 a\u200db", "Configuração 設定 🙂 e\u0301 a\u200db"),
    ],
)
def test_controls_are_escaped_and_every_other_character_kept(text, shown):
    assert escape_controls(text) == shown


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        encoding="utf-8",
    )


def assert_clean(output: str) -> None:
    for char in FORBIDDEN:
        assert char not in output, f"{char!r} reached the terminal"


@pytest.fixture
def hostile_base(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "report.md").write_text(
        f"# {CLEAR_SCREEN}Quarterly{SET_TITLE} report\n\n## Ove{RLO}rview\n\n"
        f"The zeppelin budget{CSI}31m grew.\n",
        encoding="utf-8",
    )
    (src / "forged\nskipped evil.md: everything is fine.md").write_text(
        "# Forged\n\nThe zeppelin landed.\n", encoding="utf-8"
    )
    (src / f"esc{CLEAR_SCREEN}.md").write_bytes(b"\x00\x01binary")  # skipped: its name shown
    path = tmp_path / "b.db"
    with words_only_base(path, src) as base:
        base.index()
        base.remember(f"The zeppelin code is {SET_TITLE}{CLEAR_SCREEN}42", key=f"k{RLO}ey")
    return path


def test_human_output_shows_escapes_and_json_keeps_the_text(hostile_base):
    base = str(hostile_base)
    index = cli("index", base)
    assert_clean(index.stdout + index.stderr)
    assert "skipped src/esc\\x1b[2J.md:" in index.stdout
    search = cli("search", base, "zeppelin", "--mode", "keyword")
    assert search.returncode == 0, search.stderr
    assert_clean(search.stdout + search.stderr)
    assert "src/forged\\nskipped evil.md: everything is fine.md" in search.stdout
    assert "\\x1b[2JQuarterly\\x1b]0;owned\\x07 report" in search.stdout
    assert "Ove\\u202erview" in search.stdout
    assert "42" in search.stdout
    lines = search.stdout.splitlines()
    assert not any(line.startswith("skipped evil.md") for line in lines)  # no forged line
    for command in (("status", base), ("facts", base), ("sources", base)):
        run = cli(*command)
        assert run.returncode == 0, run.stderr
        assert_clean(run.stdout + run.stderr)
    facts = cli("facts", base)
    assert "\\x1b]0;owned\\x07\\x1b[2J42" in facts.stdout and "k\\u202eey" in facts.stdout

    exact = json.loads(cli("search", base, "zeppelin", "--mode", "keyword", "--json").stdout)
    documents = {r["citation"]["document"] for r in exact["results"]}
    assert "forged\nskipped evil.md: everything is fine.md" in documents
    titles = {r["citation"]["title"] for r in exact["results"]}
    assert f"{CLEAR_SCREEN}Quarterly{SET_TITLE} report" in titles
    listed = json.loads(cli("facts", base, "--json").stdout)["facts"]
    assert listed[0]["text"] == f"The zeppelin code is {SET_TITLE}{CLEAR_SCREEN}42"


def test_the_services_log_lines_are_escaped(capsys):
    """The service logs file names (a skipped file's reason) to an admin's terminal."""
    from metis_lite.service.bases import log_stderr

    log_stderr("skipped docs/\x1b]0;pwned\x07.md: no text")
    assert capsys.readouterr().err == "skipped docs/\\x1b]0;pwned\\x07.md: no text\n"
