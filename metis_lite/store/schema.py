"""A base's schema: opening a file as a base, bringing an older one up to date, its words index.

The DDL is schema.sql (repository root, packaged inside metis_lite); a base records its schema
version and the name of its notes source in `meta`, and carries connection.APPLICATION_ID.
A newer version is refused (SCHEMA_TOO_NEW). An older base is brought up to date in one
transaction, never in part: the tables added since it was made when it opens (waiting for
another writer up to the busy timeout, then BASE_BUSY), its application id and one notes
source (several, made by older versions under other names, are joined) with its next write.
A base that cannot be written is searched as it is: a table it lacks reads as empty.
"""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import apsw

from metis_lite.errors import BaseReadOnly, NotABase, SchemaTooNew, StoreError
from metis_lite.store import connection as policy
from metis_lite.store.core import StoreCore, now_iso, one
from metis_lite.text import chunking, tokenizer

SCHEMA_VERSION = 4
"""2: the words index is declared with its word rules (`tokenize='metis 2'`). A base of version
1 is read as it is, and `index` rebuilds its words index (rebuild_words) and records the
version: code that knows only version 1 then refuses the base, rather than write words by its
old rules.
3: `source_options` says how each source is read — a file source, and a folder's exclude
patterns and ignore files. An older base gets the table (empty: each source a folder that
reads its ignore files) and records 3 with its first write (_upgrade): code that knows only
version 2 then refuses the base, rather than index what its sources exclude and read a file
source as a missing folder.
4: `chunk_places` holds a chunk's heading anchor (HTML, EPUB) and whether OCR read it. An
older base gets the table (empty: no anchors, nothing by OCR) and records 4 with its first
write, as for 3. `source_ocr` holds the OCR languages a source names (none: the default).
`document_copies` lists the files that are byte-for-byte an indexed document, and
`chunk_digests` what each vector was embedded from (none: each file its own document, each
chunk embedded); code without them reads the copies' originals and embeds as before."""

NOTES_PREFIX = "metis-"
"""A base's notes source is named metis-<the file's name when the base was made>."""

_SCHEMA_OBJECT = re.compile(r"CREATE (?:VIRTUAL TABLE|TABLE|INDEX|TRIGGER) IF NOT EXISTS (\w+)")
_TABLE = re.compile(r"CREATE (VIRTUAL TABLE|TABLE) IF NOT EXISTS (\w+)\b[^;]*;")


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


def notes_name(path: Path) -> str:
    return f"{NOTES_PREFIX}{path.stem}"


