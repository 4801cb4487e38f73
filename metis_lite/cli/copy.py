"""`metis-lite copy` and `metis-lite shell`: the base file itself, copied whole or read in SQL."""

from __future__ import annotations

import argparse
from typing import Any

from metis_lite.cli.common import add_command


def add_parser(commands: Any) -> None:
    from metis_lite import backup

    copy = add_command(
        commands,
        "copy",
        backup.run_from_args,
        "copy a base as one consistent file, even while it is served",
        "metis-lite copy handbook.db handbook-2026-12-02.db",
        "metis-lite copy handbook.db handbook-copy.db --json",
    )
    backup.add_arguments(copy)

    shell = add_command(
        commands,
        "shell",
        run_shell,
        "open the base in an SQL shell with the tokenizer loaded",
        "metis-lite shell handbook.db",
        "echo 'SELECT kind, count(*) FROM documents GROUP BY kind;' | metis-lite shell handbook.db",
    )
    shell.add_argument("base", help="the base file")


def run_shell(args: argparse.Namespace) -> int:
    import apsw.shell

    from metis_lite.store import Store

    with Store(args.base) as store:
        shell = apsw.shell.Shell(db=store.db)
        shell.cmdloop(
            intro=f"metis-lite shell on {args.base} (the 'metis' tokenizer is loaded; .help)"
        )
    return 0
