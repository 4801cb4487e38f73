"""The index service: real server processes on 127.0.0.1 with real bases.

Two processes serve this module: `tokens_server` (tokens from METIS_TOKENS, a base made with the
embedded model and a base searched by words only) and `open_server` (no tokens, loopback, a
2,000-file folder not indexed yet, a short request deadline). Mechanics that need to reach
inside (a full queue, an unexpected error, the console's files, polling) run on an in-process
server made by `make_server` on port 0.
"""

from __future__ import annotations

import functools
import json
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from serving import Service, serve, served, stop

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.http.messages import SearchBasesBody, SearchBody, decode
from metis_lite.http.run import make_server
from metis_lite.service.access import TOKENS_ENV
from metis_lite.service.serialize import answer_to_json

TOKEN_ALL = "all-bases-token-0123456789abcdef"
TOKEN_HANDBOOK = "handbook-only-token-0123456789ab"
TOKEN_WORDS = "words-only-token-0123456789abcde"
TOKENS = {
    "tokens": [
        {"token": TOKEN_ALL, "bases": ["*"]},
        {"token": TOKEN_HANDBOOK, "bases": ["handbook"]},
        {"token": TOKEN_WORDS, "bases": ["words"]},
    ]
}
SECRET = "zanzibar quokkas 4711 marmalade"
"""A question whose words appear in no document: it must never reach a file or a log."""

http = httpx.Client(timeout=60)
"""One client for the module (a new httpx client per request costs more than the request)."""

BIG_FILES = 2_000
STARTUP_S = 60


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


Server = Service
start_server = serve
stop_server = stop


