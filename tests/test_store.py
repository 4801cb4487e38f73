"""The base file: plain tables, refusals, one document per transaction, the indexer lock."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from contextlib import closing

import apsw
import numpy as np
import pytest
from conftest import ROOT, words_only_base

from metis_lite.base.core import Base
from metis_lite.errors import BaseBusy, NotABase, SchemaTooNew, StoreError
from metis_lite.records import Chunk
from metis_lite.retrieval import keyword
from metis_lite.store import SCHEMA_VERSION, IndexerLock, Store, connection
from metis_lite.text import tokenizer


def make(tmp_path):
    store = Store(tmp_path / "b.db", create=True)
    store.add_source("docs", str(tmp_path))
    return store


def chunks(n):
    return [
        Chunk(text=f"passage {i} about Configuração", title="T", headings=("H",), line=i + 1)
        for i in range(n)
    ]


def test_plain_tables_read_in_stock_sqlite(tmp_path):
    store = make(tmp_path)
    store.replace_document(
        source_id=1,
        path="a.md",
        kind="md",
        title="T",
        content_hash="h",
        size=3,
        mtime=1.0,
        chunks=chunks(3),
    )
    store.close()
    with sqlite3.connect(tmp_path / "b.db") as plain:
        assert plain.execute("SELECT count(*) FROM chunks").fetchone()[0] == 3
        assert plain.execute("SELECT path, kind FROM documents").fetchall() == [("a.md", "md")]
        version = plain.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert int(version) == SCHEMA_VERSION
        with pytest.raises(
            sqlite3.OperationalError, match="tokenizer|contentless"
        ):  # older SQLite: option unknown
            plain.execute("SELECT * FROM chunks_fts WHERE chunks_fts MATCH 'x'").fetchall()


def test_replacing_a_document_replaces_its_chunks_and_words(tmp_path):
    store = make(tmp_path)
    for n in (3, 2):
        store.replace_document(
            source_id=1,
            path="a.md",
            kind="md",
            title="T",
            content_hash=str(n),
            size=1,
            mtime=None,
            chunks=chunks(n),
        )
    assert store.counts() == {"sources": 1, "documents": 1, "chunks": 2, "vectors": 0}
    store.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    fts_ids = {
        r[0]
        for r in store.db.execute("SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH 'passage'")
    }
    assert fts_ids == {r[0] for r in store.db.execute("SELECT id FROM chunks")}


def test_a_file_that_is_not_a_base_is_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"hello, not sqlite at all" * 10)
    with pytest.raises(NotABase):
        Store(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as plain:
        plain.execute("CREATE TABLE t (x)")
    with pytest.raises(NotABase):
        Store(other, create=True)
    with pytest.raises(NotABase):
        Store(tmp_path)  # a folder
    assert junk.read_bytes().startswith(b"hello")  # refused, untouched


def test_a_newer_schema_is_refused(tmp_path):
    make(tmp_path).close()
    with sqlite3.connect(tmp_path / "b.db") as plain:
        plain.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),)
        )
    with pytest.raises(SchemaTooNew, match="upgrade"):
        Store(tmp_path / "b.db")


def test_a_missing_base_is_not_created_unless_asked(tmp_path):
    with pytest.raises(StoreError, match="no base"):
        Store(tmp_path / "missing.db")
    assert not (tmp_path / "missing.db").exists()


def test_one_indexer_at_a_time(tmp_path):
    make(tmp_path).close()
    first = IndexerLock(tmp_path / "b.db")
    first.acquire()
    try:
        assert IndexerLock(tmp_path / "b.db").held_elsewhere()
        with pytest.raises(BaseBusy, match="being indexed"):
            IndexerLock(tmp_path / "b.db").acquire()
    finally:
        first.release()
    assert not IndexerLock(tmp_path / "b.db").held_elsewhere()


def test_another_process_looking_whether_a_base_is_indexed_never_makes_its_indexer_busy(
    tmp_path,
):
    """A status or a search in another process asks whether an indexer holds the lock
    (held_elsewhere: a shared lock for a moment); an indexer starting meanwhile must not take
    that moment for another indexer. Another process looks without pause while this one
    starts and ends 20,000 index runs' locks; a real indexer still makes the next one busy."""
    make(tmp_path).close()
    looker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from metis_lite.store import IndexerLock\n"
            "lock, end = IndexerLock(sys.argv[1]), time.monotonic() + 30\n"
            "print('looking', flush=True)\n"
            "while time.monotonic() < end:\n"
            "    lock.held_elsewhere()\n",
            str(tmp_path / "b.db"),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert looker.stdout is not None and looker.stdout.readline() == "looking\n"
        for _ in range(20_000):
            lock = IndexerLock(tmp_path / "b.db")
            lock.acquire()
            lock.release()
    finally:
        looker.kill()
        looker.communicate()
    first = IndexerLock(tmp_path / "b.db")
    first.acquire()
    try:
        with pytest.raises(BaseBusy, match="being indexed"):
            IndexerLock(tmp_path / "b.db").acquire()
    finally:
        first.release()


