"""Search on the shipped example with the embedded model: the modes, the score fields, filters
before ranking, and docs/how-search-works.md's table of what happens when a model does not
answer."""

from __future__ import annotations

import math
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from conftest import FIXTURES, ROOT, add_passages

from metis_lite.base.core import Base
from metis_lite.errors import EmbeddingModelUnavailable, InvalidRequest
from metis_lite.records import Filters
from metis_lite.retrieval import keyword
from metis_lite.retrieval.dense import VectorIndex
from metis_lite.retrieval.search import SearchContext, candidates, rerank_count, search
from metis_lite.service.serialize import answer_to_json
from metis_lite.settings import RRF_K
from metis_lite.store import Store

SAME_MODEL_AT = "multilingual-e5-small"  # the label of the embedded model's vectors


def test_by_meaning_finds_what_words_miss(example_base):
    answer = example_base.search("how many holidays do I get", top_k=3)
    vacation = [r for r in answer.results if "25 days of paid vacation" in r.text]
    assert vacation, [r.text[:60] for r in answer.results]
    assert vacation[0].citation.document == "policies/leave.md"
    assert vacation[0].citation.headings == ("Handbook", "Leave policy", "Vacation")
    # It shares no word with the question but "how"/"do"/"get"-like ones: meaning finds it first.
    assert vacation[0].scores.dense_rank == 1
    assert answer.mode == "hybrid" and not answer.reranked and not answer.warnings


def test_by_words_finds_accented_text_and_codes(example_base):
    proxy = example_base.search("configuracao do proxy", mode="keyword", top_k=3).results
    assert "Configuração" in proxy[0].text or "configuração" in proxy[0].text
    for code in ("Xid 79", "PO-2231"):
        top = example_base.search(code, mode="keyword").results[0]
        assert code.lower() in top.text.lower()
        assert top.scores.keyword_rank == 1 and top.scores.dense is None


class FixedEmbedder:
    """An embedding model that answers one chosen vector, so every cosine is known."""

    name = "hand-model"

    def __init__(self, vector: list[float]) -> None:
        self.vector = np.asarray(vector, dtype=np.float32)

    def embed(self, texts):
        return np.stack([self.vector for _ in texts])

    def close(self) -> None:
        pass


def test_relative_fusion_of_a_base_whose_scores_are_known(tmp_path):
    # Four chunks of four words each; "alpha" is in the third only. By words: N = 4, n = 1,
    # every chunk of average length, so its BM25 is FTS5's idf ln(3.5 / 1.5), and so is the
    # score of a chunk holding the question's word once: the third holds the whole question.
    # By meaning (2-d vectors, the question (0.8, 0.6)): cosines 0.8, 1.0, 0.96, 0.6; the
    # unrelated level is their mean, 0.84; the best is 0.16 above it.
    # Fused = 0.5 × max(0, (cosine - 0.84) / 0.16) + 0.5 × (share of the question's words).
    with Store(tmp_path / "hand.db", create=True) as store:
        source = store.add_source("hand", str(tmp_path))
        texts = [
            "red green blue gray",
            "pink teal cyan lime",
            "alpha navy gold plum",
            "rose sand jade ruby",
        ]
        add_passages(store, texts, source_id=source)
        vectors = [(1.0, 0.0), (0.8, 0.6), (0.6, 0.8), (0.0, 1.0)]
        store.put_vectors(
            "hand-model", [(i + 1, np.asarray(v, np.float32)) for i, v in enumerate(vectors)]
        )
        context = SearchContext(
            store=store,
            vectors=VectorIndex("hand-model"),
            embedder=lambda: FixedEmbedder([0.8, 0.6]),
            reranker=lambda: None,
        )
        answer = search(context, "alpha", top_k=4)
    assert [r.text for r in answer.results] == [texts[2], texts[1], texts[0], texts[3]]
    third, second, *_ = answer.results
    assert third.scores.keyword == pytest.approx(math.log(3.5 / 1.5), rel=1e-6)
    assert third.scores.fused == pytest.approx(0.5 * 0.75 + 0.5 * 1.0)
    assert second.scores.fused == pytest.approx(0.5 * 1.0)
    assert [r.scores.fused for r in answer.results[2:]] == [0.0, 0.0]  # below the crowd: by id


