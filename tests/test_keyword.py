"""By words: FTS5's BM25 order against a tiny pure-Python BM25, filters before ranking."""

from __future__ import annotations

import math
import random

import pytest
from conftest import add_passages

from metis_lite.records import Chunk, Filters, QuestionWords
from metis_lite.retrieval import keyword
from metis_lite.retrieval.keyword import CONTEXT_WEIGHT, TEXT_WEIGHT
from metis_lite.store import Store
from metis_lite.text.tokenizer import tokens

WORDS = "proxy configuração rede vacation days paid leave xid 79 po 2231 error gpu budget travel".split()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "k.db", create=True) as s:
        s.add_source("docs", str(tmp_path / "d"))
        s.add_source("notes", str(tmp_path / "n"))
        yield s


def fill(store, rng, n_docs=30):
    corpus = {}
    for d in range(n_docs):
        chunks = []
        for _ in range(rng.randint(1, 4)):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 30)))
            chunks.append(Chunk(text=text, title=f"Doc {d}", headings=(rng.choice(WORDS),)))
        kind = ("md", "txt", "pdf")[d % 3]
        source = 1 + d % 2
        path = f"{'policies' if d % 4 == 0 else 'misc'}/d{d}.{kind}"
        store.replace_document(
            source_id=source,
            path=path,
            kind=kind,
            title=f"Doc {d}",
            content_hash=str(d),
            size=1,
            mtime=None,
            chunks=chunks,
        )
    for cid, text, title, headings in store.db.execute(
        "SELECT id, text, title, json_extract(headings, '$[0]') FROM chunks"
    ):
        corpus[cid] = (tokens(text), tokens(f"{title} {headings}"))
    return corpus


def bm25_oracle(corpus, question, k1=1.2, b=0.75):
    """FTS5's bm25(): per phrase IDF × weighted frequency saturation, length over all columns."""
    n = len(corpus)
    lengths = {c: len(t) + len(x) for c, (t, x) in corpus.items()}
    avgdl = sum(lengths.values()) / n
    scores = {}
    for term in dict.fromkeys(tokens(question)):
        having = sum(1 for t, x in corpus.values() if term in t or term in x)
        if not having:
            continue
        idf = max(math.log((n - having + 0.5) / (having + 0.5)), 1e-6)
        for c, (t, x) in corpus.items():
            f = TEXT_WEIGHT * t.count(term) + CONTEXT_WEIGHT * x.count(term)
            if f:
                norm = k1 * (1 - b + b * lengths[c] / avgdl)
                scores[c] = scores.get(c, 0.0) + idf * f * (k1 + 1) / (f + norm)
    return scores


@pytest.mark.parametrize(
    "question", ["proxy configuracao", "Xid 79 error", "paid vacation days", "PO-2231"]
)
def test_bm25_matches_the_oracle(store, question):
    corpus = fill(store, random.Random(7))
    expected = bm25_oracle(corpus, question)
    hits = keyword.search(store, question, 50)
    assert len(hits) == min(50, len(expected))
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.chunk_id], rel=1e-6, abs=1e-6)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    best = sorted(expected.values(), reverse=True)[: len(hits)]
    assert [h.score for h in hits] == pytest.approx(best, rel=1e-6, abs=1e-6)


def test_filters_apply_before_ranking(store):
    fill(store, random.Random(8))
    hits = keyword.search(
        store, "proxy gpu", 200, filters=Filters(path_prefix="policies/", kinds=("md",))
    )
    assert hits
    rows = store.chunk_rows([h.chunk_id for h in hits])
    assert all(r.document.startswith("policies/") and r.kind == "md" for r in rows.values())
    by_source = keyword.search(store, "proxy gpu", 200, filters=Filters(sources=("notes",)))
    assert by_source and {
        r.source for r in store.chunk_rows([h.chunk_id for h in by_source]).values()
    } == {"notes"}
    unfiltered = keyword.search(store, "proxy gpu", 500)
    assert {h.chunk_id for h in hits} < {h.chunk_id for h in unfiltered}


def test_a_question_without_words_finds_nothing(store):
    fill(store, random.Random(9))
    assert keyword.search(store, " - * : ( ) ", 10) == []
    assert keyword.search(store, "", 10) == []