def test_search_counts_hold_no_question(tmp_path):
    store = make(tmp_path)
    store.count_searches(2)
    store.count_searches(1)
    assert list(store.search_counts().values()) == [3]


# The words index of a base made before word rules version 2: read by its own rules
# until `index` rebuilds it, in one transaction, without embedding anything again.

VERSION_1_WORDS = """CREATE VIRTUAL TABLE chunks_fts USING fts5(
  text, context, content='', contentless_delete=1, tokenize='metis'
)"""
"""chunks_fts as schema.sql declared it in schema version 1."""


def version_1_base(tmp_path):
    """A words-only base of three documents, then made as metis-lite made it before version 2:
    its words index declared and filled by version 1's rules, schema version 1; and a vector
    for each chunk, which a rebuild must leave as it is."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "tokyo.md").write_text("# 天気\n\n東京都の天気は晴れです。", encoding="utf-8")
    (folder / "proxy.md").write_text(
        "# Proxy\n\nConfiguração do proxy: porta 3128.", encoding="utf-8"
    )
    (folder / "hindi.md").write_text("# भाषा\n\nहिन्दी भाषा", encoding="utf-8")
    with words_only_base(tmp_path / "old.db", folder) as base:
        base.index()
        store = base.store
        ids = [r[0] for r in store.db.execute("SELECT id FROM chunks ORDER BY id")]
        store.put_vectors(base.model_label, [(i, np.full(4, i, dtype=np.float32)) for i in ids])
        with store.db:
            store.db.execute("DROP TABLE chunks_fts")
            store.db.execute(VERSION_1_WORDS)
            store.db.execute(
                "INSERT INTO chunks_fts (rowid, text, context) SELECT id, text, title FROM chunks"
            )
            store.db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    return tmp_path / "old.db"


def found(store, question):
    hits = keyword.search(store, question, 10)
    return sorted(row.document for row in store.chunk_rows([h.chunk_id for h in hits]).values())


def vectors(store):
    return store.db.execute("SELECT seq, chunk_id, model, embedding FROM vectors").fetchall()


def test_a_version_1_words_index_is_searched_by_its_own_rules_and_says_it_is_outdated(tmp_path):
    with Base(version_1_base(tmp_path)) as base:
        store = base.store
        assert (store.words_version, store.words_outdated) == (1, True)
        assert keyword.index_warnings(store) == [keyword.WORDS_INDEX_OUTDATED]
        assert found(store, "configuracao") == ["proxy.md"]
        assert found(store, "東京") == []  # one word for the whole run: 東京都の天気は晴れです
        assert found(store, "東京都の天気は晴れです") == ["tokyo.md"]
        assert found(store, "हिन्दी") == []  # cut at its vowel signs into single letters


def test_a_version_1_base_reads_the_question_by_its_own_rules_in_every_step(tmp_path):
    """The question's bound, its words and what each result holds are read by the base's word
    rules, as the words stage reads them: 70 distinct Han characters in one run are one word by
    version 1's rules (69 bigrams by today's, past the 64-word bound)."""
    run = "".join(chr(0x4E00 + 7 * n) for n in range(70))
    with Base(version_1_base(tmp_path)) as base:
        assert [w.code for w in base.search(run, mode="keyword").warnings] == [
            "WORDS_INDEX_OUTDATED"
        ]
        answer = base.search("東京都の天気は晴れです", mode="keyword")
        assert [r.citation.document for r in answer.results] == ["tokyo.md"]
        assert [w.word for w in answer.results[0].words] == tokenizer.tokens(
            "東京都の天気は晴れです", version=1
        )
    with words_only_base(tmp_path / "new.db") as base:  # today's rules cut the same question
        base.store.add_source("docs", str(tmp_path / "docs"))
        base.index()
        assert "QUESTION_CUT" in [w.code for w in base.search(run, mode="keyword").warnings]


def test_a_search_reads_its_questions_words_once(tmp_path, monkeypatch):
    """One reading of the question's words per search (its bound, the words stage, fusion's
    scale, citing): the tokenizer sees the question's text once, in every mode."""
    question = "Configuração do proxy porta"
    seen = []
    reals = {name: getattr(tokenizer, name) for name in ("tokens", "token_spans", "words_of")}
    for module in [m for n, m in sys.modules.items() if n.startswith("metis_lite")]:
        for name, real in reals.items():
            if getattr(module, name, None) is real:

                def counting(text, *args, _real=real, **kwargs):
                    if text == question:
                        seen.append(text)
                    return _real(text, *args, **kwargs)

                monkeypatch.setattr(module, name, counting)
    with Base(version_1_base(tmp_path)) as base:
        for mode in ("keyword", "hybrid"):
            seen.clear()
            answer = base.search(question, mode=mode)
            assert answer.results and len(seen) == 1, (mode, len(seen))


