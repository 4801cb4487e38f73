"""`metis-lite copy`, `metis-lite publish` and `metis-lite shell`: the base file itself,
copied whole, published for read-only readers, or read in SQL."""

from __future__ import annotations

import argparse
from typing import Any

from metis_lite.cli.common import add_command, print_json, say, warn


def add_parser(commands: Any) -> None:
    from metis_lite.copies import backup

    copy = add_command(
        commands,
        "copy",
        backup.run_from_args,
        "copy a base as one consistent file, even while it is served",
        "metis-lite copy handbook.db handbook-2026-12-02.db",
        "metis-lite copy handbook.db handbook-copy.db --json",
    )
    backup.add_arguments(copy)

    publish = add_command(
        commands,
        "publish",
        run_publish,
        "put a consistent copy of a base in place for read-only readers, in one rename",
        "metis-lite publish handbook.db handbook-published.db",
        "metis-lite publish handbook.db handbook-published.db --json   # again: replaces it",
    )
    publish.add_argument("base", help="the base to publish (may be searched and indexed meanwhile)")
    publish.add_argument(
        "dest",
        help="where readers find it: a new file, or a copy published there before (replaced)",
    )
    publish.add_argument("--json", action="store_true", help="print what was published as JSON")

    shell = add_command(
        commands,
        "shell",
        run_shell,
        "open the base in an SQL shell with the tokenizer loaded",
        "metis-lite shell handbook.db",
        "echo 'SELECT kind, count(*) FROM documents GROUP BY kind;' | metis-lite shell handbook.db",
    )
    shell.add_argument("base", help="the base file")


def run_publish(args: argparse.Namespace) -> int:
    from metis_lite.copies.publish import publish
    from metis_lite.service.serialize import published_to_json

    done = publish(args.base, args.dest)
    if args.json:
        print_json(published_to_json(done))
    else:
        say(
            f"published {done.source} at {done.dest} ({done.bytes:,} bytes, {done.chunks:,} "
            f"chunks, {done.seconds:.2f} s): readers switch to it on their own"
        )
    return 0


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
