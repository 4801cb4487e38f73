"""Several bases from Python: `metis_lite.search_bases` and its frozen `MultiAnswer`, and the
bound on a question's distinct words (multi.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import pytest
from conftest import EXAMPLES, FIXTURES, ROOT, words_only_base
from serving import served
from word_models import WORDS, serving

import metis_lite
from metis_lite import MultiAnswer, search_bases
from metis_lite.agents.tools import TOOLS, Agent
from metis_lite.base.core import Base
from metis_lite.copies.backup import copy_base
from metis_lite.errors import EmbeddingModelUnavailable, InvalidRequest
from metis_lite.evaluation import beir, metrics
from metis_lite.evaluation.runner import _items_by_chunk, resolve
from metis_lite.evaluation.sets import EvalSet, read_jsonl
from metis_lite.models import registry
from metis_lite.retrieval import search as search_module
from metis_lite.retrieval.fusion import deepened
from metis_lite.retrieval.search import bounded_question
from metis_lite.service.serialize import multi_answer_to_json
from metis_lite.settings import QUESTION_WORDS_MAX

FAQUAD = FIXTURES / "eval" / "faquad_pt"  # CC BY 4.0: SOURCE.md


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
    answer = search_bases([one, two], "Xid 79 GPU", mode="keyword", top_k=6, collapse=False)
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


def test_the_same_passage_in_two_bases_is_one_result_that_names_both(two_bases):
    # The two bases index the same folder: each passage is one result, from the base it ranks
    # first in, with its place in the other; top_k counts distinct passages.
    one, two = two_bases
    every = search_bases([one, two], "Xid 79 GPU", mode="keyword", top_k=6, collapse=False)
    answer = search_bases([one, two], "Xid 79 GPU", mode="keyword", top_k=3)
    assert [r.chunk_id for r in answer.results] == [r.chunk_id for r in every.results][::2]
    for result in answer.results:
        assert result.base == "one"
        [other] = result.also_in
        assert other.base == "two" and other.citation == result.citation
    item = multi_answer_to_json(answer)["results"][0]
    assert item["also_in"] == [{"citation": item["citation"], "base": "two"}]


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


class _SlowEmbedder:
    """Answers after `delay` seconds: a base still reading while another base's error ends
    the search of several."""

    name = "multilingual-e5-small"

    def __init__(self, delay: float) -> None:
        self.delay, self.started, self.finished = delay, threading.Event(), threading.Event()

    def embed(self, texts):
        self.started.set()
        time.sleep(self.delay)
        self.finished.set()
        vectors = np.ones((len(texts), 384), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    def close(self) -> None:
        pass


def test_an_error_of_one_base_waits_for_the_others_steps_before_their_snapshots_close(
    two_bases, example_base
):
    """Base a refuses a search by meaning at once; the handbook is still embedding its
    question on another thread. The answer is a's error, never an error of closing the
    handbook's snapshot under the step still reading it, and the handbook answers after."""
    words_only, _ = two_bases
    slow = _SlowEmbedder(0.5)
    # The handbook's model by name (its vectors' label, its prefixes), made slow to answer.
    with registry.registered(serving(slow, name="slow", options={"model": str})):
        example_base.configure(embedding={"provider": "slow", "model": "multilingual-e5-small"})
        with pytest.raises(EmbeddingModelUnavailable, match="^a: "):
            search_bases({"a": words_only, "handbook": example_base}, "travel", mode="dense")
        assert slow.started.is_set() and slow.finished.is_set()  # its step ended before the answer
        assert example_base.search("travel", mode="keyword").results


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


# -- ranked as one base ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def ranked(tmp_path_factory, example_base_file):
    """The handbook, a multilingual base holding Article 1 of the Universal Declaration of
    Human Rights verbatim among unrelated Spanish and German documents, and a patient guide to
    breast cancer (tests/fixtures/ranking): each with the embedded model."""
    folder = tmp_path_factory.mktemp("ranked")
    paths = {"handbook": folder / "handbook.db"}
    shutil.copy(example_base_file, paths["handbook"])
    for name in ("real", "medical"):
        paths[name] = folder / f"{name}.db"
        with Base(paths[name], create=True) as base:
            base.add_source(FIXTURES / "ranking" / name)
            assert base.index().without_vector == 0
    return paths