def raw_request(port: int, data: bytes, *, timeout: float = 10.0) -> bytes:
    """Send bytes as they are and read the whole answer (the server closes after one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def body_of(answer: bytes) -> dict:
    return json.loads(answer.partition(b"\r\n\r\n")[2])


def error_code(response: httpx.Response) -> str:
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    return response.json()["error"]["code"]


# -- fixtures -------------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def close_http_client():
    yield
    http.close()


@pytest.fixture(scope="module")
def tokens_server(tmp_path_factory, example_base_file):
    folder = tmp_path_factory.mktemp("tokens-server")
    handbook = folder / "handbook.db"
    shutil.copy(example_base_file, handbook)
    with words_only_base(folder / "other.db", EXAMPLES) as words:
        words.index()
    server = start_server(
        folder,
        str(handbook),
        f"words={folder / 'other.db'}",
        "--poll",
        "0",
        env={TOKENS_ENV: json.dumps(TOKENS)},
    )
    server.folder = folder  # type: ignore[attr-defined]
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("open-server")
    big = folder / "big-folder"
    big.mkdir()
    for n in range(BIG_FILES):
        (big / f"note-{n:04d}.txt").write_text(
            f"Note {n}\n\nThe quarterly report number {n} mentions widget {n % 97} "
            f"and the gadget line {n % 13}.\n",
            encoding="utf-8",
        )
    with words_only_base(folder / "big.db", big):
        pass  # a base with its source, not indexed yet
    with words_only_base(folder / "live.db", EXAMPLES) as live:
        live.index()
    server = start_server(
        folder,
        str(folder / "big.db"),
        str(folder / "live.db"),
        "--poll",
        "0",
        "--request-timeout",
        "2",
        "--no-access-log",
    )
    yield server
    stop_server(server)


@pytest.fixture
def small_base(tmp_path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text("# Alpha\n\nThe alpha passage names Xid 79.\n", "utf-8")
    (folder / "b.txt").write_text("Beta\n\nThe beta passage is about travel.\n", "utf-8")
    with words_only_base(tmp_path / "small.db", folder) as base:
        base.index()
    return tmp_path / "small.db"


@pytest.fixture
def in_process(small_base, tmp_path):
    """Start an in-process server over `small_base` with the given options."""
    with ExitStack() as stack:
        yield lambda **options: stack.enter_context(served([str(small_base)], **options))


# -- every endpoint -------------------------------------------------------------------------


def test_health_needs_no_token(tokens_server):
    response = http.get(f"{tokens_server.url}/v1/health")
    assert response.status_code == 200
    assert response.json() == {  # without a token: how many bases are open, never their names
        "status": "ok",
        "version": "0.1.0",
        "read_only": False,
        "open": 2,
        "unavailable": 0,
    }
    told = http.get(f"{tokens_server.url}/v1/health", headers=auth(TOKEN_HANDBOOK)).json()
    assert [(base["name"], base["open"]) for base in told["bases"]] == [("handbook", True)]
    assert told["bases"][0]["copy"]["path"].endswith("handbook.db")
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["content-type"] == "application/json; charset=utf-8"


def test_bases_lists_what_each_token_may_see(tokens_server):
    every = http.get(f"{tokens_server.url}/v1/bases", headers=auth(TOKEN_ALL)).json()["bases"]
    assert [b["name"] for b in every] == ["handbook", "words"]
    handbook = every[0]
    assert handbook["state"] == "Waiting" and handbook["documents"] > 5
    assert handbook["chunks_without_vector"] == 0 and handbook["embedding"]
    assert every[1]["chunks_without_vector"] == every[1]["chunks"]
    for key in ("kind", "sources", "chunks", "reranker", "searches_per_day"):
        assert key in handbook
    scoped = http.get(f"{tokens_server.url}/v1/bases", headers=auth(TOKEN_HANDBOOK)).json()
    assert [b["name"] for b in scoped["bases"]] == ["handbook"]


def test_search_one_base_is_the_libraries_answer(tokens_server):
    body = {"question": "Xid 79", "mode": "keyword", "top_k": 3, "rerank": False}
    response = http.post(
        f"{tokens_server.url}/v1/bases/words/search", json=body, headers=auth(TOKEN_WORDS)
    )
    assert response.status_code == 200
    served = response.json()
    with Base(tokens_server.folder / "other.db") as base:
        direct = answer_to_json(base.search("Xid 79", mode="keyword", top_k=3, rerank=False))
    served.pop("took"), direct.pop("took")
    assert served == direct
    assert served["results"][0]["scores"]["keyword_rank"] == 1
    assert "base" not in served["results"][0]


def test_search_by_meaning_and_with_filters(tokens_server):
    url = f"{tokens_server.url}/v1/bases/handbook/search"
    meaning = http.post(
        url,
        json={"question": "how many holidays do I get", "mode": "dense"},
        headers=auth(TOKEN_ALL),
    ).json()
    assert meaning["mode"] == "dense" and meaning["results"][0]["scores"]["dense_rank"] == 1
    filtered = http.post(
        url,
        json={
            "question": "travel",
            "filters": {"path_prefix": "policies/", "kinds": ["md"], "sources": ["handbook"]},
        },
        headers=auth(TOKEN_ALL),
    ).json()
    assert filtered["results"]
    for result in filtered["results"]:
        assert result["citation"]["document"].startswith("policies/")
        assert result["citation"]["kind"] == "md"
    shown = {"question": "travel", "filters": {"path_prefix": "handbook/policies/"}}
    as_shown = http.post(url, json=shown, headers=auth(TOKEN_ALL)).json()
    assert as_shown["results"] and not as_shown["warnings"]
    nowhere = {"question": "travel", "filters": {"sources": ["nope"]}}
    none = http.post(url, json=nowhere, headers=auth(TOKEN_ALL)).json()
    assert none["results"] == [] and none["warnings"][0]["code"] == "NO_MATCHING_DOCUMENTS"


def test_search_several_bases_merges_and_names_each_base(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_ALL)
    response = http.post(
        f"{url}/v1/search",
        json={
            "question": "Xid 79 GPU",
            "bases": ["handbook", "words"],
            "mode": "keyword",
            "top_k": 6,
            "collapse": False,  # each base's copy of a passage a result of its own
        },
        headers=token,
    )
    assert response.status_code == 200
    merged = response.json()
    assert set(merged) == {"mode", "reranked", "warnings", "took", "results"}
    assert merged["mode"] == "keyword" and merged["reranked"] is False
    assert set(merged["took"]) == {"embed", "dense", "keyword", "fuse", "rerank", "total"}
    results = merged["results"]
    # The two bases hold the same documents: equal fused scores, ties in the order asked.
    assert [r["base"] for r in results] == ["handbook", "words"] * 3
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True) and scores[0] == scores[1]
    assert all(r["score"] == r["scores"]["fused"] for r in results)
    assert results[0]["text"] == results[1]["text"]

    hybrid = http.post(
        f"{url}/v1/search",
        json={"question": "Xid 79 GPU", "bases": ["words", "handbook"], "top_k": 4},
        headers=token,
    ).json()
    assert hybrid["mode"] == "hybrid"
    # found by meaning and by words (handbook) fuses above by words alone (words)
    assert hybrid["results"][0]["base"] == "handbook"
    warnings = hybrid["warnings"]
    assert warnings and {w["base"] for w in warnings} == {"words"}
    assert all(w["message"].startswith("words: ") for w in warnings)


def test_index_starts_now_and_is_refused_while_running(open_server):
    """POST index starts the 2,000-file folder; a second is 409; searches answer meanwhile."""
    url = open_server.url
    started = http.post(f"{url}/v1/bases/big/index", json={})
    assert started.status_code == 202 and started.json() == {"state": "Indexing"}
    again = http.post(f"{url}/v1/bases/big/index", headers={"Content-Type": "application/json"})
    assert again.status_code == 409 and error_code(again) == "BASE_BUSY"

    answered_while_indexing = 0
    found = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        before = http.get(f"{url}/v1/bases").json()["bases"][0]
        if before["state"] != "Indexing":
            break
        response = http.post(
            f"{url}/v1/bases/big/search", json={"question": "quarterly report widget 5"}
        )
        assert response.status_code == 200, response.text
        found.add(len(response.json()["results"]))
        after = http.get(f"{url}/v1/bases").json()["bases"][0]
        answered_while_indexing += after["state"] == "Indexing"
    assert answered_while_indexing >= 1
    final = http.get(f"{url}/v1/bases").json()["bases"][0]
    assert final["state"] == "Waiting" and final["documents"] == BIG_FILES
    assert final["last_indexing"]["state"] == "done"
    assert http.post(f"{url}/v1/bases/big/index", json={}).status_code == 202


def test_index_needs_no_body_and_the_base_shows_indexing(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_ALL)
    started = http.post(f"{url}/v1/bases/words/index", headers=token)  # no body, no type
    assert started.status_code == 202
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        words = http.get(f"{url}/v1/bases", headers=token).json()["bases"][1]
        if words["state"] == "Waiting":
            break
        time.sleep(0.1)
    assert words["state"] == "Waiting" and words["last_indexing"]["state"] == "done"


# -- errors ---------------------------------------------------------------------------------

BAD_BODIES = [
    b"",
    b"{",
    b"[]",
    b'"question"',
    b"\xff\xfe",
    b'{"question": "x", "question": "y"}',
    b'{"question": "x", "top_k": NaN}',
    b'{"question": "\\ud800"}',
    b"[" * 5000 + b"]" * 5000,
    json.dumps({}).encode(),
    json.dumps({"question": 3}).encode(),
    json.dumps({"question": None}).encode(),
    json.dumps({"question": "x", "colour": "red"}).encode(),
    json.dumps({"question": "x", "mode": "fuzzy"}).encode(),
    json.dumps({"question": "x", "mode": 1}).encode(),
    json.dumps({"question": "x", "top_k": 0}).encode(),
    json.dumps({"question": "x", "top_k": 101}).encode(),
    json.dumps({"question": "x", "top_k": True}).encode(),
    json.dumps({"question": "x", "top_k": 2.5}).encode(),
    json.dumps({"question": "x", "top_k": "3"}).encode(),
    json.dumps({"question": "x", "rerank": "yes"}).encode(),
    json.dumps({"question": "x", "rerank": 1}).encode(),
    json.dumps({"question": "x", "filters": []}).encode(),
    json.dumps({"question": "x", "filters": None}).encode(),
    json.dumps({"question": "x", "filters": {"folder": "a/"}}).encode(),
    json.dumps({"question": "x", "filters": {"path_prefix": 1}}).encode(),
    json.dumps({"question": "x", "filters": {"path_prefix": None}}).encode(),
    json.dumps({"question": "x", "filters": {"kinds": "md"}}).encode(),
    json.dumps({"question": "x", "filters": {"kinds": ["exe"]}}).encode(),
    json.dumps({"question": "x", "filters": {"sources": [1]}}).encode(),
    json.dumps({"question": "x", "bases": ["handbook"]}).encode(),
]


@pytest.mark.parametrize("body", BAD_BODIES, ids=range(len(BAD_BODIES)))
def test_a_bad_search_body_is_400(tokens_server, body):
    response = http.post(
        f"{tokens_server.url}/v1/bases/words/search",
        content=body,
        headers={**auth(TOKEN_ALL), "Content-Type": "application/json"},
    )
    assert response.status_code == 400, response.text
    assert error_code(response) == "INVALID_REQUEST"


@pytest.mark.parametrize(
    "body",
    [
        {"question": "x"},
        {"question": "x", "bases": []},
        {"question": "x", "bases": "words"},
        {"question": "x", "bases": ["words", "words"]},
        {"question": "x", "bases": [1]},
    ],
)
def test_a_bad_several_bases_body_is_400(tokens_server, body):
    response = http.post(f"{tokens_server.url}/v1/search", json=body, headers=auth(TOKEN_ALL))
    assert response.status_code == 400 and error_code(response) == "INVALID_REQUEST"


def test_not_found_wrong_method_and_media_type(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_ALL)
    for response in (
        http.post(f"{url}/v1/bases/nope/search", json={"question": "x"}, headers=token),
        http.post(f"{url}/v1/bases/nope/index", json={}, headers=token),
        http.post(f"{url}/v1/search", json={"question": "x", "bases": ["nope"]}, headers=token),
    ):
        assert response.status_code == 404 and error_code(response) == "BASE_NOT_FOUND"
    missing = http.get(f"{url}/v1/nothing", headers=token)
    assert missing.status_code == 404 and error_code(missing) == "NOT_FOUND"
    for method, path in (("DELETE", "/v1/bases"), ("GET", "/v1/search"), ("PUT", "/v1/health")):
        wrong = http.request(method, f"{url}{path}", headers=token)
        assert wrong.status_code == 405 and error_code(wrong) == "METHOD_NOT_ALLOWED"
        assert wrong.headers["allow"]
    as_form = http.post(f"{url}/v1/bases/words/search", data={"question": "x"}, headers=token)
    assert as_form.status_code == 415 and error_code(as_form) == "UNSUPPORTED_MEDIA_TYPE"
    assert (
        http.post(f"{url}/v1/bases/words/index", json={"now": 1}, headers=token).status_code == 400
    )
    blank = {**token, "Content-Type": "application/json"}  # whitespace is no JSON body
    assert http.post(f"{url}/v1/bases/words/index", content=b" ", headers=blank).status_code == 400


def test_dense_without_its_model_is_503(tokens_server):
    for path, extra in (("/v1/bases/words/search", {}), ("/v1/search", {"bases": ["words"]})):
        response = http.post(
            f"{tokens_server.url}{path}",
            json={"question": "vacation", "mode": "dense", **extra},
            headers=auth(TOKEN_ALL),
        )
        assert response.status_code == 503
        assert error_code(response) == "EMBEDDING_MODEL_UNAVAILABLE"


def test_size_limits(tokens_server):
    url, port = tokens_server.url, tokens_server.port
    too_big = http.post(
        f"{url}/v1/bases/words/search",
        content=json.dumps({"question": "x" * 70_000}).encode(),
        headers={**auth(TOKEN_ALL), "Content-Type": "application/json"},
    )
    assert too_big.status_code == 413 and error_code(too_big) == "PAYLOAD_TOO_LARGE"
    long_headers = b"".join(b"X-Filler-%d: %s\r\n" % (n, b"y" * 1000) for n in range(20))
    answer = raw_request(
        port, b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + long_headers + b"\r\n"
    )
    assert status_of(answer) == 431 and body_of(answer)["error"]["code"] == "HEADERS_TOO_LARGE"
    long_line = raw_request(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")
    assert status_of(long_line) == 414
    chunked = raw_request(
        port,
        b"POST /v1/bases/words/search HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
        + TOKEN_ALL.encode()
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    assert status_of(chunked) == 411 and body_of(chunked)["error"]["code"] == "INVALID_REQUEST"
    garbage = raw_request(port, b"\x16\x03\x01 hello\r\n\r\n")
    assert status_of(garbage) == 400 and body_of(garbage)["error"]["code"] == "INVALID_REQUEST"


# -- tokens ---------------------------------------------------------------------------------


def test_no_or_unknown_token_is_401(tokens_server):
    url = tokens_server.url
    for headers in (
        {},
        auth("not-a-token-0123456789abcdef"),
        {"Authorization": TOKEN_ALL},
        {"Authorization": "Basic eDp5"},
    ):
        for response in (
            http.get(f"{url}/v1/bases", headers=headers),
            http.post(f"{url}/v1/bases/words/search", json={"question": "x"}, headers=headers),
            http.post(f"{url}/v1/bases/words/index", json={}, headers=headers),
        ):
            assert response.status_code == 401 and error_code(response) == "UNAUTHORIZED"
            assert response.headers["www-authenticate"].startswith("Bearer")


def test_a_token_for_one_base_cannot_use_another(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_WORDS)
    ok = http.post(f"{url}/v1/bases/words/search", json={"question": "travel"}, headers=token)
    assert ok.status_code == 200
    refused = [
        http.post(f"{url}/v1/bases/handbook/search", json={"question": "x"}, headers=token),
        http.post(f"{url}/v1/bases/handbook/index", json={}, headers=token),
        http.post(
            f"{url}/v1/search",
            json={"question": "x", "bases": ["words", "handbook"]},
            headers=token,
        ),
        # a base it may not use is refused whether or not it exists: names are not revealed
        http.post(f"{url}/v1/bases/secret-base/search", json={"question": "x"}, headers=token),
    ]
    for response in refused:
        assert response.status_code == 403 and error_code(response) == "FORBIDDEN"
    listed = http.get(f"{url}/v1/bases", headers=token).json()["bases"]
    assert [b["name"] for b in listed] == ["words"]


# -- privacy --------------------------------------------------------------------------------


def test_the_question_is_never_stored_nor_logged(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_ALL)
    asked = 0
    for path, body in (
        ("/v1/bases/handbook/search", {"question": SECRET}),
        ("/v1/bases/handbook/search", {"question": SECRET, "mode": "keyword"}),
        ("/v1/bases/words/search", {"question": SECRET}),
        ("/v1/search", {"question": SECRET, "bases": ["handbook", "words"]}),
    ):
        assert http.post(url + path, json=body, headers=token).status_code == 200
        asked += 1
    # refusals that carry the question
    http.post(f"{url}/v1/bases/words/search", json={"question": SECRET, "top_k": 0}, headers=token)
    http.post(
        f"{url}/v1/bases/words/search", json={"question": SECRET, "mode": "dense"}, headers=token
    )
    http.post(f"{url}/v1/bases/words/search", json={"question": SECRET * 3000}, headers=token)
    http.get(f"{url}/v1/bases?question=zanzibar+quokkas", headers=token)
    bases = http.get(f"{url}/v1/bases", headers=token).json()["bases"]
    counted = {b["name"]: sum(b["searches_per_day"].values()) for b in bases}
    assert counted["handbook"] >= 3 and counted["words"] >= 2

    words = [SECRET, "zanzibar", "quokkas", "marmalade"]
    output = tokens_server.output()
    assert '"POST /v1/bases/handbook/search" 200' in output  # the request log is there
    for word in words:
        assert word not in output
    for name in ("handbook.db", "handbook.db-wal", "other.db", "other.db-wal"):
        path = tokens_server.folder / name
        if path.exists():
            data = path.read_bytes()
            for word in words:
                assert word.encode() not in data, name


def test_an_unexpected_error_is_500_with_no_detail_and_no_question_logged(in_process, capfd):
    server = in_process()

    def broken(name, request):
        raise RuntimeError(f"failed on {request.question}")

    server.app.service.search = broken
    response = http.post(f"{server.url}/v1/bases/small/search", json={"question": SECRET})
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "INTERNAL_ERROR", "message": "internal error"}}
    logged = capfd.readouterr().err
    assert "RuntimeError" in logged and "Traceback" not in response.text
    assert "zanzibar" not in logged


# -- load and hostile clients ---------------------------------------------------------------


def test_many_concurrent_clients_all_answered(tokens_server):
    url, token = tokens_server.url, auth(TOKEN_ALL)
    calls = [
        ("POST", "/v1/bases/words/search", {"question": "travel expenses", "mode": "keyword"}),
        ("POST", "/v1/bases/handbook/search", {"question": "Xid 79", "mode": "keyword"}),
        ("POST", "/v1/bases/words/search", {"question": "vacation days", "top_k": 3}),
        (
            "POST",
            "/v1/search",
            {"question": "leave", "bases": ["handbook", "words"], "mode": "keyword"},
        ),
        ("GET", "/v1/bases", None),
        ("GET", "/v1/health", None),
    ]

    def client(n: int) -> list[int]:
        statuses = []
        with httpx.Client(timeout=60, headers=token) as http:
            for i in range(20):
                method, path, body = calls[(n + i) % len(calls)]
                statuses.append(http.request(method, url + path, json=body).status_code)
        return statuses

    with ThreadPoolExecutor(16) as pool:
        results = [f.result(timeout=240) for f in [pool.submit(client, n) for n in range(16)]]
    assert [s for statuses in results for s in statuses] == [200] * 16 * 20


def test_a_slow_client_does_not_block_others_and_is_cut_off(open_server):
    port = open_server.port
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
    try:
        for sock in slow:
            sock.sendall(b"POST /v1/bases/live/search HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        for _ in range(6):
            for sock in slow:
                try:
                    sock.sendall(b"z")
                except OSError:
                    pass
            response = http.post(
                f"{open_server.url}/v1/bases/live/search", json={"question": "travel"}, timeout=10
            )
            assert response.status_code == 200
        for sock in slow:
            answer = read_all(sock)  # the deadline (2 s here) ends it, whatever its pace
            assert status_of(answer) == 408
            assert body_of(answer)["error"]["code"] == "REQUEST_TIMEOUT"
    finally:
        for sock in slow:
            sock.close()


def test_a_full_queue_is_answered_503_at_once_and_half_sent_requests_hold_no_worker(in_process):
    server = in_process(workers=1, queue_size=1, request_timeout_s=1.5)
    service = server.app.service
    searched = service.search

    def slow(name, request):
        time.sleep(1.5)
        return searched(name, request)

    service.search = slow
    search = b'{"question": "alpha"}'
    post = (
        b"POST /v1/bases/small/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(search), search)
    )
    held = []
    try:
        for _ in range(3):  # half-sent heads: no worker is taken, so health still answers
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /v1/health HTTP/1.1\r\n")
            held.append(sock)
        with ThreadPoolExecutor(2) as pool:  # one holds the only worker, one waits in the queue
            running = [pool.submit(raw_request, server.port, post)]
            time.sleep(0.3)
            running.append(pool.submit(raw_request, server.port, post))
            time.sleep(0.3)
            started = time.monotonic()
            refused = raw_request(server.port, post)
            assert time.monotonic() - started < 1.0
            assert status_of(refused) == 503 and body_of(refused)["error"]["code"] == "SERVICE_BUSY"
            assert [status_of(f.result(timeout=30)) for f in running] == [200, 200]
        for sock in held:
            assert status_of(read_all(sock)) == 408
    finally:
        for sock in held:
            sock.close()
    assert http.get(f"{server.url}/v1/health").status_code == 200


# -- access rules at start, loopback, the console, polling ----------------------------------


def test_a_missing_base_is_an_error_at_start(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", "serve", str(tmp_path / "nothing.db"), "--port", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 2 and "no base at" in run.stderr and not run.stdout


def test_start_refusals(small_base, tmp_path):
    with pytest.raises(InvalidRequest, match="without access tokens"):
        make_server([str(small_base)], host="0.0.0.0", port=0, environ={})
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text(json.dumps(TOKENS), "utf-8")
    with pytest.raises(InvalidRequest, match="both"):
        make_server(
            [str(small_base)], port=0, tokens_file=str(tokens_file), environ={TOKENS_ENV: "{}"}
        )
    for bad in (
        '{"tokens": []}',
        "not json",
        '{"tokens": [{"token": "short", "bases": ["*"]}]}',
        '{"tokens": [{"token": "long-enough-token-1234", "bases": []}]}',
    ):
        tokens_file.write_text(bad, "utf-8")
        with pytest.raises(InvalidRequest):
            make_server([str(small_base)], port=0, tokens_file=str(tokens_file), environ={})
    with pytest.raises(InvalidRequest, match="two bases"):
        make_server([str(small_base), f"small={small_base}"], port=0, environ={})
    with pytest.raises(InvalidRequest, match="cannot name"):
        make_server([f"a/b={small_base}"], port=0, environ={})


def test_tokens_from_a_file(in_process, tmp_path):
    tokens_file = tmp_path / "tokens.json"
    tokens_file.write_text(
        json.dumps({"tokens": [{"token": TOKEN_WORDS, "bases": ["small"]}]}), "utf-8"
    )
    server = in_process(tokens_file=str(tokens_file))
    assert http.get(f"{server.url}/v1/bases").status_code == 401
    listed = http.get(f"{server.url}/v1/bases", headers=auth(TOKEN_WORDS))
    assert [b["name"] for b in listed.json()["bases"]] == ["small"]
    # with tokens, a request may name the service by any host name
    assert (
        http.get(f"{server.url}/v1/health", headers={"Host": "search.example"}).status_code == 200
    )


def test_without_tokens_only_loopback_names_are_answered(open_server):
    url = open_server.url
    assert http.get(f"{url}/v1/bases").status_code == 200
    rebound = http.get(f"{url}/v1/bases", headers={"Host": "evil.example:80"})
    assert rebound.status_code == 403 and error_code(rebound) == "FORBIDDEN"
    named = http.get(f"http://localhost:{open_server.port}/v1/health")
    assert named.status_code == 200


def test_the_console_is_served_as_static_files(in_process, tmp_path):
    console = tmp_path / "console"
    (console / "icons").mkdir(parents=True)
    (console / "index.html").write_text("<!doctype html><title>Metis</title>", "utf-8")
    (console / "app.js").write_text("console.log(1)", "utf-8")
    (console / "style.css").write_text("body {}", "utf-8")
    (console / "icons" / "logo.svg").write_text("<svg/>", "utf-8")
    (console / ".secret.html").write_text("hidden", "utf-8")
    (console / "notes.py").write_text("print(1)", "utf-8")
    (tmp_path / "outside.html").write_text("OUTSIDE-THE-CONSOLE", "utf-8")
    (console / "link.html").symlink_to(tmp_path / "outside.html")
    server = in_process(console_dir=console)
    url = server.url

    page = http.get(f"{url}/")
    assert page.status_code == 200 and "Metis" in page.text
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert page.headers["x-content-type-options"] == "nosniff"
    for path, kind in (
        ("/app.js", "text/javascript; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
        ("/icons/logo.svg", "image/svg+xml"),
    ):
        response = http.get(url + path)
        assert response.status_code == 200 and response.headers["content-type"] == kind
    for path in ("/icons/", "/icons", "/.secret.html", "/notes.py", "/link.html", "/missing.js"):
        assert http.get(url + path).status_code == 404, path
    for path in (
        b"/../outside.html",
        b"/%2e%2e/outside.html",
        b"/icons/..%2f..%2foutside.html",
        b"/%2e%2e%2foutside.html",
        b"/icons%2f..%2f..%2foutside.html",
    ):
        answer = raw_request(server.port, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status_of(answer) == 404 and b"OUTSIDE-THE-CONSOLE" not in answer
    assert http.post(f"{url}/app.js", content=b"").status_code == 405


def test_sources_are_kept_up_to_date_by_polling(in_process, tmp_path):
    server = in_process(poll_s=0.3)
    (tmp_path / "docs" / "c.md").write_text("# Gamma\n\nA flibbertigibbet passage.\n", "utf-8")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answer = http.post(
            f"{server.url}/v1/bases/small/search",
            json={"question": "flibbertigibbet", "mode": "keyword"},
        ).json()
        if answer["results"]:
            break
        time.sleep(0.2)
    assert answer["results"][0]["citation"]["document"] == "c.md"


# -- any body: a 400 or an answer, never anything else --------------------------------------

# Two levels of nesting, written out: st.recursive's extend check raised a spurious
# HypothesisDeprecationWarning in the full suite (warnings are errors here).
_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_LEVEL = (
    _LEAF | st.lists(_LEAF, max_size=4) | st.dictionaries(st.text(max_size=8), _LEAF, max_size=4)
)
JSON = (
    _LEVEL | st.lists(_LEVEL, max_size=4) | st.dictionaries(st.text(max_size=8), _LEVEL, max_size=4)
)
FIELD_VALUES = {
    "question": st.text(max_size=40),
    "mode": st.sampled_from(["hybrid", "dense", "keyword", "other"]),
    "top_k": st.integers(-2, 120) | st.floats(0, 120) | st.booleans(),
    "rerank": st.booleans() | st.none(),
    "filters": st.fixed_dictionaries(
        {},
        optional={
            "path_prefix": st.text(max_size=10),
            "kinds": st.lists(st.sampled_from(["md", "txt", "pdf", "note", "exe"]), max_size=3),
            "sources": st.lists(st.text(max_size=8), max_size=2),
        },
    )
    | JSON,
    "bases": st.lists(st.sampled_from(["small", "other"]), max_size=3) | JSON,
}
BODIES = st.fixed_dictionaries({}, optional=FIELD_VALUES) | JSON


def _published(name: str) -> dict:
    """openapi.yaml's schema of a request body, its `$ref`s written out."""
    import yaml

    schemas = yaml.safe_load((ROOT / "openapi.yaml").read_text("utf-8"))["components"]["schemas"]

    def inline(value):
        if isinstance(value, dict):
            if "$ref" in value:
                return inline(schemas[value["$ref"].rsplit("/", 1)[1]])
            return {k: inline(v) for k, v in value.items()}
        return [inline(v) for v in value] if isinstance(value, list) else value

    return inline(schemas[name])