def test_the_bm25_of_chunks_the_words_list_did_not_reach_is_the_score_it_would_give(
    example_base,
):
    # Relative fusion scores each chunk the list by meaning found on words too: the score
    # looked up must be the one a list read deep enough would show.
    store = example_base.store
    for question in ("travel expenses for a trip", "how many holidays do I get", "Xid 79"):
        everything = {h.chunk_id: h.score for h in keyword.search(store, question, 1000)}
        wanted = sorted(everything)[::2] + [10**9]  # a chunk id no chunk has: no score
        assert keyword.scores_of(store, question, wanted) == {
            c: everything[c] for c in wanted if c in everything
        }


def test_a_page_marker_does_not_win_by_meaning(tmp_path):
    # A statute in one <pre> (tests/fixtures/ranking): cut at its blank lines alone, its page
    # markers `[[Page 115 STAT. 281]]` were chunks of their own, whose vectors are mostly the
    # document's title, and they came first and second by meaning for "dirección".
    folder = tmp_path / "laws"
    folder.mkdir()
    shutil.copy(FIXTURES / "ranking" / "statute-pre.htm", folder)
    with Base(tmp_path / "laws.db", create=True) as base:
        base.add_source(folder)
        base.index()
        for mode in ("dense", "hybrid"):
            first = base.search("dirección", mode=mode, top_k=3).results
            assert all(len(r.text) >= 150 for r in first), [r.text[:40] for r in first]


def test_score_fields_as_the_spec_says(example_base):
    answer = example_base.search("paid vacation days", top_k=10, fusion="rrf")
    payload = answer_to_json(answer)
    assert set(payload) == {"mode", "reranked", "warnings", "took", "results"}
    assert set(payload["took"]) == {"embed", "dense", "keyword", "fuse", "rerank", "total"}
    for result in payload["results"]:
        scores = result["scores"]
        expected = sum(
            1 / (RRF_K + scores[k]) for k in ("dense_rank", "keyword_rank") if k in scores
        )
        assert scores["fused"] == pytest.approx(expected, abs=1e-6)
        assert result["score"] == scores["fused"]
        assert ("dense" in scores) == ("dense_rank" in scores)
        assert ("keyword" in scores) == ("keyword_rank" in scores)
        assert "rerank" not in scores
        citation = result["citation"]
        assert set(citation) == {
            "source",
            "document",
            "title",
            "kind",
            "page",
            "line",
            "headings",
            "snippet",
        }
        assert len(citation["snippet"]) <= 240
    assert [r["score"] for r in payload["results"]] == sorted(
        (r["score"] for r in payload["results"]), reverse=True
    )


def test_modes_use_one_retriever_each(example_base):
    dense = example_base.search("expenses for travel", mode="dense").results
    assert dense and all(r.scores.keyword is None and r.scores.dense is not None for r in dense)
    words = example_base.search("expenses for travel", mode="keyword").results
    assert words and all(r.scores.dense is None and r.scores.keyword is not None for r in words)


def test_citations_point_at_pages_and_lines(example_base):
    pdf = example_base.search("Xid 79", mode="keyword", filters=Filters(kinds=("pdf",))).results
    for result in pdf:
        assert (
            result.citation.kind == "pdf"
            and result.citation.page >= 1
            and result.citation.line is None
        )
    md = example_base.search("vacation", mode="keyword", filters=Filters(kinds=("md",))).results
    source = (
        (ROOT / "examples" / "handbook" / md[0].citation.document)
        .read_text(encoding="utf-8")
        .splitlines()
    )
    first_line = md[0].text.splitlines()[0]
    assert source[md[0].citation.line - 1].strip() == first_line.strip()


