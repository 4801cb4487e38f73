"""The words in memory (bm25.py) against FTS5's bm25() and the pure-Python BM25 oracle: the
same top n, the same scores, on random corpora with removals, filters and every script; kept
in step while threads search and another process writes."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_keyword import bm25_oracle

from metis_lite.base.core import Base
from metis_lite.records import Chunk, Filters
from metis_lite.retrieval import bm25, keyword
from metis_lite.retrieval.bm25 import WordIndex
from metis_lite.store import Store, filter_clause
from metis_lite.text.tokenizer import fts_match, tokens

ROOT = Path(__file__).resolve().parent.parent

WORDS = (
    "proxy configuração rede vacation days paid leave xid 79 po 2231 error gpu budget travel"
    " 東京の天気 Straße naïve ファイル résumé 5 a of the"
).split()


def fts5(store: Store, words: list[str], n: int, filters: Filters | None = None):
    """FTS5's own answer, as keyword.py asks it when no index answers."""
    match = fts_match(words)
    if filters is not None and filters.active:
        where, params = filter_clause(filters)
        sql = keyword._SEARCH_FILTERED.format(where=where)
        return [tuple(r) for r in store.db.execute(sql, (match, *params, n))]
    return [tuple(r) for r in store.db.execute(keyword._SEARCH, (match, n))]


def memory(index: WordIndex, store: Store, words: list[str], n: int, allowed=None):
    hits = index.search(store, words, n, allowed=allowed)
    assert hits is not None, "the index does not hold what the store holds"
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    return [(h.chunk_id, h.score) for h in hits]


def write(store: Store, rng: random.Random, path: str, source: int = 1) -> None:
    chunks = []
    for _ in range(rng.randint(1, 4)):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 25)))
        headings = tuple(rng.choice(WORDS) for _ in range(rng.randint(0, 2)))
        chunks.append(Chunk(text=text, title=rng.choice(WORDS + [""]), headings=headings))
    store.replace_document(
        source_id=source,
        path=path,
        kind=path.rsplit(".", 1)[1],
        title="t",
        content_hash=str(rng.random()),
        size=1,
        mtime=None,
        chunks=chunks,
    )


def corpus_of(store: Store) -> dict[int, tuple[list[str], list[str]]]:
    """Each chunk's words as the FTS5 table holds them: its text, and title and headings."""
    out = {}
    for cid, text, title, headings in store.db.execute(
        "SELECT id, text, title, headings FROM chunks"
    ):
        out[cid] = (tokens(text), tokens(" ".join((title, *json.loads(headings)))))
    return out


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "b.db", create=True) as s:
        s.add_source("docs", str(tmp_path / "d"))
        s.add_source("notes", str(tmp_path / "n"))
        yield s


@pytest.fixture
def index(store):
    made = WordIndex(lambda: Store(store.path))
    yield made
    made.close()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60))
def test_top_n_and_scores_are_fts5s_on_random_corpora(store, index, monkeypatch, seed, n):
    rng = random.Random(seed)
    for d in range(rng.randint(1, 25)):
        write(store, rng, f"{'a' if d % 3 else 'b'}/d{d}.{('md', 'txt', 'pdf')[d % 3]}", 1 + d % 2)
    for d in rng.sample(range(25), rng.randint(0, 8)):  # some replaced, some removed
        if rng.random() < 0.5:
            write(store, rng, f"{'a' if d % 3 else 'b'}/d{d}.{('md', 'txt', 'pdf')[d % 3]}")
        else:
            row = store.db.execute("SELECT id FROM documents WHERE path LIKE ?", (f"%/d{d}.%",))
            for (document_id,) in row.fetchall():
                store.remove_document(document_id)
    assert index.wait(store)
    corpus = corpus_of(store)
    for _ in range(4):
        words = list(dict.fromkeys(tokens(" ".join(rng.sample(WORDS, rng.randint(1, 5))))))
        if not words:
            continue
        ours = memory(index, store, words, n)
        assert ours == fts5(store, words, n)
        expected = bm25_oracle(corpus, " ".join(words))
        assert len(ours) == min(n, len(expected))
        for chunk_id, score in ours:
            assert score == pytest.approx(expected[chunk_id], rel=1e-6, abs=1e-9)
        kept = Filters(path_prefix="a/", kinds=("md", "pdf"))
        allowed = store.filtered_chunk_ids(kept)
        every = fts5(store, words, 10_000)
        subset = sorted(rng.sample(sorted(corpus), min(len(corpus), rng.randint(1, 6))))
        for few in (0, 10**9):  # every posting read; each allowed chunk looked up
            monkeypatch.setattr(bm25, "FEW_ALLOWED", few)
            for recent in (False, True):  # this question's scores computed, or kept from before
                if not recent:
                    index._recent.__dict__.clear()
                among = memory(index, store, words, n, np.array(subset + [10**9]))  # one gone
                assert among == [hit for hit in every if hit[0] in subset][:n]
                assert memory(index, store, words, n, allowed) == fts5(store, words, n, kept)


