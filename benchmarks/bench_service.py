"""How many searches the index service answers, beside the same searches through the Python API.

    python benchmarks/bench_service.py [--chunks 100000] [--clients 16] [--seconds 20]
                                       [--mode keyword] [--work DIR]

Builds a base of N generated chunks (benchmarks/gencorpus.py: Zipf-distributed words, ~800
characters a chunk), then, in the same run, measures searches/s and p50/p95 latency twice:

- `api`: `--clients` threads of this process share one open `Base` and call `base.search`
  one question after another for `--seconds` (what a Python caller gets);
- `service`: `metis-lite serve` on the base in its own process (port 0, no request log, no
  polling, `--workers` = clients), and `--clients` threads each send one search after another,
  over a new connection each (the service answers one request per connection).

The ratio service / api is what the HTTP edge costs (issue 13 asks for at least 0.8).
Questions are 3–10 words from the corpus's own law.

The base is keyword-only: its embedding model is a dead URL, since embedding 100,000 chunks
with the embedded model on two cores would take most of an hour; searches are `mode: keyword`
(by words, BM25, no reranker). The output says so. `throughput(base_path)` runs the clients
against any base (benchmarks/run.py calls it); `build_base(chunks, work)` makes the base.

Clients and service share the machine: on two cores the client threads take part of the CPU
the service would have, so the figures are a floor. Latency is the client's (connect, send,
wait, read); `server p50` is the search's own `took.total`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from gencorpus import Vocabulary, questions, write_corpus  # noqa: E402

from metis_lite.base import Base  # noqa: E402

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that refuses at once: the base is built without vectors, quickly."""

CLIENTS = 16
CHUNKS = 100_000
SECONDS = 20.0
QUESTIONS = 200
STARTUP_S = 120.0
REQUEST_TIMEOUT_S = 60.0


def build_base(chunks: int, work: Path) -> tuple[Path, float]:
    """A keyword-only base of `chunks` generated chunks in `work` (reused when already there);
    returns its path and the seconds indexing took (0 when reused)."""
    path = work / f"service-{chunks}.db"
    if path.exists():
        return path, 0.0
    folder = work / f"corpus-{chunks}"
    write_corpus(folder, chunks=chunks, vocab=Vocabulary(seed=7))
    partial = work / f"service-{chunks}.partial.db"
    with Base(partial, create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING)
        base.add_source(folder)
        report = base.index()
    for suffix in ("", "-wal", "-shm"):
        source = Path(str(partial) + suffix)
        if source.exists():
            source.rename(str(path) + suffix)
    Path(str(partial) + ".lock").unlink(missing_ok=True)
    return path, report.seconds


def _start(base_path: Path, clients: int) -> tuple[subprocess.Popen[bytes], int]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "metis_lite",
            "serve",
            str(base_path),
            "--port",
            "0",
            "--poll",
            "0",
            "--no-access-log",
            "--workers",
            str(clients),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    assert process.stdout is not None
    first = process.stdout.readline().decode()  # "serving http://127.0.0.1:PORT"
    if not first.startswith("serving "):
        process.kill()
        raise RuntimeError(f"the service did not start: {first!r}")
    threading.Thread(target=process.stdout.read, daemon=True).start()  # keep the pipe drained
    return process, int(first.strip().rsplit(":", 1)[1])


def _ask(port: int, path: str, body: bytes) -> tuple[int, float | None]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    took = json.loads(data)["took"]["total"] if response.status == 200 else None
    return response.status, took


