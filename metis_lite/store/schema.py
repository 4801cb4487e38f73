"""A base's schema: opening the file as a base, upgrading an older one, its words index.

The DDL is schema.sql (repository root, packaged inside metis_lite); a base records its
schema version in `meta`. A newer version is refused (SCHEMA_TOO_NEW); tables added since an
older base was made are created on open when the base can be written.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import apsw

from metis_lite import connection as policy
from metis_lite import tokenizer
from metis_lite.errors import BaseNotFound, NotABase, SchemaTooNew, StoreError
from metis_lite.store.core import StoreCore, now_iso, one

SCHEMA_VERSION = 2
"""2: the words index is declared with its word rules (`tokenize='metis 2'`). A base of version
1 is read as it is, and `index` rebuilds its words index (rebuild_words) and records 2: code
that knows only version 1 then refuses the base, rather than write words by its old rules."""

_SCHEMA_OBJECT = re.compile(r"CREATE (?:VIRTUAL TABLE|TABLE|INDEX|TRIGGER) IF NOT EXISTS (\w+)")


def schema_sql() -> str:
    """schema.sql, from the installed package or, in a source checkout, the repository root."""
    packaged = resources.files("metis_lite").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / "schema.sql").read_text(encoding="utf-8")


def statement(name: str) -> str:
    """schema.sql's CREATE statement for one table."""
    match = re.search(rf"CREATE [^;]*? IF NOT EXISTS {name}\b[^;]*;", schema_sql())
    if match is None:
        raise StoreError(f"schema.sql has no table {name}")
    return match.group()


class SchemaMixin(StoreCore):
    """Opening a base (or making one), its schema version, its words index."""

    def _open(self, path: str | os.PathLike[str], create: bool) -> None:
        self.path = Path(path)
        self._depth = 0
        if not self.path.exists() and not create:
            raise BaseNotFound(
                f"no base at {self.path}: create it with `metis-lite index {self.path} FOLDER`"
                f" (a memory base needs no folder: `metis-lite index {self.path} --kind memory`)"
            )
        if self.path.exists():
            policy.check_is_sqlite(self.path)
        self.db = policy.connect(self.path)
        try:
            self._ensure_schema(create)
        except BaseException:
            self.db.close()
            raise

    def _ensure_schema(self, create: bool) -> None:
        has_meta = self.db.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'meta'"
        ).fetchone()
        if has_meta:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                raise NotABase(f"{self.path} is not a metis-lite base (no schema version)")
            version = int(row[0])
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.path} has schema version {version}; this metis-lite reads up to "
                    f"{SCHEMA_VERSION}: upgrade metis-lite to open it"
                )
            if self._missing_objects():
                try:  # tables added since the base was made (every statement is IF NOT EXISTS)
                    with self.db:
                        self.db.execute(schema_sql())
                except (apsw.ReadOnlyError, apsw.BusyError):
                    pass
            return
        other = one(self.db.execute("SELECT count(*) FROM sqlite_schema"))[0]
        if other or not create:
            raise NotABase(f"{self.path} is an SQLite file but not a metis-lite base")
        with self._transaction():
            self.db.execute(schema_sql())
            self.db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('created_at', ?)",
                (str(SCHEMA_VERSION), now_iso()),
            )

    def _missing_objects(self) -> set[str]:
        wanted = set(_SCHEMA_OBJECT.findall(schema_sql()))
        present = {row[0] for row in self.db.execute("SELECT name FROM sqlite_schema")}
        return wanted - present

    def ensure_schema_objects(self) -> None:
        """Make the tables added since the base was made (every statement is IF NOT EXISTS)."""
        if self._missing_objects():
            with self._transaction():
                self.db.execute(schema_sql())

    # -- words index ------------------------------------------------------------------------

    @property
    def words_version(self) -> int:
        """The word rules the base's words index was built with (tokenizer.VERSIONS), as its
        declaration names them; read again only when the schema changes (rebuild_words here or
        in another process)."""
        cookie = one(self.db.execute("PRAGMA schema_version"))[0]
        if getattr(self, "_words_cookie", None) != cookie:
            row = self.db.execute(
                "SELECT sql FROM sqlite_schema WHERE name = 'chunks_fts'"
            ).fetchone()
            self._words_cookie = cookie
            self._words_version = tokenizer.declared_version(row[0]) if row else tokenizer.VERSION
        return self._words_version

    @property
    def words_outdated(self) -> bool:
        """True when the words index was built by older word rules than this metis-lite's
        (before CJK bigrams): searches still read it by its own rules; `index` rebuilds it."""
        return self.words_version < tokenizer.VERSION

    def rebuild_words(self) -> int:
        """Build the words index again by today's word rules, from the chunks as stored (text,
        and title and headings as context, as replace_document writes them); returns the
        chunks indexed. One transaction: a crash leaves the old index whole or the new one,
        never a mix. Nothing is embedded again."""
        with self._transaction():
            self.db.execute("UPDATE meta SET value = value WHERE 0")  # the write lock first
            self.db.execute("DROP TABLE IF EXISTS chunks_fts")
            self.db.execute(statement("chunks_fts"))
            rows = self.db.execute("SELECT id, text, title, headings FROM chunks ORDER BY id")
            self.db.cursor().executemany(
                "INSERT INTO chunks_fts (rowid, text, context) VALUES (?, ?, ?)",
                (
                    (chunk_id, text, " ".join((title, *json.loads(headings))))
                    for chunk_id, text, title, headings in rows
                ),
            )
            self.db.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            return int(one(self.db.execute("SELECT count(*) FROM chunks"))[0])
