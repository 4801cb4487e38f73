"""The in-memory matrix: exact top-n against a brute-force loop, and kept in step with writes."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

from metis_lite.records import Chunk, Filters
from metis_lite.retrieval.dense import VectorIndex, top_n
from metis_lite.store import Store

DIM = 16


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "b.db", create=True) as s:
        s.add_source("docs", str(tmp_path))
        yield s


def unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def add_document(store, path, n, kind="md"):
    chunks = [Chunk(text=f"{path} chunk {i}", title=path, headings=()) for i in range(n)]
    store.replace_document(
        source_id=1,
        path=path,
        kind=kind,
        title=path,
        content_hash=path,
        size=1,
        mtime=None,
        chunks=chunks,
    )
    return [
        r[0]
        for r in store.db.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.path = ? "
            "ORDER BY c.id",
            (path,),
        )
    ]


def brute_force(vectors: dict[int, np.ndarray], query, n):
    scored = sorted(
        ((float(v @ query), c) for c, v in vectors.items()), key=lambda x: (-x[0], x[1])
    )
    return [c for _, c in scored[:n]]


def test_exact_top_n_matches_brute_force(store):
    rng = np.random.default_rng(1)
    ids = add_document(store, "a.md", 300)
    vecs = unit(rng, 300)
    store.put_vectors("m", zip(ids, vecs, strict=True))
    index = VectorIndex("m")
    index.sync(store)
    query = unit(rng, 1)[0]
    hits = index.search(query, 50)
    assert [h.chunk_id for h in hits] == brute_force(dict(zip(ids, vecs, strict=True)), query, 50)
    assert [h.rank for h in hits] == list(range(1, 51))
    assert hits[0].score == pytest.approx(
        float(vecs[ids.index(hits[0].chunk_id)] @ query), abs=1e-6
    )


def test_a_question_read_deeper_is_read_from_its_kept_cosines_until_the_rows_change(store):
    """Fusion reads a question's list deeper (fusion.deepened): each deeper read, and the
    cosines of the chunks listed, are what a fresh pass gives; a change of the rows (a vector
    added, a chunk removed) is never answered from what was kept for the rows before."""
    rng = np.random.default_rng(11)
    ids = add_document(store, "a.md", 400)
    vecs = unit(rng, 400)
    store.put_vectors("m", zip(ids, vecs, strict=True))
    index = VectorIndex("m")
    index.sync(store)
    query = unit(rng, 1)[0]
    vectors = dict(zip(ids, vecs, strict=True))
    for n in (10, 50, 40, 200, 399, 400):
        assert [h.chunk_id for h in index.search(query, n)] == brute_force(vectors, query, n)
    cosines = index.cosines(query, ids[:30])
    assert index.cosines(query, ids[:60]) == {**cosines, **index.cosines(query, ids[30:60])}
    assert cosines[ids[0]] == pytest.approx(float(vecs[0] @ query), abs=1e-6)
    closest = add_document(store, "b.md", 1)[0]  # a chunk nearer the question than any
    store.put_vectors("m", [(closest, query)])
    store.remove_document(store.documents_of(1)["a.md"].id)
    index.sync(store)
    assert [h.chunk_id for h in index.search(query, 50)] == [closest]
    assert index.cosines(query, [*ids[:30], closest]) == {closest: pytest.approx(1.0)}


def test_kept_in_step_with_another_connection(store, tmp_path):
    rng = np.random.default_rng(2)
    index = VectorIndex("m")
    a = add_document(store, "a.md", 20)
    store.put_vectors("m", zip(a, unit(rng, 20), strict=True))
    index.sync(store)
    assert index.count == 20
    with Store(tmp_path / "b.db") as writer:  # another connection writes
        b = add_document(writer, "b.md", 10)
        bv = unit(rng, 10)
        writer.put_vectors("m", zip(b, bv, strict=True))
        writer.remove_document(writer.documents_of(1)["a.md"].id)
    index.sync(store)
    assert index.count == 10
    hits = index.search(bv[3], 5)
    assert hits[0].chunk_id == b[3]
    assert {h.chunk_id for h in index.search(bv[0], 100)} == set(b)


def test_reembedding_replaces_the_row(store):
    rng = np.random.default_rng(3)
    ids = add_document(store, "a.md", 5)
    index = VectorIndex("m")
    store.put_vectors("m", zip(ids, unit(rng, 5), strict=True))
    index.sync(store)
    new = unit(rng, 1)[0]
    store.put_vectors("m", [(ids[2], new)])
    index.sync(store)
    assert index.count == 5
    assert index.search(new, 1)[0].chunk_id == ids[2]
    assert len(index.search(new, 100)) == 5


def test_vectors_of_another_model_are_never_compared(store):
    rng = np.random.default_rng(4)
    ids = add_document(store, "a.md", 4)
    store.put_vectors("other", zip(ids, unit(rng, 4), strict=True))
    index = VectorIndex("m")
    index.sync(store)
    assert index.count == 0 and index.search(unit(rng, 1)[0], 10) == []


def test_filters_apply_before_ranking(store):
    rng = np.random.default_rng(5)
    a = add_document(store, "policies/a.md", 100)
    b = add_document(store, "other/b.txt", 100, kind="txt")
    store.put_vectors("m", zip(a + b, unit(rng, 200), strict=True))
    index = VectorIndex("m")
    index.sync(store)
    allowed = store.filtered_chunk_ids(Filters(path_prefix="other/"))
    hits = index.search(unit(rng, 1)[0], 50, allowed=allowed)
    assert len(hits) == 50 and {h.chunk_id for h in hits} <= set(b)
    allowed = store.filtered_chunk_ids(Filters(kinds=("md",)))
    assert {h.chunk_id for h in index.search(unit(rng, 1)[0], 500, allowed=allowed)} == set(a)


def test_compaction_keeps_results(store):
    rng = np.random.default_rng(6)
    index = VectorIndex("m")
    keep = add_document(store, "keep.md", 10)
    kv = unit(rng, 10)
    store.put_vectors("m", zip(keep, kv, strict=True))
    for round_ in range(5):
        tmp = add_document(store, f"tmp{round_}.md", 40)
        store.put_vectors("m", zip(tmp, unit(rng, 40), strict=True))
        index.sync(store)
        store.remove_document(store.documents_of(1)[f"tmp{round_}.md"].id)
        index.sync(store)
    assert index.count == 10
    assert index.search(kv[7], 1)[0].chunk_id == keep[7]


def test_top_n_orders_highest_first():
    scores = np.array([0.1, 0.9, 0.5, 0.7], dtype=np.float32)
    assert top_n(scores, 2).tolist() == [1, 3]
    assert top_n(scores, 10).tolist() == [1, 3, 2, 0]


def test_concurrent_syncs_beside_removals_never_keep_a_removed_chunks_vector(store, tmp_path):
    """Two searches' syncs of one shared index, each on its own connection, while another
    connection adds documents and removes them: once all is done, the index holds exactly
    the vectors the base holds (a sync that read, let go, then applied after a newer sync
    brought a removed chunk back for good)."""
    rng = np.random.default_rng(7)
    index = VectorIndex("m")
    done = threading.Event()
    errors: list[BaseException] = []

    def syncing() -> None:
        with Store(tmp_path / "b.db") as mine:
            while not done.is_set():
                try:
                    index.sync(mine)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=syncing) for _ in range(3)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: races show
    for thread in threads:
        thread.start()
    try:
        with Store(tmp_path / "b.db") as writer:
            for n in range(150):
                ids = add_document(writer, f"d{n}.md", 2)
                writer.put_vectors("m", zip(ids, unit(rng, 2), strict=True))
                if n >= 2:  # keep two documents, remove the one before them
                    old = writer.db.execute(
                        "SELECT id FROM documents WHERE path = ?", (f"d{n - 2}.md",)
                    ).fetchone()
                    writer.remove_document(old[0])
    finally:
        done.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(switch)
    assert errors == []
    index.sync(store)
    held = {r[0] for r in store.db.execute("SELECT chunk_id FROM vectors WHERE model = 'm'")}
    assert index.count == len(held) == 4
    found = {h.chunk_id for h in index.search(unit(rng, 1)[0], 100)}
    assert found == held


# -- one cosine per chunk: ties, identical vectors, top_k at the number of chunks ------------


def identical_index(store, rows: int, every: int, dim: int = DIM, seed: int = 8):
    """An index of `rows` chunks where every `every`-th row holds one same vector (the rest
    random), and a question: the chunk ids of the identical rows, and the index."""
    rng = np.random.default_rng(seed)
    ids = add_document(store, "a.md", rows)
    vecs = rng.standard_normal((rows, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs[::every] = vecs[0]
    store.put_vectors("m", zip(ids, vecs, strict=True))
    index = VectorIndex("m")
    index.sync(store)
    query = rng.standard_normal(dim).astype(np.float32)
    return ids[::every], index, query / np.linalg.norm(query)


@pytest.mark.parametrize(("rows", "every", "dim"), [(17, 2, 384), (300, 3, DIM), (1000, 7, 64)])
def test_identical_vectors_get_one_cosine_the_one_fusion_reads(store, rows, every, dim):
    """A float32 product over the whole matrix rounds a row by its block of rows: identical
    vectors got cosines a rounding apart, ranked by their place. Each chunk has one cosine,
    the same in the list as in `cosines` (which fusion scores by), to the bit, whatever the
    depth; identical chunks are listed together, by chunk id."""
    same, index, query = identical_index(store, rows, every, dim)
    for n in (rows // 2, rows - 1, rows, rows + 1):
        hits = index.search(query, n)
        listed = {h.chunk_id: h.score for h in hits}
        looked_up = index.cosines(query, list(reversed(listed)))
        assert looked_up == listed  # every bit of every cosine
        mine = [h for h in hits if h.chunk_id in same]
        assert len({h.score for h in mine}) <= 1
        assert [h.chunk_id for h in mine] == sorted(h.chunk_id for h in mine)
        ranks = [h.rank for h in mine]  # together: no other chunk between them
        assert not ranks or ranks == list(range(ranks[0], ranks[0] + len(ranks)))
    alone = index.cosines(query, [same[-1]])[same[-1]]
    assert {h.score for h in index.search(query, rows) if h.chunk_id in same} == {alone}


@pytest.mark.parametrize("extra", [-1, 0, 1])
def test_a_list_as_long_as_the_base_is_the_base_in_cosine_order(store, extra):
    """top_k at the number of chunks (one less, as many, one more): every chunk once, best
    first by cosine, ties by chunk id; the shorter list is the longer's first places."""
    rng = np.random.default_rng(9)
    ids = add_document(store, "a.md", 60)
    levels = np.array([0.9, 0.5, 0.5, 0.1], dtype=np.float32)
    vecs = np.zeros((60, DIM), dtype=np.float32)  # four cosines only: ties everywhere
    vecs[:, 0] = levels[rng.integers(0, 4, 60)]
    vecs[:, 1] = np.sqrt(1 - vecs[:, 0] ** 2)
    store.put_vectors("m", zip(ids, vecs, strict=True))
    index = VectorIndex("m")
    index.sync(store)
    query = np.eye(DIM, dtype=np.float32)[0]
    hits = index.search(query, 60 + extra)
    assert len(hits) == min(60, 60 + extra) and [h.rank for h in hits] == list(
        range(1, len(hits) + 1)
    )
    cosine_of = dict(zip(ids, (float(c) for c in vecs[:, 0].astype(np.float64)), strict=True))
    expected = sorted(ids, key=lambda c: (-cosine_of[c], c))[: len(hits)]
    assert [h.chunk_id for h in hits] == expected
    assert [h.score for h in hits] == [cosine_of[c] for c in expected]
    fewer = index.search(query, 59)
    assert [h.chunk_id for h in fewer] == [h.chunk_id for h in hits][:59]