def test_a_sentence_held_verbatim_comes_first_above_another_bases_unrelated_passages(ranked):
    # Each base's best by meaning got the whole meaning share whatever its cosine: the
    # handbook's passages, sharing no word with the question, came third to fifth.
    with Base(ranked["real"]) as real, Base(ranked["handbook"]) as handbook:
        answer = search_bases(
            {"real": real, "handbook": handbook}, "Todos los seres humanos nacen libres"
        )
    first = answer.results[0]
    assert (first.base, first.citation.document) == (
        "real",
        "derechos/articulo-1-en-siete-lenguas.html",
    )
    assert "Todos los seres humanos nacen libres" in first.text
    assert [r.base for r in answer.results[:3]] == ["real"] * 3


def test_the_vacation_passage_comes_first_above_a_medical_guides_questions(ranked):
    # In a base of nine chunks, "how", "do" and "get" are rare, and "How do I get my test
    # results?" was the medical base's best by both lists: fused alone, it came first.
    question = "how many holidays do I get"
    with Base(ranked["handbook"]) as handbook, Base(ranked["medical"]) as medical:
        bases = {"handbook": handbook, "medical": medical}
        for fusion in ("relative", None):
            first = search_bases(bases, question, fusion=fusion).results[0]
            assert first.base == "handbook" and first.citation.headings[-1] == "Vacation"
        agent = Agent(bases)
        try:
            data = agent.call("search", {"question": question}, None).data
        finally:
            agent.close()
    assert data["results"][0]["citation"]["headings"][-1] == "Vacation"


def test_ranks_cited_by_several_bases_are_ranks_in_their_lists_merged(two_bases, ranked):
    # Each base's own ranks were cited: two bases gave ranks 1, 1, 2, 2, … and a weak base's
    # best by meaning was "#1 by meaning", which the console reads as near the top.
    one, two = two_bases
    answer = search_bases([one, two], "Xid 79 GPU", mode="keyword", top_k=6, collapse=False)
    assert [r.scores.keyword_rank for r in answer.results] == [1, 2, 3, 4, 5, 6]
    with Base(ranked["handbook"]) as handbook, Base(ranked["medical"]) as medical:
        bases = {"handbook": handbook, "medical": medical}
        answer = search_bases(bases, "how many holidays do I get", top_k=30)
        alone = medical.search("how many holidays do I get", top_k=30).results
    by_meaning = sorted(
        (r for r in answer.results if r.scores.dense_rank), key=lambda r: r.scores.dense_rank
    )
    ranks = [r.scores.dense_rank for r in by_meaning]
    assert len(set(ranks)) == len(ranks) and ranks[0] == 1
    cosines = [r.scores.dense for r in by_meaning]
    assert cosines == sorted(cosines, reverse=True)  # one model: merged by cosine
    medical_first = min(alone, key=lambda r: r.scores.dense_rank)
    assert medical_first.scores.dense_rank == 1  # first in its own base …
    cited = next(r for r in answer.results if r.chunk_id == medical_first.chunk_id)
    assert cited.base == "medical" and cited.scores.dense_rank > 1  # … not among both


def test_one_model_behind_other_query_prefixes_is_two_models(tmp_path):
    # The same label on both bases' vectors, but one question embedded behind "query: ": its
    # cosines are on another scale, so the bases take turns instead of sharing one.
    def base(name: str, folder: Path, **embedding) -> Base:
        made = words_only_base(tmp_path / f"{name}.db")
        made.configure(embedding={**WORDS, **embedding})
        made.add_source(folder)
        made.index()
        return made

    with (
        base("handbook", EXAMPLES) as handbook,
        base("same", FIXTURES / "ranking" / "medical") as same,
        base("other", FIXTURES / "ranking" / "medical", query_prefix="query: ") as other,
    ):
        question = "travel expenses hotel"
        one_scale = search_bases([handbook, same], question, mode="dense", top_k=4).results
        in_turn = search_bases([handbook, other], question, mode="dense", top_k=4).results
    assert [r.base for r in one_scale[:2]] == ["handbook", "handbook"]
    assert [r.base for r in in_turn] == ["handbook", "other", "handbook", "other"]