def throughput(
    base_path: str | Path,
    *,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    mode: str = "keyword",
    asks: Sequence[str] | None = None,
) -> dict:
    """Searches/s and latency of `clients` concurrent clients against a service on the base."""
    base_path = Path(base_path)
    with Base(base_path) as base:
        name = base.name
    asks = list(asks or questions(Vocabulary(seed=7), QUESTIONS))
    bodies = [json.dumps({"question": q, "mode": mode}).encode() for q in asks]
    path = f"/v1/bases/{name}/search"
    process, port = _start(base_path, clients)
    latencies: list[float] = []
    server_ms: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    ready = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(n: int) -> None:
        _ask(port, path, bodies[n % len(bodies)])  # warm: this thread's first search
        ready.wait()
        i = n
        mine, theirs, failed = [], [], []
        while time.perf_counter() < stop_at[0]:
            body = bodies[i % len(bodies)]
            i += clients
            started = time.perf_counter()
            try:
                status, took = _ask(port, path, body)
            except OSError as exc:
                failed.append(type(exc).__name__)
                continue
            if status != 200:
                failed.append(str(status))
                continue
            mine.append((time.perf_counter() - started) * 1000.0)
            theirs.append(took)
        with lock:
            latencies.extend(mine)
            server_ms.extend(theirs)
            failures.extend(failed)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    try:
        for thread in threads:
            thread.start()
        ready.wait()
        started = time.perf_counter()
        stop_at[0] = started + seconds
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=30)
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "mode": mode,
        "clients": clients,
        "searches": len(latencies),
        "failed": len(failures),
        "searches_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(quantiles[49], 1),
        "p95_ms": round(quantiles[94], 1),
        "server_p50_ms": round(statistics.median(server_ms), 1) if server_ms else None,
    }


def api_throughput(
    base_path: str | Path,
    *,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    mode: str = "keyword",
    asks: Sequence[str] | None = None,
) -> dict:
    """The same searches through the Python API: `clients` threads sharing one open Base."""
    asks = list(asks or questions(Vocabulary(seed=7), QUESTIONS))
    latencies: list[float] = []
    lock = threading.Lock()
    ready = threading.Barrier(clients + 1)
    stop_at = [0.0]
    with Base(base_path) as base:

        def client(n: int) -> None:
            base.search(asks[n % len(asks)], mode=mode)  # warm
            ready.wait()
            i, mine = n, []
            while time.perf_counter() < stop_at[0]:
                question = asks[i % len(asks)]
                i += clients
                started = time.perf_counter()
                base.search(question, mode=mode)
                mine.append((time.perf_counter() - started) * 1000.0)
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
        for thread in threads:
            thread.start()
        ready.wait()
        started = time.perf_counter()
        stop_at[0] = started + seconds
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
    quantiles = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return {
        "mode": mode,
        "clients": clients,
        "searches": len(latencies),
        "searches_per_s": round(len(latencies) / wall, 1),
        "p50_ms": round(quantiles[49], 1),
        "p95_ms": round(quantiles[94], 1),
    }


def table(chunks: int, built_s: float, figures: dict, seconds: float) -> str:
    rows = [
        ("base", f"{chunks:,} generated chunks, keyword-only (embedding model: a dead URL)"),
        ("indexing", f"{built_s:.1f} s" if built_s else "reused"),
        (
            "searches",
            f"mode {figures['mode']}, no reranker, {figures['clients']} clients, {seconds:g} s",
        ),
        ("answered", f"{figures['searches']:,} ({figures['failed']} failed)"),
        ("searches per second", f"{figures['searches_per_s']:.1f}"),
        ("latency p50 (client)", f"{figures['p50_ms']:.1f} ms"),
        ("latency p95 (client)", f"{figures['p95_ms']:.1f} ms"),
        ("search p50 (took.total)", f"{figures['server_p50_ms']} ms"),
    ]
    api = figures.get("api")
    if api:
        rows += [
            ("python api searches/s", f"{api['searches_per_s']:.1f} (same questions, threads)"),
            ("python api p50 / p95", f"{api['p50_ms']:.1f} / {api['p95_ms']:.1f} ms"),
            ("service / python api", f"{figures['ratio']:.2f}"),
        ]
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(label.ljust(width) + value for label, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--mode", default="keyword", choices=("keyword", "hybrid", "dense"))
    parser.add_argument("--work", help="folder for the corpus and base (kept; default: temp)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as temp:
        work = Path(args.work or temp)
        work.mkdir(parents=True, exist_ok=True)
        base_path, built_s = build_base(args.chunks, work)
        api = api_throughput(base_path, clients=args.clients, seconds=args.seconds, mode=args.mode)
        figures = throughput(base_path, clients=args.clients, seconds=args.seconds, mode=args.mode)
        figures["api"] = api
        figures["ratio"] = round(figures["searches_per_s"] / max(api["searches_per_s"], 1e-9), 2)
    print(f"metis-lite service benchmark ({os.cpu_count()} cores)")
    print(table(args.chunks, built_s, figures, args.seconds))
    return 0 if figures["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