@pytest.mark.parametrize("mode", ["hybrid", "dense", "keyword"])
def test_filters_apply_before_ranking(example_base, mode):
    everything = example_base.search("policy", mode=mode, top_k=50).results
    kept = example_base.search(
        "policy", mode=mode, top_k=5, filters=Filters(path_prefix="policies/")
    ).results
    assert kept and all(r.citation.document.startswith("policies/") for r in kept)
    in_prefix = [r for r in everything if r.citation.document.startswith("policies/")]
    assert len(kept) == min(5, len(in_prefix)) or len(kept) == 5
    kinds = example_base.search("policy", mode=mode, filters=Filters(kinds=("pdf", "docx"))).results
    assert kinds and {r.citation.kind for r in kinds} <= {"pdf", "docx"}
    nothing = example_base.search("policy", mode=mode, filters=Filters(sources=("no-such-source",)))
    assert nothing.results == ()
    assert [w.code for w in nothing.warnings][-1:] == ["NO_MATCHING_DOCUMENTS"]
    assert "no-such-source" in nothing.warnings[-1].message


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_prefix_as_results_show_it(example_base, mode):
    """`source/path/` (as results show it) keeps what `path/` keeps."""
    source = example_base.search("policy", mode=mode).results[0].citation.source
    inside = example_base.search("policy", mode=mode, filters=Filters(path_prefix="policies/"))
    shown = example_base.search(
        "policy", mode=mode, filters=Filters(path_prefix=f"{source}/policies/")
    )
    assert shown.results and shown.results == inside.results
    assert "NO_MATCHING_DOCUMENTS" not in [w.code for w in shown.warnings + inside.warnings]
    for prefix in ("nowhere/", f"{source}/nowhere/", f"{source}policies/"):
        answer = example_base.search("policy", mode=mode, filters=Filters(path_prefix=prefix))
        assert answer.results == ()
        assert "NO_MATCHING_DOCUMENTS" in [w.code for w in answer.warnings]


def test_candidate_counts():
    assert candidates(10) == 50 and candidates(25) == 100
    assert [rerank_count(k) for k in (3, 10, 25, 1, 100)] == [20, 30, 50, 20, 50]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"mode": "fuzzy"},
        {"top_k": 0},
        {"top_k": 101},
        {"top_k": True},
        {"top_k": "5"},
        {"filters": Filters(kinds=("exe",))},
    ],
)
def test_bad_requests_are_refused_clearly(example_base, kwargs):
    with pytest.raises(InvalidRequest):
        example_base.search("anything", **kwargs)


@pytest.mark.parametrize(
    "question", ["", "   ", '"', "x-ray AND NOT (", "NEAR(a b)", "*", "col:term"]
)
def test_hostile_questions_answer(example_base, question):
    answer = example_base.search(question)
    assert isinstance(answer.results, tuple)


# -- when a model does not answer ------------------------------------------------------------


def test_embedding_model_down_means_words_only_with_the_warning(example_base):
    example_base.configure(
        embedding={"provider": "tei", "url": "http://127.0.0.1:9", "model": SAME_MODEL_AT}
    )
    answer = example_base.search("vacation days")
    assert [w.code for w in answer.warnings] == ["EMBEDDING_MODEL_UNAVAILABLE"]
    assert answer.warnings[0].message.endswith(": results by keywords only")
    assert answer.results and all(r.scores.dense is None for r in answer.results)
    with pytest.raises(EmbeddingModelUnavailable):
        example_base.search("vacation days", mode="dense")
    assert example_base.search("vacation days", mode="keyword").warnings == ()