def test_removed_rows_never_fill_a_list_longer_than_the_living(store):
    rng = np.random.default_rng(10)
    keep = add_document(store, "keep.md", 5)
    gone = add_document(store, "gone.md", 3)
    vectors = unit(rng, 8)
    store.put_vectors("m", zip(keep + gone, vectors, strict=True))
    index = VectorIndex("m")
    index.sync(store)
    store.remove_document(store.documents_of(1)["gone.md"].id)
    index.sync(store)
    query = unit(rng, 1)[0]
    living = dict(zip(keep, vectors[:5], strict=True))
    for n in (4, 5, 6, 8):
        assert [h.chunk_id for h in index.search(query, n)] == brute_force(living, query, n)


def test_a_base_read_at_once_answers_as_one_read_in_parts_to_the_bit(store):
    """The first read of a base keeps its rows as read (no copy); a base whose vectors came in
    several reads was copied row by row: the same hits, cosines and bound, to the bit, and
    both take new vectors after."""
    rng = np.random.default_rng(12)
    ids = add_document(store, "a.md", 2500)  # more rows than one block of norms
    vecs = rng.standard_normal((2500, DIM)).astype(np.float32)  # not unit: the norms differ
    store.put_vectors("m", zip(ids[:900], vecs[:900], strict=True))
    in_parts = VectorIndex("m")
    in_parts.sync(store)
    store.put_vectors("m", zip(ids[900:], vecs[900:], strict=True))
    in_parts.sync(store)
    at_once = VectorIndex("m")
    at_once.sync(store)
    whole = float(np.sqrt(np.square(vecs, dtype=np.float64).sum(axis=1)).max())
    assert at_once._norm_max == in_parts._norm_max == whole
    query = unit(rng, 1)[0]
    assert at_once.search(query, 40) == in_parts.search(query, 40)
    assert at_once.cosines(query, ids[::7]) == in_parts.cosines(query, ids[::7])
    assert at_once.mean_cosine(query) == in_parts.mean_cosine(query)
    closest = add_document(store, "b.md", 1)[0]
    store.put_vectors("m", [(closest, 100 * query)])  # the highest product of any
    for index in (at_once, in_parts):
        index.sync(store)
        assert index.search(query, 1)[0].chunk_id == closest and index.count == 2501


