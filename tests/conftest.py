"""Shared fixtures: the shipped example folder, bases that search by words only (fast), and a
built example base with the embedded model (built once per session, copied per test)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from metis_lite.base.core import Base

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "handbook"
FIXTURES = Path(__file__).resolve().parent / "fixtures"

if "METIS_LITE_CACHE" not in os.environ:
    os.environ["METIS_LITE_CACHE"] = tempfile.mkdtemp(prefix="metis-lite-cache-")
    atexit.register(shutil.rmtree, os.environ["METIS_LITE_CACHE"], True)
"""The embedded model's cache (metis_lite/models/weights_cache.py) of this test session, never
the user's own, for every test and every process they start (they inherit it); ~160 MB,
removed when the session ends."""

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that never answers (nothing listens on port 9): indexing is fast and
every search goes by words, with its warning (NO_VECTORS)."""


def words_only_base(path: Path, *folders: Path) -> Base:
    base = Base(path, create=True)
    base.configure(embedding=DEAD_EMBEDDING)
    for folder in folders:
        base.add_source(folder)
    return base


def add_passages(store, texts, *, source_id: int = 1) -> None:
    """One document of one chunk (no title, no headings) per text, straight into a Store: chunk
    ids are 1, 2, … in order on an empty base."""
    from metis_lite.records import Chunk

    for n, text in enumerate(texts):
        store.replace_document(
            source_id=source_id,
            path=f"p{n}.txt",
            kind="txt",
            title="",
            content_hash=str(n),
            size=1,
            mtime=None,
            chunks=[Chunk(text=text, title="", headings=())],
        )


@pytest.fixture(scope="session")
def example_base_file(tmp_path_factory) -> Path:
    """examples/handbook indexed with the embedded model, once per test session."""
    path = tmp_path_factory.mktemp("example") / "handbook.db"
    with Base(path, create=True) as base:
        base.add_source(EXAMPLES)
        report = base.index()
        assert report.without_vector == 0, report.warnings
    return path


@pytest.fixture
def example_base(example_base_file, tmp_path) -> Base:
    """A private copy of the example base (tests may write to it)."""
    copy = tmp_path / "handbook.db"
    shutil.copy(example_base_file, copy)
    base = Base(copy)
    yield base
    base.close()
