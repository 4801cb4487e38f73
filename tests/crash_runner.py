"""Run the metis-lite CLI with a fault planted at one precise point of its work.

    python tests/crash_runner.py --kill sql --at 3 --pattern "INSERT INTO chunks_fts" -- index BASE
    python tests/crash_runner.py --max-page-count 40 -- index BASE FOLDER

`--kill WHERE --at N` sends the process SIGKILL (kill -9: no handler, no cleanup, no flush)
at the Nth time it reaches WHERE:

    open         before a base connection is opened (start-up: the CLI opens the base)
    parse        before parsing a file (metis_lite.parsing.parse), in the indexer: reached
                 only when it parses itself (few files to parse, or --workers 1)
    chunk        before cutting a parsed document into chunks (likewise)
    parsed       before a parsed file is written (mid words pass, with workers or without)
    words-done   once every file is written, before the vectors still waiting are made
    sql          before a statement matching --pattern runs on a base connection (an apsw
                 exec tracer): inside a document's transaction, between its chunk inserts
    embed        before an embedding call is sent (the embedder's embed_documents)
    embedded     after the embedding model answered, before its vectors are stored
    put_vectors  before a batch of vectors is written (Store.put_vectors)
    wal-write    before a page is written to BASE-wal (a Python VFS): a commit half written
    db-write     before a page is written to the base file itself: a checkpoint half done

`--pool-always` starts parse workers for any two files to parse (workers.POOL_MIN_SECONDS 0: a
small corpus is parsed in worker processes, as a large one would be). `--pause DIR` pauses
there instead: the run writes DIR/paused and waits until DIR/resume exists (a moment, held
open, at which a test looks at the base). `--embed-batch N` embeds N
chunks per batch (so a small corpus gives several batches), `--autocheckpoint N` checkpoints
every N WAL pages (0: never, so commits stay in BASE-wal), `--max-page-count N` caps the base
file at N pages (SQLITE_FULL, as on a full disk), and `--readonly` opens every base connection
read-only (SQLITE_OPEN_READONLY). A run whose point is never reached exits as the CLI does;
the tests check that it was killed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import apsw  # noqa: E402

from metis_lite import cli, parsing, store
from metis_lite.indexing import (  # noqa: E402
    ingest,
    pipeline,
    workers,
)
from metis_lite.models import http  # noqa: E402
from metis_lite.store import connection
from metis_lite.text import chunking

POINTS = (
    "open",
    "parse",
    "chunk",
    "parsed",
    "words-done",
    "sql",
    "embed",
    "embedded",
    "put_vectors",
    "wal-write",
    "db-write",
)


PAUSE_LIMIT_S = 120.0
"""A paused run goes on by itself after this long, so a failed test never leaves it behind."""


class Trigger:
    """Counts arrivals at the planted point and, at the Nth, kills the process, or with a
    pause folder pauses it there: writes PAUSE/paused, waits for PAUSE/resume."""

    def __init__(self, where: str | None, at: int, pause: Path | None = None) -> None:
        self.where = where
        self.at = at
        self.pause = pause
        self.seen = 0

    def reached(self, where: str) -> None:
        if where != self.where:
            return
        self.seen += 1
        if self.seen != self.at:
            return
        if self.pause is None:
            os.kill(os.getpid(), signal.SIGKILL)
        (self.pause / "paused").write_text(str(os.getpid()))
        deadline = time.monotonic() + PAUSE_LIMIT_S
        while not (self.pause / "resume").exists() and time.monotonic() < deadline:
            time.sleep(0.02)


def plant(options: argparse.Namespace) -> None:
    trigger = Trigger(options.kill, options.at, options.pause)
    if options.embed_batch:
        ingest.EMBED_BATCH = options.embed_batch
    if options.pool_always:
        workers.POOL_MIN_SECONDS = 0.0
    pattern = re.compile(options.pattern) if options.pattern else None

    real_parse = parsing.parse

    def parse(*args, **kwargs):
        trigger.reached("parse")
        return real_parse(*args, **kwargs)

    parsing.parse = parse

    real_chunk = chunking.chunk

    def chunk(*args, **kwargs):
        trigger.reached("chunk")
        return real_chunk(*args, **kwargs)

    chunking.chunk = chunk

    real_write = ingest._write

    def write(*args, **kwargs):
        trigger.reached("parsed")
        return real_write(*args, **kwargs)

    ingest._write = write

    real_finish_vectors = pipeline.Pipeline.finish_vectors

    def finish_vectors(self):
        trigger.reached("words-done")
        return real_finish_vectors(self)

    pipeline.Pipeline.finish_vectors = finish_vectors

    real_embed = http._HttpEmbedder.embed_documents  # what an index run calls

    def embed_documents(self, texts):
        trigger.reached("embed")
        vectors = real_embed(self, texts)
        trigger.reached("embedded")
        return vectors

    http._HttpEmbedder.embed_documents = embed_documents

    real_put = store.Store.put_vectors

    def put_vectors(self, model, items):
        trigger.reached("put_vectors")
        return real_put(self, model, items)

    store.Store.put_vectors = put_vectors

    def tracer(cursor, sql, bindings):
        if pattern is not None and pattern.search(sql):
            trigger.reached("sql")
        return True

    real_connect = connection.connect

    def connect(path, *, readonly=False, **kwargs):
        trigger.reached("open")
        db = real_connect(path, readonly=readonly or options.readonly, **kwargs)
        if options.max_page_count is not None:
            db.execute(f"PRAGMA max_page_count = {int(options.max_page_count)}")
        if options.autocheckpoint is not None:
            db.execute(f"PRAGMA wal_autocheckpoint = {int(options.autocheckpoint)}")
        db.exec_trace = tracer
        return db

    connection.connect = connect

    if options.kill in ("wal-write", "db-write"):
        _install_vfs(trigger)


def _install_vfs(trigger: Trigger) -> None:
    """Make a counting VFS the default, so every base connection's writes pass through it."""
    base = apsw.vfs_names()[0]  # the platform's default VFS, which does the real work

    class File(apsw.VFSFile):
        def __init__(self, filename, flags):
            name = filename.filename() if isinstance(filename, apsw.URIFilename) else filename
            self.kind = None
            if name:
                self.kind = "wal-write" if name.endswith("-wal") else None
                if name.endswith(".db"):
                    self.kind = "db-write"
            super().__init__(base, filename, flags)

        def xWrite(self, data, offset):  # noqa: N802 - the VFS protocol's name
            if self.kind:
                trigger.reached(self.kind)
            return super().xWrite(data, offset)

    class VFS(apsw.VFS):
        def __init__(self):
            super().__init__("crash-runner", base, makedefault=True)

        def xOpen(self, name, flags):  # noqa: N802
            return File(name, flags)

    plant.vfs = VFS()  # kept alive for the life of the process


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: crash_runner.py [options] -- CLI ARGS", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="crash_runner.py")
    parser.add_argument("--kill", choices=POINTS)
    parser.add_argument("--at", type=int, default=1)
    parser.add_argument("--pattern", help="regular expression over SQL (with --kill sql)")
    parser.add_argument("--pause", type=Path, help="pause at the point instead (a folder)")
    parser.add_argument("--embed-batch", type=int)
    parser.add_argument("--pool-always", action="store_true")
    parser.add_argument("--max-page-count", type=int)
    parser.add_argument("--autocheckpoint", type=int)
    parser.add_argument("--readonly", action="store_true")
    options = parser.parse_args(argv[:split])
    plant(options)
    return cli.main(argv[split + 1 :])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