def test_index_rebuilds_an_outdated_words_index_and_embeds_nothing_again(tmp_path):
    path = version_1_base(tmp_path)
    with Base(path) as base:
        reader = base.store  # a connection opened before the rebuild sees it too
        before = vectors(reader)
        chunk_ids = reader.db.execute("SELECT id FROM chunks ORDER BY id").fetchall()
        removals = reader.last_removal_seq()
        base.index()
        assert (reader.words_version, reader.words_outdated) == (2, False)
        assert keyword.index_warnings(reader) == []
        assert found(reader, "東京") == ["tokyo.md"]
        assert found(reader, "東京の天気") == ["tokyo.md"]
        assert found(reader, "हिन्दी") == ["hindi.md"]
        assert found(reader, "configuracao") == ["proxy.md"]
        assert found(reader, "天気") == ["tokyo.md"]  # the heading, as context
        assert vectors(reader) == before
        assert reader.last_removal_seq() == removals
        assert reader.db.execute("SELECT id FROM chunks ORDER BY id").fetchall() == chunk_ids
        reader.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        version = reader.db.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == SCHEMA_VERSION
        sql = reader.db.execute("SELECT sql FROM sqlite_schema WHERE name = 'chunks_fts'")
        assert f"tokenize='{tokenizer.TOKENIZE}'" in sql.fetchone()[0]
        assert base.index().added == 0  # nothing more to rebuild or read


