"""The service under load: many clients searching at once while it indexes a large folder. No
request fails, the service's memory stays bounded, and every search sees whole documents only:
each document of the folder is three chunks that all hold its own word, so a search for that
word finds none of them (not indexed yet) or all three, never one or two.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from conftest import words_only_base
from serving import serve, stop

DOCUMENTS = 800
CHUNKS_PER_DOCUMENT = 3
CLIENTS = 16
THINK_S = 0.02
"""Each client's pause between its searches, so that the indexer gets a share of the GIL."""
PEAK_RSS_BYTES = 1024 * 1024 * 1024
"""Generous: the service holds 2,400 chunks and their words; a leak per request would pass it."""

INDEXING_LIMIT_S = 300
"""Only so that a hang fails the test instead of holding the suite; not a benchmark."""


def folder(root: Path) -> Path:
    """DOCUMENTS files of three sections each (one chunk per section), all naming docN."""
    src = root / "big"
    src.mkdir()
    filler = "The quarterly report lists widgets, gadgets and their prices in detail. " * 12
    for n in range(DOCUMENTS):
        sections = "\n\n".join(
            f"## Part {p}\n\nMarker doc{n} part {p}. {filler}" for p in range(CHUNKS_PER_DOCUMENT)
        )
        (src / f"doc{n:04}.md").write_text(f"# Document {n}\n\n{sections}\n", encoding="utf-8")
    return src


def test_many_searches_while_a_large_folder_is_indexed_all_answer_with_whole_documents(
    tmp_path,
):
    src = folder(tmp_path)
    with words_only_base(tmp_path / "big.db", src):
        pass  # a base with its source, not indexed yet
    service = serve(tmp_path, str(tmp_path / "big.db"), "--poll", "0", "--no-access-log")
    url = service.url
    indexing = threading.Event()
    done = threading.Event()
    failures: list[str] = []
    counts = {"searches": 0, "while_indexing": 0}
    lock = threading.Lock()

    def watch() -> None:
        """Says when the base has left Indexing (the service's own state)."""
        with httpx.Client(timeout=60) as http:
            deadline = time.monotonic() + INDEXING_LIMIT_S
            while time.monotonic() < deadline:
                status = http.get(f"{url}/v1/bases").json()["bases"][0]
                if status["state"] == "Indexing":
                    indexing.set()
                elif indexing.is_set() or status["documents"] == DOCUMENTS:
                    break
                time.sleep(0.1)
        done.set()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=60) as http:
            while not done.wait(THINK_S):
                n = rng.randrange(DOCUMENTS)
                mode = rng.choice(["keyword", "hybrid"])
                body = {"question": f"doc{n}", "mode": mode, "collapse": False}  # each chunk
                if rng.random() < 0.2:
                    body = {"question": "quarterly widgets prices", "top_k": rng.randint(1, 50)}
                was_indexing = indexing.is_set() and not done.is_set()
                try:
                    response = http.post(f"{url}/v1/bases/big/search", json=body)
                except httpx.HTTPError as exc:
                    failures.append(f"{body}: {exc!r}")
                    continue
                if response.status_code != 200:
                    failures.append(f"{body}: {response.status_code} {response.text[:200]}")
                    continue
                results = response.json()["results"]
                documents = {r["citation"]["document"] for r in results}
                with lock:
                    counts["searches"] += 1
                    counts["while_indexing"] += was_indexing
                if body["question"].startswith("doc"):
                    if len(results) not in (0, CHUNKS_PER_DOCUMENT) or documents - {
                        f"doc{n:04}.md"
                    }:
                        failures.append(f"doc{n}: {len(results)} chunks of {documents}")
                elif len(results) > body["top_k"]:
                    failures.append(f"{len(results)} results for top_k {body['top_k']}")

    try:
        with httpx.Client(timeout=60) as http:
            started = http.post(f"{url}/v1/bases/big/index", json={})
            assert started.status_code == 202, started.text
        watcher = threading.Thread(target=watch)
        watcher.start()
        with ThreadPoolExecutor(CLIENTS) as pool:
            for future in [pool.submit(client, seed) for seed in range(CLIENTS)]:
                future.result(timeout=INDEXING_LIMIT_S + 60)
        watcher.join()
        assert not failures, failures[:10]
        assert counts["while_indexing"] > 0, counts
        assert service.peak_rss_bytes() < PEAK_RSS_BYTES, service.peak_rss_bytes()

        with httpx.Client(timeout=60) as http:
            status = http.get(f"{url}/v1/bases").json()["bases"][0]
            assert status["state"] == "Waiting", status
            assert status["documents"] == DOCUMENTS
            assert status["chunks"] == DOCUMENTS * CHUNKS_PER_DOCUMENT
            assert status["last_indexing"]["state"] == "done"
            for n in random.Random(0).sample(range(DOCUMENTS), 20):
                answer = http.post(
                    f"{url}/v1/bases/big/search",
                    json={"question": f"doc{n}", "mode": "keyword", "collapse": False},
                ).json()
                assert len(answer["results"]) == CHUNKS_PER_DOCUMENT
    finally:
        stop(service)
    assert "Traceback" not in service.stderr.read_text()