@functools.cache
def _contract(name: str):
    """A validator of openapi.yaml's schema (JSON Schema 2020-12): the oracle of what decode
    must take. As JSON Schema counts it, 10.0 is an integer, and a top_k of 10."""
    import jsonschema

    return jsonschema.Draft202012Validator(_published(name))


CONTRACTS = {SearchBody: "SearchRequest", SearchBasesBody: "SearchBasesRequest"}


@settings(max_examples=200, deadline=None)
@given(body=BODIES | st.fixed_dictionaries(FIELD_VALUES) | st.fixed_dictionaries(FIELD_VALUES))
@example(body={"question": "q", "top_k": 10.0, "bases": ["small"]})
@example(body={"question": "q", "top_k": 1.5, "bases": ["small", "small"]})
@example(body={"question": "q", "rerank": None, "filters": {"kinds": ["md", "exe"]}})
def test_a_body_parses_exactly_when_the_contract_allows_it_and_keeps_what_it_says(body):
    try:
        raw = json.dumps(body, allow_nan=False).encode()
    except ValueError:  # NaN or infinity: not JSON at all
        raw = json.dumps(body).encode()
        for kind in CONTRACTS:
            with pytest.raises(InvalidRequest):
                decode(raw, kind)
        return
    for kind, name in CONTRACTS.items():
        allowed = _contract(name).is_valid(body)
        if not allowed:
            with pytest.raises(InvalidRequest):
                decode(raw, kind)
            continue
        parsed = decode(raw, kind)  # the contract allows it: it must parse
        for key, value in body.items():
            got = getattr(parsed, key)
            if key == "filters":
                for field, given_value in value.items():
                    assert list(getattr(got, field)) == given_value or (
                        getattr(got, field) == given_value
                    ), (key, field)
            elif isinstance(value, list):
                assert list(got) == value, key
            else:
                assert got == value, key
        assert isinstance(parsed.top_k, int) and isinstance(parsed.question, str)


