"""How many searches the index service answers, beside the same searches through the Python API,
and past one process: read-only readers of a published copy, one alone and two behind nginx.

    python benchmarks/bench_service.py [--chunks 100000] [--clients 16] [--seconds 20]
                                       [--mode keyword] [--readers] [--work DIR]
                                       [--memory 100,10000,100000] [--out FILE]

Builds a base of N generated chunks (benchmarks/gencorpus.py: Zipf-distributed words, ~800
characters a chunk), then, in the same run, measures searches/s and p50/p95 latency:

- `api`: `--clients` threads of this process share one open `Base` and call `base.search`
  one question after another for `--seconds` (what a Python caller gets);
- `service`: `metis-lite serve` on the base in its own process (port 0, no request log, no
  polling, `--workers` = clients), and `--clients` threads each send one search after another,
  each on its own connection kept open (HTTP/1.1 keep-alive, as a client library does; runs
  before 2026-12-04 opened a new connection per search, which costs the service more);
- `publish`: `metis-lite publish` of the base (publish.py), timed: seconds, and seconds per
  100,000 chunks;
- with `--readers`, on the published copy, the same clients and questions: `one reader`
  (`serve --read-only`, asked directly), `one reader behind nginx` and `two readers behind
  nginx` (examples/deploy/nginx-metis-lite.conf with this run's ports; Debian's nginx, which
  scripts/install-system installs). Two over one behind nginx is what a second reader adds;
  one behind nginx over one asked directly is what nginx costs. Each reader's peak resident
  memory is said too (its vectors, words index and connections for this base).
- with `--memory SIZES` (chunk counts, comma-separated), for each size a base of that many
  chunks is built and published, and a fresh process opens the published copy read-only as a
  reader does (`Base(read_only=True)`), reads it into memory (`Base.warm`) and searches it
  MEMORY_SEARCHES times: its peak resident memory (VmHWM: Python, metis-lite and that one
  base), the seconds `warm` took, and the file's size. docs/deploy.md's memory per base
  (bases per reader) is read from these rows.

`--out FILE` also writes every figure of the run as JSON (as benchmarks/run.py does).

The ratio service / api is what the HTTP edge costs (the aim: at least 0.8).
Questions are 3–10 words from the corpus's own law.

The base is keyword-only: its embedding model is a dead URL, since embedding 100,000 chunks
with the embedded model on two cores would take most of an hour; searches are `mode: keyword`
(by words, BM25, no reranker). The output says so. `throughput(base_path)` runs the clients
against any base (benchmarks/run.py may call it); `build_base(chunks, work)` makes the base.

Clients, service, readers and nginx share the machine: on two cores the client threads take
part of the CPU the service would have, so the figures are a floor, and a second reader can
add at most what the second core has left after the clients, nginx and the first reader.
Latency is the client's (connect, send, wait, read); `server p50` is the search's own
`took.total`.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
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

from metis_lite.base.core import Base  # noqa: E402
from metis_lite.copies.publish import publish  # noqa: E402

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that refuses at once: the base is built without vectors, quickly."""

CLIENTS = 16
CHUNKS = 100_000
SECONDS = 20.0
QUESTIONS = 200
STARTUP_S = 120.0
REQUEST_TIMEOUT_S = 60.0
PER_CHUNKS = 100_000
"""A publish is said in seconds per this many chunks."""
MEMORY_SEARCHES = 15
"""Searches a reader's memory is measured after (the first ones fill SQLite's page caches)."""
NGINX_CONF = ROOT / "examples" / "deploy" / "nginx-metis-lite.conf"
NGINX_MAIN = """\
worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
{user}
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/metis-lite.conf;
}}
"""
"""nginx's main file around the example's: its own prefix, in the foreground, one worker."""


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