def test_a_rebuild_that_fails_midway_leaves_the_old_words_index_whole(tmp_path):
    path = version_1_base(tmp_path)
    with Store(path) as store:
        last = store.db.execute("SELECT max(id) FROM chunks").fetchone()[0]
        headings = store.db.execute("SELECT headings FROM chunks WHERE id = ?", (last,))
        headings = headings.fetchone()[0]
        with store.db:
            store.db.execute("UPDATE chunks SET headings = 'not json' WHERE id = ?", (last,))
        with pytest.raises(ValueError):  # raised by the last row, after the others were written
            store.rebuild_words()
        assert store.words_version == 1
        with store.db:
            store.db.execute("UPDATE chunks SET headings = ? WHERE id = ?", (headings, last))
        assert found(store, "東京都の天気は晴れです") == ["tokyo.md"]
        store.db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        version = store.db.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        assert version.fetchone()[0] == "1"


def test_a_write_takes_the_lock_first_and_is_whole_or_absent(tmp_path, monkeypatch):
    """writing(): BEGIN IMMEDIATE (the lock before any read), nested writes are savepoints of
    it, and an error anywhere inside leaves nothing of the whole."""
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 50)
    store = make(tmp_path)
    other = Store(tmp_path / "b.db")
    with store.writing():
        assert store.db.in_transaction
        with pytest.raises(BaseBusy):  # the lock is held from the first statement on
            other.set_spec({"x": 1})
    with pytest.raises(RuntimeError), store.writing():
        store.add_source("half", str(tmp_path.parent / "elsewhere"))
        store.replace_document(
            source_id=1,
            path="a.md",
            kind="md",
            title="T",
            content_hash="h",
            size=3,
            mtime=1.0,
            chunks=chunks(2),
        )
        raise RuntimeError("half way")
    assert store.counts()["documents"] == 0
    assert [name for _, name, _ in store.sources()] == ["docs"]
    assert not store.db.in_transaction
    other.set_spec({"x": 2})  # the lock was released
    assert store.spec()["x"] == 2
    other.close()
    store.close()


# -- a base is known by SQLite itself; an older one is brought up to date whole or not at all


def pragma(path, name):
    with closing(sqlite3.connect(path)) as plain:
        return plain.execute(f"PRAGMA {name}").fetchone()[0]


def test_a_new_base_carries_the_application_id_and_a_foreign_one_is_refused(tmp_path):
    make(tmp_path).close()
    assert pragma(tmp_path / "b.db", "application_id") == connection.APPLICATION_ID
    other = tmp_path / "other.db"
    with closing(sqlite3.connect(other)) as plain, plain:  # another program's, with a meta table
        plain.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        plain.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        plain.execute("PRAGMA application_id = 1234")
    before = other.read_bytes()
    with pytest.raises(NotABase, match="another program"):
        Store(other)
    assert other.read_bytes() == before
    assert pragma(other, "journal_mode") == "delete"  # never switched to WAL


def older_base(tmp_path, *, drop=("facts", "eval_runs", "eval_sets")):
    """A base as an older metis-lite left it: no application id, no notes source recorded,
    and without the tables added since."""
    path = tmp_path / "old.db"
    with words_only_base(path) as base:
        base.remember("A fact of the older base.")
    with closing(sqlite3.connect(path)) as plain, plain:
        plain.execute("PRAGMA application_id = 0")
        plain.execute("DELETE FROM meta WHERE key = 'notes_source'")
        for table in drop:
            plain.execute(f"DROP TABLE {table}")
    return path


def test_an_older_base_is_read_without_a_write_and_gets_its_id_with_the_next(tmp_path):
    path = older_base(tmp_path, drop=())
    with Store(path) as store:
        assert store.counts()["documents"] == 1
    assert pragma(path, "application_id") == 0  # reading writes nothing
    with Store(path) as store:
        store.count_searches(1)
    assert pragma(path, "application_id") == connection.APPLICATION_ID
    with closing(sqlite3.connect(path)) as plain:
        meta = dict(plain.execute("SELECT key, value FROM meta"))
    assert meta["notes_source"] == "metis-old"