class _Stall(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        time.sleep(3)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_a_model_past_its_deadline_is_down(example_base):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stall)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        example_base.configure(
            embedding={"provider": "tei", "url": url, "model": SAME_MODEL_AT, "timeout_s": 1}
        )
        started = time.monotonic()
        answer = example_base.search("vacation days")
        assert time.monotonic() - started < 2.5
        assert answer.warnings[0].code == "EMBEDDING_MODEL_UNAVAILABLE"
        assert answer.results
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_chunks_indexed_while_the_model_was_down_get_vectors_on_the_next_run(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    src = tmp_path / "src"
    src.mkdir()
    (src / "leave.md").write_text(
        "# Leave\n\nEvery employee gets 25 days of paid vacation a year.\n"
    )
    (src / "gpu.md").write_text("# GPUs\n\nXid 79 means the GPU fell off the bus.\n")
    with Base(tmp_path / "b.db", create=True) as base:
        base.configure(embedding={"provider": "tei", "url": url, "timeout_s": 2})
        base.add_source(src)
        report = base.index()
        assert (
            report.without_vector == 2 and report.warnings[0].code == "EMBEDDING_MODEL_UNAVAILABLE"
        )
        answer = base.search("how many holidays do I get")
        assert [w.code for w in answer.warnings] == ["NO_VECTORS"]
        assert answer.warnings[0].message == (
            "no chunk has a vector yet (indexed while the embedding model did not answer): results by keywords"
        )
        assert base.status().chunks_without_vector == 2
        server = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "models", "serve", "--port", str(port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            _wait_for_ready(server)
            report = base.index()
            assert report.embedded == 2 and report.without_vector == 0 and not report.warnings
            answer = base.search("how many holidays do I get")
            assert answer.warnings == ()
            assert answer.results[0].citation.document == "leave.md"
            assert answer.results[0].scores.dense_rank == 1
        finally:
            server.terminate()
            server.wait(timeout=10)
            server.stderr.close()


def _wait_for_ready(server: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until the model server says "ready on URL": it listens at once, answering 503 while
    its model loads, which on a loaded machine can outlast a batch's deadline."""
    ready, _, _ = select.select([server.stderr], [], [], timeout)
    while ready:
        line = server.stderr.readline()
        if not line or line.startswith("ready on "):
            break
        ready, _, _ = select.select([server.stderr], [], [], timeout)
    assert ready and line.startswith("ready on "), f"the model server did not load: {line!r}"


def test_empty_states(tmp_path):
    with Base(tmp_path / "new.db", create=True) as base:
        answer = base.search("anything")
        assert [w.code for w in answer.warnings] == ["NOTHING_INDEXED_YET"]
        assert answer.warnings[0].message.startswith("nothing is indexed yet: the index is ")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "image.png").write_bytes(b"\x89PNG")
    with Base(tmp_path / "nothing.db", create=True) as base:
        base.add_source(empty)
        base.index()
        answer = base.search("anything")
        assert [w.code for w in answer.warnings] == ["NO_DOCUMENTS"]
        assert answer.warnings[0].message.startswith(
            "nothing is indexed: the sources hold no document"
        )


def test_the_handbook_answers_its_own_question(example_base):
    # README's example: by meaning the vacation passage is first; by words only "get" and "do"
    # match (no chunk says "holidays"). The default fusion keeps the weak words' list from
    # outweighing the best by meaning; the snippet shows the sentence with the number of days.
    answer = example_base.search("how many holidays do I get")
    first = answer.results[0]
    assert first.citation.headings[-1] == "Vacation"
    assert first.scores.dense_rank == 1
    assert "25 days of paid vacation" in first.citation.snippet
    # Under reciprocal-rank fusion the first place of the weak list by words weighs
    # as much as the first by meaning: the parental-leave passage, first by words and not near
    # the top by meaning, climbs level with the vacation passage (docs/how-search-works.md).
    by_rank = example_base.search("how many holidays do I get", fusion="rrf")
    two = {r.citation.headings[-1]: r for r in by_rank.results[:2]}
    assert set(two) == {"Vacation", "Parental leave"}
    assert two["Parental leave"].scores.keyword_rank == 1
    assert two["Parental leave"].scores.dense_rank > 3
    assert answer.results[1].citation.headings[-1] != "Vacation"  # the default: no doubt
    example_base.configure(fusion="rrf")  # the base's own setting (index --fusion rrf)
    assert example_base.search("how many holidays do I get").results == by_rank.results
    with pytest.raises(InvalidRequest):
        example_base.configure(fusion="max")
    with pytest.raises(InvalidRequest):
        example_base.search("holidays", fusion="max")
