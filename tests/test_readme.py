"""Every search the README prints is what the program prints: each ```console block of the README
that starts with `$ metis-lite search handbook.db …` is run against the example base (the
shipped examples/handbook indexed with the default model) and its output compared line by line."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

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
