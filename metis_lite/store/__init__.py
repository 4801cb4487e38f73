"""The base file: its schema, and every write; one Store owns one connection.

A base is one SQLite file in WAL mode (searches are answered while another connection
indexes); each connection follows connection.py's policy. The DDL lives in schema.sql; the
queries are beside the functions that run them. Every write is a transaction that takes the
write lock before it reads (Store.writing), so writers in several processes take turns.

The Store is one class made of a part per concern, each a module of this package:

    core.py       the connection, write transactions (writing), now_iso
    schema.py     opening a file as a base, schema version and upgrade, the words index
    documents.py  sources, documents with their chunks and words
    document_copies.py  copies of documents, vectors shared by chunks of the same text
    reading.py    chunk rows, filters, counts, word frequencies (what searches read)
    vectors.py    vectors and what changed since a reader looked
    facts.py      facts and saved evaluations
    runs.py       the base's spec, indexing runs, search counts
    publication.py  the mark of a published copy (publish.py) and its rollback journal
    pool.py       a bounded pool of Stores, lent to one borrower at a time (Base uses it)

Its face: the package itself (Store), connection, spec, files, document_file, pool and
publication.
"""

from __future__ import annotations

import os

from metis_lite.store.connection import IndexerLock, connect
from metis_lite.store.core import BUSY_RETRY_S, StoreCore, now_iso
from metis_lite.store.document_copies import CopiesMixin
from metis_lite.store.documents import At, DocumentsMixin, StoredDocument
from metis_lite.store.facts import FactsMixin
from metis_lite.store.publication import Publication, PublicationMixin
from metis_lite.store.reading import ChunkRow, ReadingMixin, filter_clause
from metis_lite.store.runs import RunsMixin
from metis_lite.store.schema import SCHEMA_VERSION, SchemaMixin, schema_sql
from metis_lite.store.vectors import VectorsMixin, vector_blob

__all__ = [
    "BUSY_RETRY_S",
    "At",
    "SCHEMA_VERSION",
    "ChunkRow",
    "IndexerLock",
    "Publication",
    "Store",
    "StoreCore",
    "StoredDocument",
    "connect",
    "filter_clause",
    "now_iso",
    "schema_sql",
    "vector_blob",
]


class Store(
    FactsMixin,
    CopiesMixin,
    DocumentsMixin,
    ReadingMixin,
    VectorsMixin,
    RunsMixin,
    PublicationMixin,
    SchemaMixin,
):
    """One connection to one base file, and the operations on it."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        readonly: bool = False,
        immutable: bool = False,
    ) -> None:
        """Open the base at `path` (BASE_NOT_FOUND unless `create`); `readonly` opens it so
        that nothing, not even an older base's upgrade, is written (a copy's source);
        `immutable` too, as a file nothing writes (a published copy: connection.connect)."""
        readonly = readonly or immutable
        self._open(path, create=create and not readonly, readonly=readonly, immutable=immutable)

    def __enter__(self) -> Store:
        return self
