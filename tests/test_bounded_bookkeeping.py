"""What a base and a service keep besides the answers stays bounded: the removals log of the
vectors (pruned, and every reader still right: one that kept up, one that fell behind the
pruning, a new one; a published copy holds none), a search count that cannot be written (the
answer is kept, and the count), and the connections of many bases (200 served under a limit of
1,024 descriptors)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import apsw
import httpx
import numpy as np
from conftest import ROOT, add_passages, words_only_base

from metis_lite.base import models
from metis_lite.base.core import Base
from metis_lite.copies.publish import publish
from metis_lite.records import Chunk
from metis_lite.retrieval.dense import VectorIndex
from metis_lite.store import Store
from metis_lite.store.runs import RunsMixin
from metis_lite.store.vectors import REMOVALS_KEPT

DIM = 8
EDITS = 1_000
CHUNKS = 4
"""Each edit replaces a document of CHUNKS chunks, each with its vector: EDITS × CHUNKS
vectors removed, far past what the log keeps."""


def vectors(rng: np.random.Generator, n: int) -> np.ndarray:
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def edit(store: Store, path: str, version: int, rng: np.random.Generator) -> None:
    """Write a new version of the document at `path` and embed its chunks, as a run does."""
    store.replace_document(
        source_id=1,
        path=path,
        kind="md",
        title=path,
        content_hash=f"{path}-{version}",
        size=1,
        mtime=None,
        chunks=[
            Chunk(text=f"{path} v{version} part {k}", title=path, headings=())
            for k in range(CHUNKS)
        ],
    )
    ids = [
        r[0]
        for r in store.db.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = ?",
            (path,),
        )
    ]
    store.put_vectors("m", zip(ids, vectors(rng, len(ids)), strict=True))


def held(store: Store) -> set[int]:
    return {r[0] for r in store.db.execute("SELECT chunk_id FROM vectors WHERE model = 'm'")}


def found(index: VectorIndex, store: Store) -> set[int]:
    """What the reader finds by meaning, everything it holds: after a sync, the base's vectors."""
    index.sync(store)
    query = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)
    return {hit.chunk_id for hit in index.search(query, 10_000)}


def test_a_thousand_edits_leave_the_removals_log_bounded_and_every_reader_right(tmp_path):
    rng = np.random.default_rng(3)
    with Store(tmp_path / "b.db", create=True) as store:
        store.add_source("docs", str(tmp_path))
        edit(store, "gone.md", 0, rng)  # removed while a reader is behind
        edit(store, "kept.md", 0, rng)  # never edited: its vectors must stay found
        behind, keeping_up = VectorIndex("m"), VectorIndex("m")
        assert found(behind, store) == held(store)
        for version in range(1, EDITS + 1):
            edit(store, "edited.md", version, rng)
            if version % 50 == 0:
                assert found(keeping_up, store) == held(store)
            if version == EDITS // 2:
                (gone,) = store.db.execute("SELECT id FROM documents WHERE path = 'gone.md'")
                store.remove_document(gone[0])
        assert store.last_removal_seq() >= EDITS * CHUNKS  # every edit removed its vectors
        rows = store.removal_rows()
        assert 0 < rows <= 2 * REMOVALS_KEPT + CHUNKS, rows
        live = held(store)
        assert len(live) == 2 * CHUNKS  # kept.md and the last version of edited.md
        assert found(keeping_up, store) == live
        assert found(behind, store) == live  # its removals were pruned: told what is gone
        assert found(VectorIndex("m"), store) == live  # a new reader
        with Store(tmp_path / "b.db") as other:  # another connection, as another process
            assert found(VectorIndex("m"), other) == live


def test_a_published_copy_holds_no_removals_log_and_its_readers_find_every_vector(tmp_path):
    rng = np.random.default_rng(4)
    with Store(tmp_path / "b.db", create=True) as store:
        store.add_source("docs", str(tmp_path))
        for version in range(50):
            edit(store, "edited.md", version, rng)
        assert store.removal_rows() > 0
        live = held(store)
    publish(tmp_path / "b.db", tmp_path / "pub.db")
    with Store(tmp_path / "pub.db", immutable=True) as copy:
        assert copy.removal_rows() == 0 and copy.removals_pruned() == 0
        assert found(VectorIndex("m"), copy) == live