def split_in_three(whole: Path, folder: Path) -> list[Path]:
    """Three copies of a base, each keeping a third of its documents (by a hash of the path):
    the same chunks, ids and vectors, and each base its own word statistics."""
    parts = []
    for n in range(3):
        part = folder / f"part{n}.db"
        copy_base(whole, part)
        with Base(part) as base:
            store = base.store
            for doc_id, path in store.db.execute("SELECT id, path FROM documents").fetchall():
                if int(hashlib.sha256(path.encode()).hexdigest(), 16) % 3 != n:
                    store.remove_document(doc_id)
        parts.append(part)
    return parts


def mean_ndcg(search, evalset, holders) -> float:
    scores = []
    for question in evalset.questions:
        items = _items_by_chunk(question.expected, holders)
        ranked = [
            ((r.citation.source, r.citation.document), items.get(r.chunk_id, frozenset()))
            for r in search(question.text)
        ]
        judged = metrics.judge(ranked, [e.grade for e in question.expected])
        scores.append(metrics.ndcg(judged, 10))
    return sum(scores) / len(scores)


def test_the_handbook_split_over_three_bases_ranks_as_the_one_base(example_base_file, tmp_path):
    evalset = read_jsonl(ROOT / "examples" / "handbook-questions.jsonl")
    questions = [q.text for q in evalset.questions] + [
        "paid vacation days",
        "who approves a purchase order",
        "nvidia-smi shows Xid 79",
        "configuração do proxy",
        "what to do after a security incident",
    ]
    with ExitStack() as stack:
        whole = stack.enter_context(Base(example_base_file))
        parts = [stack.enter_context(Base(p)) for p in split_in_three(example_base_file, tmp_path)]
        assert all(p.status().chunks for p in parts)
        holders, _ = resolve(whole, {e for q in evalset.questions for e in q.expected})
        one = mean_ndcg(lambda q: whole.search(q).results, evalset, holders)
        three = mean_ndcg(lambda q: search_bases(parts, q).results, evalset, holders)
        assert abs(one - three) <= 0.01, (one, three)
        for question in questions:
            alone = whole.search(question, top_k=3).results
            split = search_bases(parts, question, top_k=3).results
            assert split[0].chunk_id == alone[0].chunk_id, question


@pytest.fixture(scope="module")
def faquad(tmp_path_factory):
    """FaQuAD's 249 passages (tests/fixtures/eval, CC BY 4.0) in one base, embedded by words
    (word_models.py: fast, one model for all), and the same base split over three: ~280
    chunks, ~90 a part, so lists read 50 deep do not reach their end."""
    folder = tmp_path_factory.mktemp("faquad")
    beir.write_corpus(FAQUAD, folder / "corpus")
    whole = folder / "faquad.db"
    with words_only_base(whole) as base:
        base.configure(embedding=WORDS)
        base.add_source(folder / "corpus", name="corpus")
        assert base.index().without_vector == 0
    parts = split_in_three(whole, folder)
    evalset = beir.read_questions(FAQUAD)
    questions = EvalSet("faquad-300", "beir", str(FAQUAD), evalset.questions[::3][:300])
    with ExitStack() as stack:
        bases = [stack.enter_context(Base(p)) for p in (whole, *parts)]
        yield bases[0], bases[1:], questions


def test_faquad_split_over_three_bases_ranks_as_the_one_base(faquad, monkeypatch):
    whole, parts, evalset = faquad
    assert all(p.status().chunks < whole.status().chunks for p in parts)
    holders, _ = resolve(whole, {e for q in evalset.questions for e in q.expected})
    read_to_the_end: list[bool] = []

    def recorded(read, **kwargs):
        found, ranking = deepened(read, **kwargs)
        if len(found) > 1:  # the three parts' lists, not the whole base's
            read_to_the_end.append(not any(c.dense_more or c.words_more for c in found))
        return found, ranking

    monkeypatch.setattr(search_module, "deepened", recorded)
    for mode in ("keyword", "hybrid"):
        one = mean_ndcg(lambda q, m=mode: whole.search(q, mode=m).results, evalset, holders)
        three = mean_ndcg(
            lambda q, m=mode: search_bases(parts, q, mode=m).results, evalset, holders
        )
        assert abs(one - three) <= 0.01, (mode, one, three)
        assert one > 0.8, (mode, one)  # by words alone: 0.889 on all 900 questions
    # Each part's lists, read 50 deep, did not reach their end for most questions.
    assert read_to_the_end.count(False) > len(read_to_the_end) / 2


