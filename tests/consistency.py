"""What a base must hold after anything happened to it (a kill, a full disk, a copy): shared by
test_crash, test_disk and test_copy.

    check_consistent(base_file, expected)   the file is whole, its FTS index holds exactly the
                                            words of its chunks, vectors are one per chunk at
                                            most and of the base's model, no document is
                                            half-indexed (its chunks are those of a fresh parse)
    expected_chunks(folder, chunk_size)     (path, sha256) → chunk texts of each file's version
    content(base_file)                      documents, chunk texts and vectors, to compare runs
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import numpy as np

from metis_lite import parsing
from metis_lite.errors import ParseError
from metis_lite.models import registry
from metis_lite.store import Store
from metis_lite.text.chunking import chunk
from metis_lite.text.tokenizer import fts_query, tokens

Expected = dict[tuple[str, str], list[str]]

SAME_VECTOR = 0.999
"""Cosine above which a re-made vector is the same one (batches differ after a crash)."""


def expected_chunks(folder: Path, chunk_size: int) -> Expected:
    """(path, sha256) → the chunk texts a fresh parse and chunking of that file gives."""
    out: Expected = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and parsing.kind_of(path):
            data = path.read_bytes()
            try:
                document = parsing.parse(path, data=data)
            except ParseError:
                continue
            texts = [c.text for c in chunk(document, chunk_size=chunk_size)]
            out[(path.relative_to(folder).as_posix(), hashlib.sha256(data).hexdigest())] = texts
    return out


def content(base_file: Path) -> dict:
    """What a base holds: documents with their hashes, chunk texts in order, and vectors."""
    with Store(base_file) as store:
        documents = dict(store.db.execute("SELECT path, content_hash FROM documents"))
        texts: dict[str, list[str]] = {}
        for path, text in store.db.execute(
            "SELECT d.path, c.text FROM chunks c JOIN documents d ON d.id = c.document_id"
            " ORDER BY d.path, c.ordinal"
        ):
            texts.setdefault(path, []).append(text)
        vectors = {
            (path, ordinal): np.frombuffer(blob, dtype="<f4")
            for path, ordinal, blob in store.db.execute(
                "SELECT d.path, c.ordinal, v.embedding FROM vectors v"
                " JOIN chunks c ON c.id = v.chunk_id JOIN documents d ON d.id = c.document_id"
            )
        }
    return {"documents": documents, "texts": texts, "vectors": vectors}


def assert_same_content(got: dict, want: dict) -> None:
    assert got["documents"] == want["documents"]
    assert got["texts"] == want["texts"]
    assert set(got["vectors"]) == set(want["vectors"])
    for key, vector in want["vectors"].items():
        assert float(got["vectors"][key] @ vector) > SAME_VECTOR, key


def check_consistent(base_file: Path, expected: Expected) -> None:
    """The base file is whole, its FTS index matches its chunks word for word, each chunk has
    at most one vector and only of the base's model, and no document is half-indexed."""
    with Store(base_file) as store:
        db = store.db
        assert [r[0] for r in db.execute("PRAGMA integrity_check")] == ["ok"]
        db.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert not list(db.execute("PRAGMA foreign_key_check"))

        chunks = list(
            db.execute("SELECT id, text, title, headings, document_id, ordinal FROM chunks")
        )
        # Every chunk has its FTS row (found by a word of its own, at its rowid) ...
        for chunk_id, text, title, _, _, _ in chunks:
            words = tokens(text) or tokens(title)
            if not words:  # punctuation alone (":" under a heading of marks): nothing to find
                continue  # it by; the check below still holds its (empty) rows to its words
            found = db.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ? AND rowid = ?",
                (fts_query(words[0]), chunk_id),
            ).fetchone()[0]
            assert found == 1, f"chunk {chunk_id} has no FTS row"
        # ... holding exactly its words, and the index holds no row of a chunk that is gone.
        db.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS temp.words"
            " USING fts5vocab(main, chunks_fts, instance)"
        )
        indexed: dict[tuple[int, str], Counter] = {}
        for term, doc, column in db.execute("SELECT term, doc, col FROM temp.words"):
            indexed.setdefault((doc, column), Counter())[term] += 1
        assert {doc for doc, _ in indexed} <= {c[0] for c in chunks}, "FTS rows of gone chunks"
        for chunk_id, text, title, headings, _, _ in chunks:
            context = " ".join((title, *json.loads(headings)))
            assert indexed.get((chunk_id, "text"), Counter()) == Counter(tokens(text))
            assert indexed.get((chunk_id, "context"), Counter()) == Counter(tokens(context))

        spec = store.spec()
        assert not list(
            db.execute("SELECT chunk_id FROM vectors GROUP BY chunk_id HAVING count(*) > 1")
        )
        models = {r[0] for r in db.execute("SELECT DISTINCT model FROM vectors")}
        assert models <= {registry.model_label(spec["embedding"])}
        widths = set()
        for (blob,) in db.execute("SELECT embedding FROM vectors"):
            vector = np.frombuffer(blob, dtype="<f4")
            widths.add(vector.shape[0])
            assert np.all(np.isfinite(vector))
            assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3
        assert len(widths) <= 1 and widths <= {spec.get("dimension") or next(iter(widths), 0)}

        # No document is half-indexed: its chunks are those of a fresh parse of its version.
        by_document: dict[int, list[tuple[int, str]]] = {}
        for _, text, _, _, document_id, ordinal in chunks:
            by_document.setdefault(document_id, []).append((ordinal, text))
        for document_id, path, digest in db.execute("SELECT id, path, content_hash FROM documents"):
            stored = [text for _, text in sorted(by_document.get(document_id, []))]
            assert stored == expected[(path, digest)], f"{path} is half-indexed"
        assert set(by_document) <= {r[0] for r in db.execute("SELECT id FROM documents")}