def test_the_oracle_takes_and_refuses_bodies_written_by_hand():
    """The property above leans on _contract: it is checked here on bodies whose fate is known."""
    search = _contract("SearchRequest")
    assert search.is_valid({"question": "q"})
    assert search.is_valid({"question": "", "mode": "dense", "top_k": 100, "filters": {}})
    for wrong in (
        {},
        {"question": 1},
        {"question": "q", "top_k": 0},
        {"question": "q", "top_k": 10.5},
        {"question": "q", "top_k": True},
        {"question": "q", "mode": "fuzzy"},
        {"question": "q", "filters": {"kinds": ["exe"]}},
        {"question": "q", "extra": 1},
    ):
        assert not search.is_valid(wrong), wrong
        with pytest.raises(InvalidRequest):
            decode(json.dumps(wrong).encode(), SearchBody)
    many = _contract("SearchBasesRequest")
    assert many.is_valid({"question": "q", "bases": ["a", "b"]})
    assert not many.is_valid({"question": "q", "bases": ["a", "a"]})
    assert not many.is_valid({"question": "q", "bases": []})
    parsed = decode(b'{"question": "q", "bases": ["a"], "top_k": 3.0}', SearchBasesBody)
    assert (parsed.question, parsed.bases, parsed.top_k, parsed.mode) == ("q", ("a",), 3, "hybrid")


