"""The base file: plain tables, refusals, one document per transaction, the indexer lock."""

from __future__ import annotations

import sqlite3

import pytest

from metis_lite.errors import BaseBusy, NotABase, SchemaTooNew, StoreError
from metis_lite.records import Chunk
from metis_lite.store import SCHEMA_VERSION, IndexerLock, Store


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


def test_search_counts_hold_no_question(tmp_path):
    store = make(tmp_path)
    store.count_searches(2)
    store.count_searches(1)
    assert list(store.search_counts().values()) == [3]