def test_a_stale_index_answers_nothing_and_fts5_answers_the_same(store, index):
    rng = random.Random(3)
    for d in range(40):
        write(store, rng, f"d{d}.md")
    assert index.wait(store)
    key = index.key
    words = ["gpu", "budget"]
    before = memory(index, store, words, 20)
    write(store, rng, "new.md")  # a write the index may not have seen yet
    with store.db:
        hits = index.search(store, words, 20)  # None while it catches up, never another list
        assert hits is None or [(h.chunk_id, h.score) for h in hits] == fts5(store, words, 20)
    through_keyword = keyword.search(store, "gpu budget", 20, index=index)
    assert [(h.chunk_id, h.score) for h in through_keyword] == fts5(store, words, 20)
    assert index.wait(store) and index.key != key
    assert memory(index, store, words, 20) == fts5(store, words, 20) != before


def test_an_index_that_has_read_nothing_leaves_fts5_to_answer_until_it_has(store, index):
    """Made, an index holds nothing and starts no thread (a base searched once): asked, it
    answers None (FTS5 answers) and starts reading; caught up, it answers what FTS5 does."""
    write(store, random.Random(5), "a.md")
    assert index.key == bm25.UNREAD and index._thread is None
    with store.db:
        assert index.search(store, ["gpu"], 10) is None
    assert index._thread is not None and index.wait(store) and index.key != bm25.UNREAD
    words = list(dict.fromkeys(tokens(" ".join(WORDS))))
    assert memory(index, store, words, 10) == fts5(store, words, 10) != []


def test_a_question_with_no_known_word_and_an_empty_base(store, index):
    assert index.wait(store)
    assert index.search(store, ["gpu"], 10) == []
    write(store, random.Random(1), "a.md")
    assert index.wait(store)
    assert index.search(store, ["kubernetes"], 10) == []
    assert index.search(store, [], 10) == []


def test_a_words_index_of_other_rules_is_left_to_fts5_until_rebuilt(tmp_path):
    from test_store import version_1_base

    path = version_1_base(tmp_path)  # its context column holds the title only
    index = WordIndex(lambda: Store(path))
    try:
        with Store(path) as store, store.db:
            assert index.wait(store)
            assert not index._state.usable  # its counts are not the table's
            assert index.search(store, ["proxy"], 10) is None
        with Base(path) as base:
            base.index()  # rebuilds the words index by today's rules
        with Store(path) as store, store.db:
            assert index.wait(store) and index._state.usable
            for words in (["東京", "天気"], ["configuracao", "proxy"], ["हिन्दी"]):
                assert memory(index, store, words, 10) == fts5(store, words, 10) != []
    finally:
        index.close()


def test_compaction_and_merges_keep_the_scores(store, index, monkeypatch):
    monkeypatch.setattr(bm25, "MAX_SEGMENTS", 2)
    monkeypatch.setattr(bm25, "BATCH_CHUNKS", 7)
    rng = random.Random(11)
    for round_ in range(6):
        for d in range(12):
            write(store, rng, f"d{d}.md")  # every document replaced: its old chunks are dead
        assert index.wait(store)
        state = index._state
        assert len(state.segments) <= 2 and state.dead <= 0.25 * len(state.ids)
        for words in (["gpu"], ["東京", "天気", "error"], ["the", "paid", "79"]):
            assert memory(index, store, words, 30) == fts5(store, words, 30), round_


def test_the_base_searches_from_memory_once_loaded_and_stops_its_thread_on_close(tmp_path):
    from conftest import DEAD_EMBEDDING

    path = tmp_path / "k.db"
    with Store(path, create=True) as store:
        store.add_source("docs", str(tmp_path))
        rng = random.Random(2)
        for d in range(30):
            write(store, rng, f"d{d}.md")
    base = Base(path)
    base.configure(embedding=DEAD_EMBEDDING)
    first = base.search("gpu budget travel", mode="keyword", top_k=20)
    with Store(path) as reader, reader.db:
        assert base._words.wait(reader)
    again = base.search("gpu budget travel", mode="keyword", top_k=20)
    assert [(r.scores.keyword, r.citation.document) for r in again.results] == [
        (r.scores.keyword, r.citation.document) for r in first.results
    ]
    thread = base._words._thread
    assert thread is not None and thread.is_alive()
    base.close()
    assert not thread.is_alive()