REFUSALS = {400: "INVALID_REQUEST", 404: "BASE_NOT_FOUND", 503: "EMBEDDING_MODEL_UNAVAILABLE"}
"""The error each refusal of a search says."""


def expected_status(path: str, body: dict) -> int:
    """The one status the in-process server over `small` (searched by words only: its model
    never answers, no chunk has a vector) must answer `body` at `path` with: 400 for what is
    not JSON or not the contract's request (openapi.yaml, the oracle decode is checked against
    above), 404 for a base it does not serve, 503 for a search by meaning of a question
    (a blank one is answered, EMPTY_QUESTION), else 200."""
    try:
        json.dumps(body, allow_nan=False)
    except ValueError:  # NaN or infinity: not JSON
        return 400
    many = path == "/v1/search"
    if not _contract("SearchBasesRequest" if many else "SearchRequest").is_valid(body):
        return 400
    if many and set(body["bases"]) - {"small"}:
        return 404
    if body.get("mode") == "dense" and body["question"].strip():
        return 503
    return 200


def test_any_body_gets_the_one_status_it_must(in_process):
    server = in_process()
    optional = {k: v for k, v in FIELD_VALUES.items() if k != "question"}
    statuses: set[int] = set()

    @settings(
        max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(body=st.fixed_dictionaries({"question": st.text(max_size=40)}, optional=optional))
    @example(body={"question": "travel", "mode": "keyword", "top_k": 3})
    @example(body={"question": "travel", "mode": "dense", "bases": ["small"]})
    @example(body={"question": " ", "mode": "dense", "bases": ["small"]})
    @example(body={"question": "travel", "bases": ["small", "other"]})
    @example(body={"question": "travel", "top_k": 0, "bases": ["other"]})
    def ask(body):
        for path in ("/v1/bases/small/search", "/v1/search"):
            response = http.post(
                server.url + path,
                content=json.dumps(body).encode(),  # NaN and Infinity as Python writes them
                headers={"Content-Type": "application/json"},
                timeout=30,
            )
            expected = expected_status(path, body)
            statuses.add(expected)
            assert response.status_code == expected, (path, body, response.text)
            if expected != 200:
                assert set(response.json()) == {"error"}
                assert error_code(response) == REFUSALS[expected]

    ask()
    assert statuses == {200, 400, 404, 503}  # every outcome was met, each where it must be


def test_bases_say_when_the_embedding_model_cannot_read_them(small_base, tmp_path):
    """A Portuguese base whose model is named all-MiniLM-L6-v2 (English) carries
    MODEL_LANGUAGE_MISMATCH in its status; a base whose model is unknown carries none of it."""
    portuguese = tmp_path / "pt.db"
    with Base(portuguese, create=True) as base:
        base.configure(
            embedding={
                "provider": "tei",
                "url": "http://127.0.0.1:9",
                "model": "all-MiniLM-L6-v2",
                "timeout_s": 1,
            }
        )
        base.add_source(EXAMPLES / "ti")
        base.index()
    with served([str(small_base), str(portuguese)]) as server:
        bases = {b["name"]: b for b in http.get(f"{server.url}/v1/bases").json()["bases"]}
        # Both were indexed while their model did not answer: their chunks wait for vectors.
        assert [w["code"] for w in bases["small"]["warnings"]] == ["CHUNKS_WITHOUT_VECTORS"]
        warning, waiting = bases["pt"]["warnings"]
        assert warning["code"] == "MODEL_LANGUAGE_MISMATCH"
        assert waiting["code"] == "CHUNKS_WITHOUT_VECTORS"
        assert "is Portuguese, which all-MiniLM-L6-v2 (English) does not read" in warning["message"]


# -- the contract and the code cannot disagree ----------------------------------------------

_CHECKED = {"type", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems"}


def _shape(schema: dict, names: dict[str, str]) -> dict:
    """What a schema allows, without its words (title, description, default)."""
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[1]
        return {"$ref": names.get(target, target)}
    out = {k: (sorted(v) if k == "enum" else v) for k, v in schema.items() if k in _CHECKED}
    if "enum" in out:  # an enum of strings says its type twice, or once
        out.pop("type", None)
    if schema.get("type") == "object":
        out["required"] = sorted(schema.get("required", []))
        out["additionalProperties"] = schema.get("additionalProperties", True)
        out["properties"] = {
            name: _shape(value, names) for name, value in schema.get("properties", {}).items()
        }
    if "items" in schema:
        out["items"] = _shape(schema["items"], names)
    return out


def test_the_request_types_are_the_schemas_openapi_publishes():
    import msgspec
    import yaml

    from metis_lite.http.messages import BODIES, FactsQuery

    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text("utf-8"))
    published = contract["components"]["schemas"]
    ours = {kind.__name__: name for name, kind in BODIES.items()}
    _, derived = msgspec.json.schema_components(list(BODIES.values()))
    for name, kind in BODIES.items():
        theirs = dict(published[name])
        if name == "SearchBasesRequest":  # uniqueItems: SearchBasesBody.__post_init__ checks it
            theirs["properties"] = {
                **theirs["properties"],
                "bases": {
                    k: v for k, v in theirs["properties"]["bases"].items() if k != "uniqueItems"
                },
            }
        assert _shape(derived[kind.__name__], ours) == _shape(theirs, {}), name
    query = {
        p["name"]: p["schema"]
        for p in contract["paths"]["/v1/bases/{name}/facts"]["get"]["parameters"]
        if "name" in p
    }
    _, facts = msgspec.json.schema_components([FactsQuery])
    assert _shape(facts["FactsQuery"], {})["properties"] == {
        name: _shape(schema, {}) for name, schema in query.items()
    }