def test_lists_read_deeper_give_what_the_whole_base_ranks(faquad, monkeypatch):
    # Read 5 deep first instead of 50, every search must read deeper (twice as deep each time)
    # until its first ten are certain: they are then what reading 50 deep ranks.
    whole, parts, evalset = faquad
    questions = [q.text for q in evalset.questions[:100]]

    def firsts() -> list[tuple[list, list]]:
        return [
            (
                [r.chunk_id for r in whole.search(q).results],
                [(r.base, r.chunk_id) for r in search_bases(parts, q).results],
            )
            for q in questions
        ]

    expected = firsts()
    depths: list[int] = []

    def recorded(read, **kwargs):
        found, ranking = deepened(read, **kwargs)
        depths.append(found[0].depth)
        return found, ranking

    shallow = lambda top_k, memory=False: 5  # noqa: E731
    for module in (search_module,):
        monkeypatch.setattr(module, "first_depth", shallow)
        monkeypatch.setattr(module, "deepened", recorded)
    assert firsts() == expected
    assert sum(depth > 5 for depth in depths) > len(depths) / 2


def test_a_wider_window_keeps_the_first_results_over_faquads_questions(faquad):
    whole, parts, evalset = faquad
    for question in evalset.questions[:100]:
        for search in (
            lambda k, q=question.text: whole.search(q, top_k=k).results,
            lambda k, q=question.text: search_bases(parts, q, top_k=k).results,
        ):
            five = [(r.base, r.chunk_id) for r in search(5)]
            wide = [(r.base, r.chunk_id) for r in search(25)]
            assert wide[:5] == five, question.text


def test_the_verbatim_file_and_the_vacation_passage_come_first_over_http(ranked):
    # POST /v1/search put four unrelated handbook passages above the file holding the sentence
    # verbatim, and a medical guide's question above the handbook's vacation passage.
    with served([f"{name}={path}" for name, path in ranked.items()]) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/search"
        for fusion in ("relative", "rrf", None):
            verbatim = httpx.post(
                url,
                json={
                    "question": "Todos los seres humanos nacen libres",
                    "bases": ["real", "handbook"],
                    **({"fusion": fusion} if fusion else {}),
                },
                timeout=60,
            )
            assert verbatim.status_code == 200, verbatim.text
            first = verbatim.json()["results"][0]
            assert (first["base"], first["citation"]["document"]) == (
                "real",
                "derechos/articulo-1-en-siete-lenguas.html",
            ), fusion
            if fusion == "rrf":
                continue  # by rank, parental leave comes first by a hair, as in one base
            for bases in (["handbook", "medical"], ["medical", "handbook"]):
                body = {"question": "how many holidays do I get", "bases": bases}
                body |= {"fusion": fusion} if fusion else {}
                holidays = httpx.post(url, json=body, timeout=60)
                assert holidays.status_code == 200, holidays.text
                first = holidays.json()["results"][0]
                assert first["base"] == "handbook", (fusion, bases)
                assert first["citation"]["headings"][-1] == "Vacation", (fusion, bases)


# -- memory bases among others ----------------------------------------------------------------


@pytest.fixture
def team_and_docs(tmp_path):
    docs = words_only_base(tmp_path / "docs.db", EXAMPLES)
    docs.index()
    team = words_only_base(tmp_path / "team.db")
    team.configure(kind="memory")
    for fact in (
        "Bruno runs payroll.",
        "The office moves to Lisbon in May.",
        "Carla is on parental leave until March.",
        "Deploys freeze every Friday afternoon.",
        "The on-call rota changes weekly.",
    ):
        team.remember(fact, stated_at="2026-01-01")
    # The replaced fact says more of the question's words: by score alone it comes first.
    team.remember(
        "Ana works on the billing team; Ana's team is billing.",
        key="ana/team",
        stated_at="2026-01-05",
    )
    team.remember("Ana works on search now.", key="ana/team", stated_at="2026-06-01")
    yield {"docs": docs, "team": team}
    docs.close()
    team.close()


QUESTION = "which team does Ana work on"


def holding(results) -> list[bool]:
    return [r["fact"]["holds"] for r in results if r.get("fact")]


