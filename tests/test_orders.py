"""Every order is the true one, as a user reads it: results by meaning in the order of their
cosines to the end of the list, fused ties by cosine then chunk id, one cosine per passage
(identical passages side by side, with one cosine), the same order whatever top_k around the
number of chunks, and a list by meaning that a search's snapshot cut read deeper, not ended."""

from __future__ import annotations

import pytest
from conftest import words_only_base
from word_models import attach

from metis_lite.base.core import Base
from metis_lite.copies.backup import copy_base
from metis_lite.store import Store

HANDBOOK_CHUNKS = 46
"""The chunks of examples/handbook (checked below): top_k is asked one less, as many, one more."""


def keys(results) -> list[tuple[float, float, int]]:
    """What orders results: the fused score, then the cosine (none last), then the chunk id."""
    return [
        (
            -r.scores.fused,
            float("inf") if r.scores.dense is None else -r.scores.dense,
            r.chunk_id,
        )
        for r in results
    ]


@pytest.mark.parametrize("fusion", ["relative", "rrf"])
def test_results_by_meaning_come_in_the_order_of_their_cosines_to_the_end(example_base, fusion):
    """Past the base's mean cosine every chunk scores 0 by meaning under relative fusion: the
    handbook at top_k 30 gave dense ranks …26, 28, 37, 38, 39, and 27, 29, 30 were missing."""
    for question in ("how many holidays do I get", "who approves my expenses", "Xid 79"):
        answer = example_base.search(question, mode="dense", top_k=30, fusion=fusion)
        assert [r.scores.dense_rank for r in answer.results] == list(range(1, 31)), question
        cosines = [r.scores.dense for r in answer.results]
        assert cosines == sorted(cosines, reverse=True)


@pytest.mark.parametrize("mode", ["dense", "hybrid", "keyword"])
@pytest.mark.parametrize("fusion", ["relative", "rrf"])
def test_top_k_around_the_number_of_chunks_gives_every_chunk_once_in_one_order(
    example_base, mode, fusion
):
    assert example_base.status().chunks == HANDBOOK_CHUNKS
    question = "how many holidays do I get"
    found = {
        top_k: example_base.search(question, mode=mode, top_k=top_k, fusion=fusion, rerank=False)
        for top_k in (HANDBOOK_CHUNKS - 1, HANDBOOK_CHUNKS, HANDBOOK_CHUNKS + 1)
    }
    every = [r.chunk_id for r in found[HANDBOOK_CHUNKS].results]
    assert [r.chunk_id for r in found[HANDBOOK_CHUNKS + 1].results] == every
    assert [r.chunk_id for r in found[HANDBOOK_CHUNKS - 1].results] == every[: HANDBOOK_CHUNKS - 1]
    if mode != "keyword":  # by words, only the chunks holding a word of the question
        assert sorted(every) == sorted(set(every)) and len(every) == HANDBOOK_CHUNKS
    ordered = keys(found[HANDBOOK_CHUNKS].results)
    assert ordered == sorted(ordered)  # fused ties by cosine, then chunk id
    if mode == "dense":
        ranks = [r.scores.dense_rank for r in found[HANDBOOK_CHUNKS].results]
        assert ranks == list(range(1, HANDBOOK_CHUNKS + 1))


def test_identical_passages_have_one_cosine_and_come_together_by_chunk_id(tmp_path):
    """Identical passages (the same title and text: one vector) had cosines a rounding apart
    by their row in the matrix, and ranks to match. They have one, the one fusion read."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(40):  # one passage in 40 files, none a copy of another (their bytes differ)
        (src / f"copy{n:02}.md").write_text("# Leave\n\nVacation days: 25 each year.\n" + "\n" * n)
    for n in range(40):
        (src / f"other{n:02}.md").write_text(f"# Note {n}\n\nVacation word{n} days{n % 7}.\n")
    with attach(words_only_base(tmp_path / "b.db", src)) as base:
        base.index()
        for mode in ("dense", "hybrid"):
            one = base.search("vacation days each year", mode=mode, top_k=20, rerank=False)
            [copy] = [r for r in one.results if r.text.startswith("Vacation days")]
            assert len(copy.also_in) == 39  # one result per text, its other places in it
            assert [p.chunk_id for p in copy.also_in] == sorted(p.chunk_id for p in copy.also_in)
            answer = base.search(
                "vacation days each year", mode=mode, top_k=60, rerank=False, collapse=False
            )
            copies = [r for r in answer.results if r.text.startswith("Vacation days")]
            assert len(copies) == 40
            assert len({r.scores.dense for r in copies}) == 1
            assert len({r.scores.fused for r in copies}) == 1
            assert [r.chunk_id for r in copies] == sorted(r.chunk_id for r in copies)
            places = [answer.results.index(r) for r in copies]
            assert places == list(range(places[0], places[0] + 40))
            ordered = keys(answer.results)
            assert ordered == sorted(ordered)


def test_a_list_by_meaning_cut_by_the_snapshot_is_read_deeper_not_ended(tmp_path, monkeypatch):
    """Once a search has its snapshot, another connection indexes 60 passages closest to the
    question and another search brings the shared vectors up to date: the list the search
    reads (50 deep) holds only chunks its snapshot lacks, all dropped. It did not run out:
    the search reads deeper and answers what its snapshot holds, as a copy made before does."""
    src = tmp_path / "src"
    src.mkdir()
    for n in range(30):
        (src / f"d{n:02}.md").write_text(f"Topic alpha word{n} and passage {n}.\n")
    question = "alpha beta gamma delta"
    with attach(words_only_base(tmp_path / "b.db", src)) as base:
        base.index()
        copy_base(base.path, tmp_path / "before.db")
        shared = base._vectors  # every search of the base reads these, whatever its snapshot
        read = shared.search
        armed = [True]

        def meanwhile(query, n, *, allowed=None):
            if armed.pop() if armed else False:  # the first read, in the search's snapshot
                for k in range(60):
                    (src / f"new{k:02}.md").write_text(f"{question}\n")
                with attach(Base(base.path)) as writer:
                    assert writer.index().added == 60
                with Store(base.path) as newer:  # another search's sync, on a newer snapshot
                    shared.sync(newer)
            return read(query, n, allowed=allowed)

        monkeypatch.setattr(shared, "search", meanwhile)
        answer = base.search(question, mode="dense", top_k=10)
        assert not armed  # the passages were added while it searched
    with attach(Base(tmp_path / "before.db")) as before:
        expected = before.search(question, mode="dense", top_k=10)
    assert len(expected.results) == 10
    assert [r.citation.document for r in answer.results] == [
        r.citation.document for r in expected.results
    ]