def test_title_and_headings_count_as_context(store):
    store.replace_document(
        source_id=1,
        path="a.md",
        kind="md",
        title="Travel policy",
        content_hash="a",
        size=1,
        mtime=None,
        chunks=[Chunk("Book with the agency.", "Travel policy", ("Booking",))],
    )
    store.replace_document(
        source_id=1,
        path="b.md",
        kind="md",
        title="Other",
        content_hash="b",
        size=1,
        mtime=None,
        chunks=[Chunk("Unrelated words here.", "Other", ())],
    )
    hits = keyword.search(store, "travel booking", 10)
    assert [store.chunk_rows([h.chunk_id])[h.chunk_id].document for h in hits] == ["a.md"]


def test_words_in_half_the_chunks_are_left_out_and_change_no_score(store):
    for d in range(10):
        text = "the report " + ("budget travel" if d < 2 else "gpu error") + " the end"
        store.replace_document(
            source_id=1,
            path=f"d{d}.md",
            kind="md",
            title=f"D{d}",
            content_hash=str(d),
            size=1,
            mtime=None,
            chunks=[Chunk(text, f"D{d}", ())],
        )
    assert keyword.search_words(store, "the budget") == ["budget"]
    assert keyword.search_words(store, "the") == ["the"]  # nothing else to ask
    full = store.db.execute(
        'SELECT rowid, -bm25(chunks_fts, 1.0, 0.5) FROM chunks_fts WHERE chunks_fts MATCH \'"the" OR "budget"\''
        " ORDER BY bm25(chunks_fts, 1.0, 0.5) LIMIT 2"
    ).fetchall()
    hits = keyword.search(store, "the budget", 10)
    assert [h.chunk_id for h in hits] == [r[0] for r in full]
    assert [h.score for h in hits] == pytest.approx([r[1] for r in full], abs=1e-5)
    # The cache follows writes: once "budget" is common too, it is left out as well.
    for d in range(10, 20):
        store.replace_document(
            source_id=1,
            path=f"d{d}.md",
            kind="md",
            title="x",
            content_hash=str(d),
            size=1,
            mtime=None,
            chunks=[Chunk("budget budget", "x", ())],
        )
    assert keyword.search_words(store, "the budget gpu") == ["gpu"]


def test_best_possible_is_the_score_of_a_chunk_holding_each_word_once(store):
    # Chunks of equal length (no title, no headings), so each is of average length: the one
    # holding each question word once scores exactly best_possible; a word no chunk holds
    # counts in full, so the same chunk then holds less than all of it.
    filler = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()
    texts = [" ".join(filler[i % 10 :] + filler[: i % 10]) for i in range(12)]
    texts[3] = "proxy rede vacation " + " ".join(filler[3:])
    add_passages(store, texts)
    hits = keyword.search(store, "proxy rede vacation", 5)
    assert hits[0].chunk_id == 4
    assert math.isclose(
        hits[0].score, keyword.best_possible(store, "proxy rede vacation"), rel_tol=1e-6
    )
    with_unknown = keyword.best_possible(store, "proxy rede vacation kubernetes")
    assert math.isclose(with_unknown - hits[0].score, math.log(12.5 / 0.5), rel_tol=1e-6)
    assert keyword.best_possible(store, "?!") == 0.0


def test_question_words_count_the_chunks_holding_each_word_and_say_which_are_common(store):
    # 12 chunks: "the" in all, "leave" in 3 (a quarter: common), "budget" in 2, "gpu" in none.
    texts = [f"the note {n}" for n in range(7)] + ["the budget", "the budget plan"]
    add_passages(store, texts + ["the leave", "the leave days", "leave the rest"])
    asked = keyword.question_words(store, "The budget, the LEAVE: a GPU")
    assert asked.words == ("the", "budget", "leave", "gpu")
    assert (asked.chunks, asked.held) == (12, (12, 2, 3, 0))
    assert asked.common == (True, False, True, False)
    assert asked.telling == ("budget", "gpu")
    assert keyword.search_words(
        store, "the budget", asked=keyword.question_words(store, "the budget")
    ) == ["budget"]


def test_no_word_is_common_in_a_base_of_fewer_than_ten_chunks(store):
    add_passages(store, ["the leave", "the leave", "the plan"])
    asked = keyword.question_words(store, "the leave plan")
    assert asked.held == (3, 2, 1) and asked.common == (False, False, False)
    assert keyword.question_words(store, " ?! ") == QuestionWords()
