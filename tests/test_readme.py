"""Every search the README prints is what the program prints: each ```console block of the README
that starts with `$ metis-lite search handbook.db …` is run against the example base (the
shipped examples/handbook indexed with the default model) and its output compared line by line."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

BLOCK = re.compile(r"```console\n\$ (metis-lite search handbook\.db [^\n]+)\n(.*?)```", re.S)


def readme_searches() -> list[tuple[str, str]]:
    return BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))


def test_the_readme_prints_searches():
    assert readme_searches(), "the README shows no search output"


@pytest.mark.parametrize("command,printed", readme_searches())
def test_a_search_printed_in_the_readme_is_what_the_program_prints(
    command, printed, example_base_file, tmp_path
):
    shutil.copy(example_base_file, tmp_path / "handbook.db")
    args = shlex.split(command)[1:]
    done = subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == printed


# -- set-up: a virtual environment first ------------------------------------------------------


def test_the_readme_makes_a_virtual_environment_before_the_scripts_install():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    venv = readme.index("python3 -m venv .venv && . .venv/bin/activate")
    assert venv < readme.index("scripts/quickstart   #")


def _install_with(python: str, tmp_path) -> tuple[str, list[str]]:
    """scripts/install run with PYTHON=a stand-in that is `python` for everything but pip,
    whose calls it only records: what the script says, and what pip was asked."""
    log = tmp_path / "pip.log"
    stand_in = tmp_path / "python"
    stand_in.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then echo "$@" >> {shlex.quote(str(log))};'
        " exit 0; fi\n"
        f'exec {shlex.quote(python)} "$@"\n',
        encoding="utf-8",
    )
    stand_in.chmod(0o755)
    done = subprocess.run(
        [str(ROOT / "scripts" / "install")],
        env={"PATH": "/usr/bin:/bin", "PYTHON": str(stand_in)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, log.read_text(encoding="utf-8").splitlines()


def test_the_install_script_says_so_outside_a_virtual_environment(tmp_path):
    outside = Path(sys.base_prefix) / "bin" / "python3"  # the Python a venv is made from
    venv = tmp_path / "venv"
    subprocess.run([str(outside), "-m", "venv", "--without-pip", str(venv)], check=True)
    said, pip = _install_with(str(outside), tmp_path)
    assert said.startswith("warning: ") and "is not in a virtual environment" in said
    assert f"pip will install metis-lite into {sys.base_prefix}" in said
    assert "python3 -m venv .venv && . .venv/bin/activate" in said
    assert len(pip) == 2  # it warns, then installs all the same
    (tmp_path / "pip.log").unlink()
    said, pip = _install_with(str(venv / "bin" / "python3"), tmp_path)
    assert said == "" and len(pip) == 2