def _start(
    base_path: Path, clients: int, *flags: str, port: int = 0, served: str | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """`metis-lite serve` on the base (`served`: NAME=PATH instead), with `flags`."""
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
            served or str(base_path),
            "--port",
            str(port),
            "--no-access-log",
            "--workers",
            str(clients),
            *(flags or ("--poll", "0")),
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


def _ask(
    port: int, path: str, body: bytes, connection: http.client.HTTPConnection | None = None
) -> tuple[int, float | None]:
    """One search: on `connection` (kept open, as a client library keeps it), or on a new
    one closed after it."""
    own = connection is None
    connection = connection or http.client.HTTPConnection(
        "127.0.0.1", port, timeout=REQUEST_TIMEOUT_S
    )
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
    except OSError:
        connection.close()  # a new one is made for the next request
        raise
    finally:
        if own:
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
    process, port = _start(base_path, clients)
    try:
        return load(port, name, clients=clients, seconds=seconds, mode=mode, asks=asks)
    finally:
        process.terminate()
        process.wait(timeout=30)


def load(
    port: int,
    name: str,
    *,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    mode: str = "keyword",
    asks: Sequence[str] | None = None,
) -> dict:
    """`clients` threads, each sending one search of base `name` after another to
    127.0.0.1:`port` for `seconds` (after one search each to warm up)."""
    asks = list(asks or questions(Vocabulary(seed=7), QUESTIONS))
    bodies = [json.dumps({"question": q, "mode": mode}).encode() for q in asks]
    path = f"/v1/bases/{name}/search"
    latencies: list[float] = []
    server_ms: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    ready = threading.Barrier(clients + 1)
    go = threading.Event()  # set once stop_at is: no client reads it before
    stop_at = [0.0]

    def client(n: int) -> None:
        _ask(port, path, bodies[n % len(bodies)])  # warm: this thread's first search
        ready.wait()
        go.wait()
        i = n
        mine, theirs, failed = [], [], []
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        while time.perf_counter() < stop_at[0]:
            body = bodies[i % len(bodies)]
            i += clients
            started = time.perf_counter()
            try:
                status, took = _ask(port, path, body, kept)
            except OSError as exc:
                failed.append(type(exc).__name__)
                continue
            if status != 200:
                failed.append(str(status))
                continue
            mine.append((time.perf_counter() - started) * 1000.0)
            theirs.append(took)
        kept.close()
        with lock:
            latencies.extend(mine)
            server_ms.extend(theirs)
            failures.extend(failed)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    stop_at[0] = started + seconds
    go.set()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
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


# -- past one process: a published copy, readers, nginx -------------------------------------


def publish_cost(base_path: Path, work: Path) -> dict:
    """One `publish` of the base, timed (its destination replaced if there)."""
    dest = work / "published" / base_path.name
    dest.parent.mkdir(exist_ok=True)
    done = publish(base_path, dest)
    return {
        "dest": dest,
        "chunks": done.chunks,
        "seconds": round(done.seconds, 2),
        "seconds_per_100k": round(done.seconds * PER_CHUNKS / max(done.chunks, 1), 2),
        "bytes": done.bytes,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _nginx(prefix: Path, listen: int, readers: Sequence[int]) -> subprocess.Popen[bytes]:
    """nginx with examples/deploy's configuration in front of `readers` (its two server lines
    made this run's readers: one reader is named once)."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    conf = NGINX_CONF.read_text(encoding="utf-8")
    lines = re.findall(r"^\s*server 127\.0\.0\.1:\d+ .*;$\n", conf, re.M)
    template = lines[0]
    upstream = "".join(re.sub(r":\d+ ", f":{port} ", template, count=1) for port in readers)
    conf = conf.replace("".join(lines), upstream)
    conf = re.sub(r"listen 127\.0\.0\.1:\d+;", f"listen 127.0.0.1:{listen};", conf)
    prefix.mkdir(parents=True, exist_ok=True)
    (prefix / "metis-lite.conf").write_text(conf, encoding="utf-8")
    user = "user root;" if os.geteuid() == 0 else ""
    main = prefix / "nginx.conf"
    main.write_text(NGINX_MAIN.format(prefix=prefix, user=user), encoding="utf-8")
    process = subprocess.Popen(
        [nginx, "-p", str(prefix), "-c", str(main), "-e", str(prefix / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            with socket.create_connection(("127.0.0.1", listen), timeout=1):
                return process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"nginx did not start: {(prefix / 'error.log').read_text()}"
                ) from None
            time.sleep(0.05)


def _wait_until_warm(port: int) -> None:
    """Until the reader says its base is read into memory (it is searched meanwhile, by FTS5:
    slower, and not what a reader in service does)."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_TIMEOUT_S)
        try:
            connection.request("GET", "/v1/health")
            health = json.loads(connection.getresponse().read())
        finally:
            connection.close()
        if all(base.get("warm") for base in health["bases"]):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the reader on port {port} was not warm within {STARTUP_S:g} s")
        time.sleep(0.1)


def readers_throughput(
    dest: Path,
    *,
    readers: int,
    behind_nginx: bool,
    clients: int = CLIENTS,
    seconds: float = SECONDS,
    mode: str = "keyword",
    work: Path,
) -> dict:
    """The clients against `readers` read-only services of the published copy `dest`, asked
    directly (one reader) or through nginx; with each reader's peak memory."""
    started = [
        _start(dest, clients, "--read-only", port=_free_port(), served=f"service={dest}")
        for _ in range(readers)
    ]
    nginx = None
    try:
        for _, reader in started:
            _wait_until_warm(reader)
        port = started[0][1]
        if behind_nginx:
            port = _free_port()
            nginx = _nginx(work / f"nginx-{readers}", port, [p for _, p in started])
        figures = load(port, "service", clients=clients, seconds=seconds, mode=mode)
        figures["peak_rss_mb"] = [_peak_rss_mb(process.pid) for process, _ in started]
        return figures
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=30)
        for process, _ in started:
            process.terminate()
            process.wait(timeout=30)


def reader_memory(chunks: int, work: Path) -> dict:
    """A reader's peak memory for one published copy of `chunks` chunks, measured in a fresh
    process (the module docstring's `--memory`)."""
    base_path, _ = build_base(chunks, work)
    dest = work / "memory" / base_path.name
    dest.parent.mkdir(exist_ok=True)
    publish(base_path, dest)
    asks = questions(Vocabulary(seed=7), MEMORY_SEARCHES)
    done = subprocess.run(
        [sys.executable, __file__, "--reader-memory-of", str(dest)],
        input=json.dumps(asks),
        capture_output=True,
        text=True,
        check=True,
        timeout=STARTUP_S * 5,
    )
    measured = json.loads(done.stdout)
    return {"chunks": chunks, "file_mb": round(dest.stat().st_size / 2**20, 1), **measured}


def _reader_memory_of(path: str) -> None:
    """In the measured process: the copy at `path` opened as a reader, warmed, searched with
    the questions read from stdin; its peak resident memory and warm time, as JSON."""
    asks = json.loads(sys.stdin.read())
    with Base(path, read_only=True) as base:
        started = time.perf_counter()
        base.warm()
        warm_s = time.perf_counter() - started
        for question in asks:
            base.search(question, mode="keyword")
    peak = _peak_rss_mb(os.getpid())
    print(json.dumps({"peak_rss_mb": peak, "warm_s": round(warm_s, 2), "searches": len(asks)}))


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
    go = threading.Event()  # set once stop_at is: no client reads it before
    stop_at = [0.0]
    with Base(base_path) as base:

        def client(n: int) -> None:
            base.search(asks[n % len(asks)], mode=mode)  # warm
            ready.wait()
            go.wait()
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
        go.set()
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
    cost = figures.get("publish")
    if cost:
        rows.append(
            (
                "publish (one copy)",
                f"{cost['seconds']:.2f} s for {cost['chunks']:,} chunks, {cost['bytes']:,} "
                f"bytes: {cost['seconds_per_100k']:.2f} s per 100,000 chunks",
            )
        )
    for label, key in (
        ("one reader", "one_reader"),
        ("one reader, nginx", "one_behind_nginx"),
        ("two readers, nginx", "two_behind_nginx"),
    ):
        row = figures.get(key)
        if row:
            memory = " / ".join(f"{mb:.0f}" for mb in row["peak_rss_mb"])
            rows.append(
                (
                    f"{label} searches/s",
                    f"{row['searches_per_s']:.1f} (p50 {row['p50_ms']:.1f} ms, p95 "
                    f"{row['p95_ms']:.1f} ms, {row['failed']} failed; peak memory {memory} MB)",
                )
            )
    if figures.get("two_behind_nginx") and figures.get("one_behind_nginx"):
        two, one = figures["two_behind_nginx"], figures["one_behind_nginx"]
        direct = figures["one_reader"]
        rows += [
            ("two / one reader, nginx", f"{two['searches_per_s'] / one['searches_per_s']:.2f}"),
            (
                "one reader: nginx / direct",
                f"{one['searches_per_s'] / direct['searches_per_s']:.2f}",
            ),
        ]
    for row in figures.get("reader_memory", ()):
        rows.append(
            (
                f"reader memory, {row['chunks']:,} chunks",
                f"peak {row['peak_rss_mb']:.0f} MB (a {row['file_mb']:.1f} MB copy; warm in "
                f"{row['warm_s']:.2f} s, then {row['searches']} searches)",
            )
        )
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(label.ljust(width) + value for label, value in rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--clients", type=int, default=CLIENTS)
    parser.add_argument("--seconds", type=float, default=SECONDS)
    parser.add_argument("--mode", default="keyword", choices=("keyword", "hybrid", "dense"))
    parser.add_argument(
        "--readers",
        action="store_true",
        help="also one reader and two behind nginx, on a published copy (needs nginx)",
    )
    parser.add_argument("--work", help="folder for the corpus and base (kept; default: temp)")
    parser.add_argument(
        "--memory",
        metavar="SIZES",
        help="also a reader's peak memory for a copy of each of these chunk counts, e.g. "
        "100,10000,100000 (each base built once; default: none)",
    )
    parser.add_argument("--out", metavar="FILE", help="also write every figure as JSON here")
    parser.add_argument("--reader-memory-of", metavar="PATH", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reader_memory_of:  # the process --memory measures
        _reader_memory_of(args.reader_memory_of)
        return 0
    sizes = [int(size) for size in args.memory.split(",")] if args.memory else []
    with tempfile.TemporaryDirectory() as temp:
        work = Path(args.work or temp)
        work.mkdir(parents=True, exist_ok=True)
        base_path, built_s = build_base(args.chunks, work)
        same = {"clients": args.clients, "seconds": args.seconds, "mode": args.mode}
        api = api_throughput(base_path, **same)
        figures = throughput(base_path, **same)
        figures["api"] = api
        figures["ratio"] = round(figures["searches_per_s"] / max(api["searches_per_s"], 1e-9), 2)
        figures["publish"] = cost = publish_cost(base_path, work)
        failed = figures["failed"]
        if args.readers:
            for key, readers, behind in (
                ("one_reader", 1, False),
                ("one_behind_nginx", 1, True),
                ("two_behind_nginx", 2, True),
            ):
                row = readers_throughput(
                    cost["dest"], readers=readers, behind_nginx=behind, work=work, **same
                )
                figures[key] = row
                failed += row["failed"]
        if sizes:
            figures["reader_memory"] = [reader_memory(size, work) for size in sizes]
    cores, load_average = os.cpu_count(), _load_average()
    print(f"metis-lite service benchmark ({cores} cores, load {load_average})")
    print(table(args.chunks, built_s, figures, args.seconds))
    if args.out:
        run = {
            "cores": cores,
            "load_average": load_average,
            "chunks": args.chunks,
            "indexing_s": built_s,
            "seconds": args.seconds,
            "figures": figures,
        }
        Path(args.out).write_text(json.dumps(run, indent=2, default=str), encoding="utf-8")
    return 0 if failed == 0 else 1


def _load_average() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