class SchemaMixin(StoreCore):
    """Opening a base (or making one), its schema version, its words index."""

    def _open(
        self, path: str | os.PathLike[str], *, create: bool, readonly: bool, immutable: bool
    ) -> None:
        self.path = Path(path)
        self._depth = 0
        self._upgrade_due = False
        self._wal_files = None
        self.db = policy.connect(self.path, create=create, readonly=readonly, immutable=immutable)
        try:
            self._ensure_schema(create)
            self._remember_wal()  # read by now, so SQLite has opened them
        except apsw.Error as exc:
            self.db.close()
            raise policy.read_failure(exc, self.path) or StoreError(f"{self.path}: {exc}") from exc
        except BaseException:
            self.db.close()
            raise

    def _ensure_schema(self, create: bool) -> None:
        identity = policy.identify(self.db)
        if identity.application_id not in (0, policy.APPLICATION_ID):
            raise NotABase(
                f"{self.path} is another program's SQLite file (application_id "
                f"{identity.application_id:#x}), not a metis-lite base"
            )
        if identity.has_meta:
            row = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                raise NotABase(f"{self.path} is not a metis-lite base (no schema version)")
            version = int(row[0])
            if version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.path} has schema version {version}; this metis-lite reads up to "
                    f"{SCHEMA_VERSION}: upgrade metis-lite to open it"
                )
            self._upgrade_due = identity.application_id == 0 or self._notes_unsettled()
            missing = self._missing_objects()
            if missing:
                self._upgrade_due = True
                self._bring_up_to_date_now(missing)
            return
        if identity.objects or not create:
            raise NotABase(f"{self.path} is an SQLite file but not a metis-lite base")
        with self.writing():
            self.db.execute(schema_sql())
            self.db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?), ('created_at', ?),"
                " ('notes_source', ?), ('chunk_rules', ?)",
                (
                    str(SCHEMA_VERSION),
                    now_iso(),
                    notes_name(self.path),
                    str(chunking.RULES_VERSION),
                ),
            )
            self.db.execute(f"PRAGMA application_id = {policy.APPLICATION_ID}")

    def _bring_up_to_date_now(self, missing: set[str]) -> None:
        """Make the tables an older base lacks, in one transaction (writing() does it); where
        the base cannot be written, empty stand-ins of this connection only (TEMP tables), so
        it is searched as it is and nothing in the file changes."""
        if not self.db.readonly("main"):
            try:
                with self.writing():
                    return
            except BaseReadOnly:
                pass
        for kind, name, sql in ((m[1], m[2], m[0]) for m in _TABLE.finditer(schema_sql())):
            if name in missing:
                self.db.execute(sql.replace(f"{kind} IF NOT EXISTS {name}", f"{kind} temp.{name}"))

    def _upgrade(self) -> None:
        """Inside the first write transaction of an older base: the tables added since it was
        made, its application id, one notes source, and, for an older base that now has every
        table, SCHEMA_VERSION (a version 1 words index is rebuilt by `index` all the same:
        words_version reads the index's own declaration)."""
        self.db.execute(schema_sql())
        self.db.execute(f"PRAGMA application_id = {policy.APPLICATION_ID}")
        self._settle_notes_source()
        self.db.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version' AND CAST(value AS INTEGER) < ?",
            (str(SCHEMA_VERSION), SCHEMA_VERSION),
        )

    # -- the notes source -------------------------------------------------------------------

    def notes_source(self) -> str:
        """The name of the base's notes source, as recorded when the base was made (a base
        made before it was recorded: its oldest notes source, or metis-<file name>)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'notes_source'").fetchone()
        if row is not None:
            return str(row[0])
        oldest = self.db.execute(
            "SELECT name FROM sources WHERE path IS NULL ORDER BY id LIMIT 1"
        ).fetchone()
        return str(oldest[0]) if oldest else notes_name(self.path)

    def _notes_unsettled(self) -> bool:
        row = one(
            self.db.execute(
                "SELECT (SELECT count(*) FROM meta WHERE key = 'notes_source'),"
                " (SELECT count(*) FROM sources WHERE path IS NULL)"
            )
        )
        return not row[0] or row[1] > 1

    def _settle_notes_source(self) -> None:
        """Record the notes source's name, and join every other notes source into it (older
        versions named one after each name the base was opened under): their facts move with
        their chunks, words and vectors; nothing is removed but the emptied sources."""
        name = self.notes_source()
        self.db.execute(
            "INSERT INTO meta (key, value) VALUES ('notes_source', ?) ON CONFLICT (key) DO NOTHING",
            (name,),
        )
        notes = self.db.execute(
            "SELECT id, name FROM sources WHERE path IS NULL ORDER BY name != ?, id", (name,)
        ).fetchall()
        if not notes:
            return
        keep, kept_name = notes[0]
        if kept_name != name:
            self.db.execute("UPDATE sources SET name = ? WHERE id = ?", (name, keep))
        for other, _ in notes[1:]:
            self.db.execute(
                "UPDATE OR IGNORE documents SET source_id = ? WHERE source_id = ?", (keep, other)
            )
            left = one(
                self.db.execute("SELECT count(*) FROM documents WHERE source_id = ?", (other,))
            )[0]
            if not left:  # a path both held stays where it was, rather than be lost
                self.db.execute("DELETE FROM sources WHERE id = ?", (other,))

    def _missing_objects(self) -> set[str]:
        wanted = set(_SCHEMA_OBJECT.findall(schema_sql()))
        present = {row[0] for row in self.db.execute("SELECT name FROM sqlite_schema")}
        return wanted - present

    def ensure_schema_objects(self) -> None:
        """Make the tables added since the base was made (every statement is IF NOT EXISTS)."""
        if self._missing_objects():
            self._upgrade_due = True
            with self._transaction():
                pass

    # -- chunking rules ---------------------------------------------------------------------

    @property
    def chunk_rules(self) -> int:
        """The chunking rules the base's chunks were cut by (chunking.RULES_VERSION when they
        were; 1 for a base that never recorded them)."""
        row = self.db.execute("SELECT value FROM meta WHERE key = 'chunk_rules'").fetchone()
        return int(row[0]) if row else 1

    @property
    def chunks_outdated(self) -> bool:
        """True when documents of the base's folders were cut by older chunking rules than this
        metis-lite's, of a kind the newer rules cut otherwise: `index` cuts them again (facts
        are one chunk each, cut by no rule)."""
        if self.chunk_rules >= chunking.RULES_VERSION:
            return False
        kinds = chunking.kinds_cut_otherwise(self.chunk_rules)
        row = self.db.execute(
            "SELECT EXISTS (SELECT 1 FROM documents d JOIN sources s ON s.id = d.source_id"
            " WHERE s.path IS NOT NULL"
            + ("" if kinds is None else " AND d.kind IN (SELECT value FROM json_each(?))")
            + ")",
            () if kinds is None else (json.dumps(sorted(kinds)),),
        ).fetchone()
        return bool(row and row[0])

    def set_chunk_rules(self, version: int) -> None:
        """Record that every document of the base's folders is cut by the rules `version`."""
        with self._transaction():
            self.db.execute(
                "INSERT INTO meta (key, value) VALUES ('chunk_rules', ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )

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