def test_a_search_count_that_cannot_be_written_keeps_the_answer_and_the_count(
    tmp_path, monkeypatch
):
    (tmp_path / "src").mkdir()
    with words_only_base(tmp_path / "b.db", tmp_path / "src") as base:
        add_passages(base.store, ["alpha words here", "beta words there"])
    monkeypatch.setattr(models, "COUNT_FLUSH_S", 0.0)  # every search writes its count

    def failing(self, searches):
        raise apsw.IOError("disk I/O error")

    with Base(tmp_path / "b.db") as base:
        with monkeypatch.context() as broken:
            broken.setattr(RunsMixin, "count_searches", failing)
            answer = base.search("alpha", mode="keyword")
            assert [r.citation.document for r in answer.results] == ["p0.txt"]
            assert base._counts.pending == 1  # kept for the next flush
        base.search("beta", mode="keyword")  # the disk is back: both are written
        assert base._counts.pending == 0
        assert sum(base.store.search_counts().values()) == 2


# -- many bases, few descriptors --------------------------------------------------------------

BASES = 200
DESCRIPTORS = 1024


def limited(limit: int):
    def apply() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))

    return apply


def serve_limited(folder: Path, paths: list[Path], *options: str) -> tuple[subprocess.Popen, str]:
    with (folder / "service.out").open("wb") as out, (folder / "service.err").open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "serve", *map(str, paths), "--port", "0"]
            + ["--no-access-log", *options],
            stdout=out,
            stderr=err,
            cwd=ROOT,
            preexec_fn=limited(DESCRIPTORS),
        )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        first, newline, _ = (folder / "service.out").read_text().partition("\n")
        if newline:
            return process, first.removeprefix("serving ")
        assert process.poll() is None, (folder / "service.err").read_text()[-2000:]
        time.sleep(0.1)
    process.kill()
    raise AssertionError("the service did not start")


def answers_every_base(url: str, names: list[str], pid: int) -> int:
    """/v1/bases lists every base and a search of each (four at a time) finds its passage; the
    most descriptors the service held meanwhile."""
    with httpx.Client(timeout=60) as client:
        listed = client.get(f"{url}/v1/bases")
        assert listed.status_code == 200, listed.text
        assert sorted(b["name"] for b in listed.json()["bases"]) == sorted(names)

        def search(name: str) -> int:
            answer = client.post(
                f"{url}/v1/bases/{name}/search", json={"question": "alpha", "mode": "keyword"}
            )
            assert answer.status_code == 200, (name, answer.text)
            assert answer.json()["results"], name
            return len(os.listdir(f"/proc/{pid}/fd"))

        with ThreadPoolExecutor(4) as clients:
            return max(clients.map(search, names))


def test_two_hundred_bases_are_served_under_a_limit_of_1024_descriptors(tmp_path):
    (tmp_path / "src").mkdir()
    one = tmp_path / "one.db"
    with words_only_base(one, tmp_path / "src") as base:
        add_passages(base.store, ["alpha words here"])
    publish(one, tmp_path / "published.db")
    for kind, original, options in (
        ("live", one, ("--poll", "0")),
        ("pub", tmp_path / "published.db", ("--read-only",)),
    ):
        folder = tmp_path / kind
        folder.mkdir()
        paths = [folder / f"{kind}{n}.db" for n in range(BASES)]
        for path in paths:
            shutil.copy(original, path)  # a published copy stays one: mark and mode
        process, url = serve_limited(folder, paths, *options)
        try:
            most = answers_every_base(url, [p.stem for p in paths], process.pid)
        finally:
            process.terminate()
            process.wait(30)
        errors = (folder / "service.err").read_text()
        assert "Too many open files" not in errors and "Traceback" not in errors, errors[-2000:]
        assert most < DESCRIPTORS, (kind, most)
