"""Several bases from Python: `metis_lite.search_bases` and its frozen `MultiAnswer`, and the
bound on a question's distinct words (multi.py)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import EXAMPLES, words_only_base

import metis_lite
from metis_lite import MultiAnswer, search_bases
from metis_lite.errors import EmbeddingModelUnavailable, InvalidRequest
from metis_lite.search import bounded_question
from metis_lite.serialize import multi_answer_to_json
from metis_lite.settings import QUESTION_WORDS_MAX


@pytest.fixture(scope="module")
def two_bases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("multi")
    with (
        words_only_base(folder / "one.db", EXAMPLES) as one,
        words_only_base(folder / "two.db", EXAMPLES) as two,
    ):
        one.index()
        two.index()
        yield one, two


def test_search_bases_is_public_and_merges_in_the_order_of_the_bases(two_bases):
    assert "search_bases" in metis_lite.__all__ and "MultiAnswer" in metis_lite.__all__
    one, two = two_bases
    answer = search_bases([one, two], "Xid 79 GPU", mode="keyword", top_k=6)
    assert isinstance(answer, MultiAnswer) and answer.bases == ("one", "two")
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.mode = "dense"  # type: ignore[misc]
    assert [r.base for r in answer.results] == ["one", "two"] * 3
    scores = [r.score for r in answer.results]
    assert scores == sorted(scores, reverse=True)
    assert all(r.score == r.scores.fused for r in answer.results)
    assert answer.took.total >= max(answer.took.keyword, 0.0)
    as_json = multi_answer_to_json(answer)
    assert {r["base"] for r in as_json["results"]} == {"one", "two"}


def test_each_warning_names_its_base_and_an_error_its_base(two_bases):
    one, two = two_bases
    answer = search_bases({"a": one, "b": two}, "travel", mode="hybrid", top_k=3)
    assert answer.warnings and {w.base for w in answer.warnings} == {"a", "b"}
    assert all(w.message.startswith(f"{w.base}: ") for w in answer.warnings)
    with pytest.raises(EmbeddingModelUnavailable, match="^a: "):
        search_bases({"a": one, "b": two}, "travel", mode="dense")
    with pytest.raises(InvalidRequest):
        search_bases([one, one], "travel")
    with pytest.raises(InvalidRequest):
        search_bases([], "travel")


def test_a_long_question_is_searched_up_to_its_words_bound_with_a_warning(two_bases):
    words = [f"word{n}" for n in range(QUESTION_WORDS_MAX)]
    exact = " ".join(words + words)  # repeated words count once
    assert bounded_question(exact) == (exact, None)
    longer = exact + " travel expenses"
    kept, cut = bounded_question(longer)
    assert kept == exact and cut is not None and cut.code == "QUESTION_CUT"
    one, _ = two_bases
    long_question = " ".join(f"w{n}" for n in range(3000)) + " travel"
    answer = one.search(long_question, mode="keyword")  # the Python API and the CLI bound it too
    assert answer.warnings[0].code == "QUESTION_CUT"
    assert one.search("travel", mode="keyword").warnings == ()
    several = search_bases(list(two_bases), long_question, mode="keyword")
    assert [w.code for w in several.warnings] == ["QUESTION_CUT", "QUESTION_CUT"]
