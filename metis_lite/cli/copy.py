"""`metis-lite copy` and `metis-lite shell`: the base file itself, copied whole or read in SQL."""

from __future__ import annotations

import argparse
from typing import Any

from metis_lite.cli.common import add_command, warn


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
        loaded = "the 'metis' tokenizer is loaded"
        if load_sqlite_vec(store.db):
            loaded = "the 'metis' tokenizer and sqlite-vec are loaded: vec_to_json(embedding)"
        shell = apsw.shell.Shell(db=store.db)
        shell.cmdloop(intro=f"metis-lite shell on {args.base} ({loaded}; .help)")
    return 0


def load_sqlite_vec(db: Any) -> bool:
    """Load sqlite-vec into this one connection, so that the shell reads the vectors table with
    its functions (vec_to_json, vec_distance_cosine, …); False, said on stderr, where it cannot
    be loaded (an SQLite built without extension loading, a platform sqlite-vec has no build for)."""
    try:
        import sqlite_vec

        db.enable_load_extension(True)
        try:
            db.load_extension(sqlite_vec.loadable_path())
        finally:
            db.enable_load_extension(False)
    except Exception as exc:  # the shell still opens: only the vector functions are missing
        warn(f"warning: sqlite-vec is not loaded ({exc}): vec_to_json and the like are missing")
        return False
    return True