WRITER = """
import random, sys, time
from metis_lite.records import Chunk
from metis_lite.store import Store
path, seconds = sys.argv[1], float(sys.argv[2])
rng = random.Random(9)
words = sys.argv[3].split()
end = time.monotonic() + seconds
n = 0
with Store(path) as store:
    while time.monotonic() < end:
        d = rng.randrange(30)
        chunks = [Chunk(" ".join(rng.choice(words) for _ in range(rng.randint(1, 20))), "t", ())
                  for _ in range(rng.randint(1, 3))]
        store.replace_document(source_id=1, path=f"w{d}.md", kind="md", title="t",
                               content_hash=str(n), size=1, mtime=None, chunks=chunks)
        n += 1
        time.sleep(0.01)
print(n)
"""


def test_threads_search_while_another_process_writes(tmp_path):
    """Four threads search one base (each its own connection, one snapshot a search) while a
    second process replaces documents: whenever the index answers, it answers what FTS5
    answers in the same snapshot; at the end it catches up."""
    path = tmp_path / "w.db"
    with Store(path, create=True) as store:
        store.add_source("docs", str(tmp_path))
        rng = random.Random(4)
        for d in range(60):
            write(store, rng, f"d{d}.md")
    index = WordIndex(lambda: Store(path))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), "4", " ".join(WORDS)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    answered, failures = [0], []

    def searcher(seed: int) -> None:
        rng = random.Random(seed)
        with Store(path) as store:
            while writer.poll() is None:
                words = list(dict.fromkeys(tokens(" ".join(rng.sample(WORDS, 3)))))
                with store.db:
                    hits = index.search(store, words, 25)
                    if hits is not None:
                        answered[0] += 1
                        got = [(h.chunk_id, h.score) for h in hits]
                        if got != fts5(store, words, 25):
                            failures.append(words)
                time.sleep(0.002)

    threads = [threading.Thread(target=searcher, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    out, err = writer.communicate(timeout=120)
    for thread in threads:
        thread.join(60)
    try:
        assert writer.returncode == 0, err
        assert int(out) > 20 and not failures
        with Store(path) as store, store.db:
            assert index.wait(store)
            words = ["gpu", "東京", "travel"]
            assert memory(index, store, words, 50) == fts5(store, words, 50)
        assert answered[0] > 0
        assert index.failure is None
    finally:
        index.close()


def test_filters_through_keyword_search_are_fts5s(store, index):
    rng = random.Random(8)
    for d in range(30):
        write(store, rng, f"{'p' if d % 2 else 'q'}/d{d}.{('md', 'txt')[d % 2]}", 1 + d % 2)
    assert index.wait(store)
    for filters in (
        Filters(path_prefix="p/"),
        Filters(kinds=("txt",)),
        Filters(sources=("notes",)),
    ):
        hits = keyword.search(store, "gpu error travel", 40, filters=filters, index=index)
        expected = fts5(store, ["gpu", "error", "travel"], 40, filters)
        assert [(h.chunk_id, h.score) for h in hits] == expected and expected


def test_a_question_asked_again_reuses_its_scores_until_the_base_changes(store, index, monkeypatch):
    rng = random.Random(6)
    for d in range(20):
        write(store, rng, f"d{d}.md")
    assert index.wait(store)
    computed = []
    real = bm25._scores
    monkeypatch.setattr(bm25, "_scores", lambda *a: computed.append(a[1]) or real(*a))
    words = ["gpu", "budget", "the"]
    first = memory(index, store, words, 5)
    deeper = memory(index, store, words, 50)  # a deeper list of the same question
    some = [chunk_id for chunk_id, _ in deeper[::3]]
    assert memory(index, store, words, 50, np.array(some)) == [h for h in deeper if h[0] in some]
    assert deeper[:5] == first and len(computed) == 1
    memory(index, store, ["travel"], 5)  # another question
    write(store, rng, "d0.md")  # another state of the base
    assert index.wait(store)
    assert memory(index, store, words, 50) == fts5(store, words, 50)
    assert computed == [words, ["travel"], words]