def test_an_index_that_has_read_nothing_answers_nothing(store):
    """An index is made empty (a base opened for a search by words reads no vector): before
    its first sync, and after one of a base without vectors, it lists nothing and knows no
    cosine, and takes the vectors when they come."""
    rng = np.random.default_rng(13)
    index = VectorIndex("m")
    query = unit(rng, 1)[0]
    for _ in range(2):
        assert index.search(query, 5) == [] and index.cosines(query, [1, 2]) == {}
        assert index.mean_cosine(query) == 0.0 and index.count == 0 and index.dimension is None
        index.sync(store)
    ids = add_document(store, "a.md", 30)
    vecs = unit(rng, 30)
    store.put_vectors("m", zip(ids, vecs, strict=True))
    index.sync(store)
    assert [h.chunk_id for h in index.search(query, 7)] == brute_force(
        dict(zip(ids, vecs, strict=True)), query, 7
    )


def test_threads_that_make_the_first_read_at_once_make_one_matrix(store, tmp_path):
    """Several searches' first syncs of one shared index at once, each on its own connection:
    the first read is made once (under the index's lock), and every thread then gets the list
    a lone index gives, to the bit."""
    rng = np.random.default_rng(14)
    ids = add_document(store, "a.md", 500)
    store.put_vectors("m", zip(ids, unit(rng, 500), strict=True))
    query = unit(rng, 1)[0]
    alone = VectorIndex("m")
    alone.sync(store)
    expected = alone.search(query, 20)
    shared = VectorIndex("m")
    start = threading.Barrier(4)
    lists, errors = [], []

    def first_search() -> None:
        try:
            with Store(tmp_path / "b.db") as mine:
                start.wait()
                shared.sync(mine)
                lists.append(shared.search(query, 20))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_search) for _ in range(4)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns as often as they can: races show
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(switch)
    assert errors == [] and lists == [expected] * 4
    assert shared.count == 500 and len(shared._matrix) == 500  # read once, never appended twice
