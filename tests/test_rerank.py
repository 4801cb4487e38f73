"""Reranking in a search: candidate counts, the reranker's order and scores, the fallback."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from loopback import Loopback, Quiet

from metis_lite.base.core import Base
from metis_lite.base.multi import search_bases
from metis_lite.records import Filters


class RerankServer:
    """A TEI-style (POST /rerank) and Cohere-style (POST /v1/rerank) reranker on loopback that
    scores by a rule the test knows (how often 'vacation' occurs) and records what it was sent."""

    def __init__(self, behaviour: str = "ok") -> None:
        self.behaviour = behaviour
        self.requests: list[dict] = []
        outer = self

        class Handler(Quiet):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body)
                texts = body.get("texts") or body.get("documents")
                scores = [t.lower().count("vacation") + 1 / (1 + len(t)) for t in texts]
                if outer.behaviour == "stall":
                    time.sleep(3)
                if outer.behaviour == "500":
                    return self._send(500, {"error": "boom"})
                if outer.behaviour == "drop":
                    self.connection.close()
                    return
                if outer.behaviour == "fewer":
                    scores = scores[:-1]
                pairs = [{"index": i, "score": s} for i, s in enumerate(scores)]
                if outer.behaviour == "out-of-range":
                    pairs[0]["index"] = len(texts) + 5
                if self.path == "/v1/rerank":
                    results = [{"index": p["index"], "relevance_score": p["score"]} for p in pairs]
                    return self._send(200, {"id": "x", "results": results})
                return self._send(200, sorted(pairs, key=lambda p: -p["score"]))

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.loopback = Loopback(Handler)
        self.server, self.url = self.loopback.server, self.loopback.url

    def close(self) -> None:
        self.loopback.close()


@pytest.fixture
def reranker():
    servers: list[RerankServer] = []

    def make(behaviour="ok"):
        servers.append(RerankServer(behaviour))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


@pytest.mark.parametrize("protocol", ["tei", "cohere"])
@pytest.mark.parametrize("top_k, sent", [(3, 20), (10, 30), (25, 46)])
def test_candidate_counts_and_order(example_base, reranker, protocol, top_k, sent):
    server = reranker()
    spec = (
        {"provider": "tei", "url": server.url}
        if protocol == "tei"
        else {"provider": "cohere", "url": server.url + "/v1", "model": "rerank-test"}
    )
    example_base.configure(reranker=spec)
    answer = example_base.search("vacation days off", top_k=top_k)
    # 3 × top_k within 20–50; the example holds 46 chunks, so 25 → min(50, 46). A provider may
    # send them in several requests (TEI's client batch is 32).
    texts = [t for r in server.requests for t in (r.get("texts") or r.get("documents"))]
    assert len(texts) == sent
    assert answer.reranked and not answer.warnings
    scores = [r.scores.rerank for r in answer.results]
    assert None not in scores and scores == sorted(scores, reverse=True)
    assert [r.score for r in answer.results] == scores
    assert len(answer.results) == min(top_k, 46)
    # The reranker reads a chunk as it is embedded: title and headings in front.
    assert any(
        t.startswith("Leave policy > Handbook > Leave policy > Vacation\n\n")
        or " > Vacation\n\n" in t
        for t in texts
    )
    assert "vacation" in answer.results[0].text.lower()


def test_no_rerank_and_single_modes(example_base, reranker):
    server = reranker()
    example_base.configure(reranker={"provider": "tei", "url": server.url})
    plain = example_base.search("vacation", rerank=False)
    assert not plain.reranked and all(r.scores.rerank is None for r in plain.results)
    assert [r.score for r in plain.results] == [r.scores.fused for r in plain.results]
    for mode in ("dense", "keyword"):
        answer = example_base.search("vacation", mode=mode, filters=Filters(kinds=("md",)))
        assert answer.reranked and answer.results[0].scores.rerank is not None


@pytest.mark.parametrize("behaviour", ["stall", "500", "drop", "fewer", "out-of-range"])
def test_a_failing_reranker_leaves_the_fused_order_with_the_warning(
    example_base, reranker, behaviour
):
    server = reranker(behaviour)
    example_base.configure(reranker={"provider": "tei", "url": server.url, "timeout_s": 1})
    fused = example_base.search("vacation days", rerank=False)
    answer = example_base.search("vacation days")
    assert not answer.reranked
    assert [w.code for w in answer.warnings] == ["RERANKER_UNAVAILABLE"]
    assert answer.warnings[0].message.endswith(": results in the fused order")
    assert [r.chunk_id for r in answer.results] == [r.chunk_id for r in fused.results]
    assert all(r.scores.rerank is None for r in answer.results)
    if behaviour == "stall":
        assert answer.took.rerank >= 900  # the time spent waiting is shown


def test_several_bases_rerank_together_only_with_one_reranker(
    example_base, example_base_file, reranker, tmp_path
):
    server = reranker()
    spec = {"provider": "tei", "url": server.url}
    example_base.configure(reranker=spec)
    shutil.copy(example_base_file, tmp_path / "other.db")
    with Base(tmp_path / "other.db") as other:
        other.configure(reranker=spec)
        bases = {"a": example_base, "b": other}
        answer = search_bases(bases, "vacation days off", top_k=10, collapse=False)
        assert answer.reranked and not answer.warnings
        scores = [r.scores.rerank for r in answer.results]
        assert None not in scores and scores == sorted(scores, reverse=True)
        assert [r.score for r in answer.results] == scores
        assert {r.base for r in answer.results} == {"a", "b"}  # one pool for both bases
        other.configure(reranker=None)
        mixed = search_bases(bases, "vacation days off", top_k=10)
    assert not mixed.reranked
    assert [(w.base, w.code) for w in mixed.warnings] == [("a", "RERANKER_NOT_SHARED")]
    assert [r.score for r in mixed.results] == [r.scores.fused for r in mixed.results]