def test_each_memory_base_keeps_what_holds_first_among_other_bases(team_and_docs, tmp_path):
    alone = team_and_docs["team"].search(QUESTION, mode="keyword").results
    assert [r.fact.holds for r in alone] == [True, False]
    assert alone[1].scores.keyword > alone[0].scores.keyword  # holding first, not by score
    # top_k 60: every chunk of both bases, so that both facts are shown wherever they rank.
    several = search_bases(team_and_docs, QUESTION, mode="keyword", top_k=60)
    assert [r.fact.holds for r in several.results if r.fact] == [True, False]
    # The same through MCP's search tool and POST /v1/search.
    agent = Agent(team_and_docs)
    try:
        data = agent.call(
            "search", {"question": QUESTION, "mode": "keyword", "top_k": 60}, None
        ).data
    finally:
        agent.close()
    assert holding(data["results"]) == [True, False]
    with served([str(tmp_path / "docs.db"), str(tmp_path / "team.db")]) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1/search"
        body = {"question": QUESTION, "bases": ["docs", "team"], "mode": "keyword", "top_k": 60}
        for fusion in ("relative", "rrf"):
            response = httpx.post(url, json={**body, "fusion": fusion})
            assert response.status_code == 200, response.text
            assert holding(response.json()["results"]) == [True, False]
        refused = httpx.post(url, json={**body, "fusion": "max"})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "INVALID_REQUEST"
        # One base, fusion per search: by words alone, rrf's first scores 1 / (60 + 1) and
        # relative's, holding every word of the question, the whole words share.
        one = url.replace("/v1/search", "/v1/bases/docs/search")
        firsts = {
            fusion: httpx.post(one, json={"question": "travel expenses", "fusion": fusion}).json()[
                "results"
            ][0]["scores"]["fused"]
            for fusion in ("rrf", "relative")
        }
        assert firsts == {"rrf": pytest.approx(1 / 61, abs=1e-6), "relative": pytest.approx(0.5)}


@pytest.fixture
def budgets(tmp_path):
    """A memory base (embedded by words, word_models.py) of 60 facts each replaced by a newer
    one, whose replaced versions say "budget" twice in a few words, and 5 facts that hold and
    say it once in a long sentence: by score alone, replaced facts come first."""
    team = words_only_base(tmp_path / "budgets.db")
    team.configure(embedding=WORDS, kind="memory")
    for n in range(60):
        said = f"Project {n} budget budget approved by finance" + " and" * n + "."
        team.remember(said, key=f"project/{n}", stated_at="2026-01-01")
        team.remember(f"Project {n} closed.", key=f"project/{n}", stated_at="2026-02-01")
    notes = (  # five different texts: nearly the same ones would be one result (collapse.py)
        "the quarterly budget review moved to the north meeting room on the third floor",
        "whoever plans travel this spring asks finance first: the budget for trips is smaller",
        "the new hire laptops come out of the hardware budget that the board raised in March",
        "our team offsite in Porto stays within last year's budget, flights booked by Friday",
        "the budget dashboard now refreshes every night and mails a summary to each lead",
    )
    for n, note in enumerate(notes):
        team.remember(f"Note {n}: {note}, so plan ahead.", stated_at="2026-03-01")
    yield team
    team.close()


@pytest.mark.parametrize("mode", ["keyword", "hybrid"])
def test_a_memory_bases_first_results_do_not_move_with_top_k(budgets, team_and_docs, mode):
    # Holding first was applied to the fused candidates, whose number grows with top_k: top_k 5
    # showed three holding facts then two replaced ones, top_k 25 the five holding facts first.
    def places(answer):
        return [(r.base, r.chunk_id) for r in answer.results]

    for search in (
        lambda k: budgets.search("budget", mode=mode, top_k=k),
        lambda k: search_bases(
            {"docs": team_and_docs["docs"], "team": budgets}, "budget", mode=mode, top_k=k
        ),
    ):
        five, wide = search(5), search(25)
        assert places(wide)[:5] == places(five)
        holds = [r.fact.holds for r in wide.results if r.fact]
        assert holds[:5] == [True] * 5 and holds == sorted(holds, reverse=True)


def test_the_search_tool_takes_a_fusion(team_and_docs):
    agent = Agent(team_and_docs)
    try:
        data = agent.call("search", {"question": "travel expenses", "fusion": "rrf"}, None).data
        assert data["results"][0]["scores"]["fused"] == pytest.approx(1 / 61, abs=1e-6)
        with pytest.raises(InvalidRequest, match="fusion"):
            agent.call("search", {"question": "travel", "fusion": "max"}, None)
        assert TOOLS["search"]["inputSchema"]["properties"]["fusion"]["enum"] == ["relative", "rrf"]
    finally:
        agent.close()