def test_an_older_base_gets_its_new_tables_in_one_transaction_when_opened(tmp_path):
    path = older_base(tmp_path)
    with Base(path) as base:
        assert base.facts() == ([], 0)  # the table is there now, empty (the fact went with it)
        base.remember("A fact after the upgrade.")
        assert base.facts()[1] == 1
    with closing(sqlite3.connect(path)) as plain:
        tables = {r[0] for r in plain.execute("SELECT name FROM sqlite_schema")}
    assert {"facts", "facts_by_key", "eval_sets", "eval_runs"} <= tables


def test_an_older_base_that_cannot_be_written_is_searched_as_it_is(tmp_path, monkeypatch):
    path = older_base(tmp_path)
    before = path.read_bytes()
    real = connection.connect
    monkeypatch.setattr(
        connection, "connect", lambda p, **kw: real(p, **{**kw, "readonly": True, "create": False})
    )
    with Base(path) as base:
        assert base.facts() == ([], 0)  # the table it lacks reads as empty
        assert [r.citation.kind for r in base.search("fact", mode="keyword").results] == ["note"]
        assert base.status().documents == 1
        with pytest.raises(StoreError) as refused:
            base.remember("Cannot be written.")
        assert refused.value.code == "BASE_READ_ONLY"
    assert path.read_bytes() == before  # never half-upgraded: not written at all


def test_an_older_base_whose_upgrade_waits_on_a_writer_is_busy_and_untouched(tmp_path, monkeypatch):
    path = older_base(tmp_path)
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 200)
    writer = apsw.Connection(str(path))  # SQLite's locks hold between connections of one
    try:  # library: Python's sqlite3 in this process would not hold them against apsw
        writer.execute("BEGIN IMMEDIATE; CREATE TABLE mine (x)")
        with pytest.raises(BaseBusy, match="nothing was written"):
            Store(path)
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    with closing(sqlite3.connect(path)) as plain:
        tables = {r[0] for r in plain.execute("SELECT name FROM sqlite_schema")}
    assert not tables & {"facts", "eval_sets", "eval_runs", "mine"}


def test_a_lock_file_removed_while_the_service_looks_is_no_error(tmp_path):
    make(tmp_path).close()
    lock = IndexerLock(tmp_path / "b.db")
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            lock.path.touch()
            lock.path.unlink(missing_ok=True)

    remover = threading.Thread(target=churn)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: the race shows
    remover.start()
    try:
        looks = [IndexerLock(tmp_path / "b.db").held_elsewhere() for _ in range(5_000)]
    finally:
        stop.set()
        remover.join()
        sys.setswitchinterval(switch)
    assert not any(looks)


def test_an_io_error_under_a_failed_rollback_is_said_as_an_io_error(tmp_path, monkeypatch):
    """apsw raises a failed rollback's SQLError while it handles the I/O error that caused it:
    the error a person (or an HTTP client) gets is the I/O error with its likely cause, found
    anywhere in the chain, never the SQLError and its traceback."""

    def fails_under_an_io_error(self, *args, **kwargs):
        try:
            raise apsw.IOError("disk I/O error")
        except apsw.IOError as exc:
            raise apsw.SQLError("cannot rollback - no transaction is active") from exc

    base_file = tmp_path / "b.db"
    with Base(base_file, create=True) as base:
        base.remember("A fact.")
        monkeypatch.setattr(Store, "counts", fails_under_an_io_error)
        with pytest.raises(StoreError) as raised:
            base.status()
        monkeypatch.undo()
        assert raised.value.code == "STORE_ERROR"
        assert "disk I/O error" in raised.value.message
        assert "-wal or -shm deleted" in raised.value.message
        assert base.facts()[1] == 1  # an I/O error is not damage: the base answers after
    try:
        try:
            raise apsw.IOError("disk I/O error")
        except apsw.IOError:
            raise apsw.SQLError("cannot rollback") from None  # the I/O error is its context
    except apsw.SQLError as exc:
        found = connection.read_failure(exc, base_file)
    assert found is not None and "disk I/O error" in found.message
    assert connection.read_failure(apsw.SQLError("no such table: x"), base_file) is None
