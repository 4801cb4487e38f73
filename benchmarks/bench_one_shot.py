"""A one-shot search: the wall time of a fresh `metis-lite search` process, beside `python -c pass`.

    python benchmarks/bench_one_shot.py [--chunks 12000] [--runs 10] [--before DIR] [--out FILE]

Builds a base of N generated chunks (benchmarks/gencorpus.py), then times whole processes, each
`python -m metis_lite search BASE QUESTION` from its start to its exit (wall, and the CPU it and
its threads used, from wait4), p50 and p95 over `--runs`, the rows taking turns run after run so
that a change in the machine's load falls on every row alike:

- `python -c pass`: the interpreter alone, the floor of any command;
- `keyword`: `--mode keyword`;
- `hybrid, cache off`: the default mode with the embedded multilingual-e5-small loaded from its
  file as before the cache (METIS_LITE_CACHE=off: read, sha256, made float32);
- `hybrid, cache warm`: the same with the cache folder filled (metis_lite/models/weights_cache.py);
- `hybrid, cache cold`: once, the first search after the cache folder is emptied (it is filled).

With `--before DIR` (a source tree of metis-lite as it was: `git archive HEAD | tar -x -C DIR`),
`keyword` and `hybrid` run with that tree's code too, in the same turns, with the same cache
folder (code older than the cache ignores it), and each row's p50 is also given as a ratio to
its row before.

The base's vectors are random unit vectors under the model's label: embedding 12,000 chunks
with the embedded model takes most of an hour on two cores, and a search's cost does not depend
on its vectors' values (the question is embedded by the model all the same). Every process is
given a bytecode cache (PYTHONPYCACHEPREFIX, filled by a first run that is not timed), as an
installed package has its .pyc files; a source tree run with PYTHONDONTWRITEBYTECODE would
compile every module of metis-lite in every process (~0.15 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from gencorpus import Vocabulary, questions, write_corpus  # noqa: E402
from run import machine  # noqa: E402

E5_SPEC = {"provider": "embedded", "model": "multilingual-e5-small"}


def build_base(chunks: int, work: Path) -> Path:
    """A base of `chunks` generated chunks, each with a random unit vector of the model."""
    import numpy as np

    from metis_lite.base.core import Base

    corpus, path = work / "corpus", work / "one-shot.db"
    write_corpus(corpus, chunks=chunks, vocab=Vocabulary(seed=7))
    with Base(path, create=True) as base:
        base.configure(embedding={"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1})
        base.add_source(corpus)
        base.index()
        base.configure(embedding=E5_SPEC)
        with base._pool.borrow() as store:
            ids = [row[0] for row in store.db.execute("SELECT id FROM chunks ORDER BY id")]
            rng = np.random.default_rng(7)
            vectors = rng.standard_normal((len(ids), 384)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            store.put_vectors(base.model_label, zip(ids, vectors, strict=True))
    return path


def timed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall ms, CPU ms) of one process, from its start to its exit."""
    started = time.perf_counter()
    child = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.perf_counter() - started) * 1000
    err = child.stderr.read().decode() if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0 or "Warning" in err:
        raise SystemExit(f"{' '.join(command)} failed: {err}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=12_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--before", type=Path, help="a source tree of the code before")
    parser.add_argument("--work", type=Path, help="a folder to build in (default: a temporary)")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-one-shot-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    base = build_base(args.chunks, work)
    print(f"base: {args.chunks:,} chunks in {time.perf_counter() - started:.1f} s", flush=True)
    question = questions(Vocabulary(seed=7), 1)[0]

    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    cache = work / "cache"
    warm = {**env, "METIS_LITE_CACHE": str(cache)}
    off = {**env, "METIS_LITE_CACHE": "off"}
    search = [sys.executable, "-m", "metis_lite", "search", str(base), question]
    keyword = [*search, "--mode", "keyword"]
    rows: dict[str, tuple[list[str], dict[str, str], Path]] = {
        "python -c pass": ([sys.executable, "-c", "pass"], env, ROOT),
        "keyword": (keyword, warm, ROOT),
        "hybrid, cache off": (search, off, ROOT),
        "hybrid, cache warm": (search, warm, ROOT),
    }
    if args.before is not None:
        before = args.before.resolve()
        rows["keyword, before"] = (keyword, warm, before)
        rows["hybrid, before"] = (search, warm, before)

    for command, row_env, cwd in rows.values():  # bytecode written, the cache filled, untimed
        timed(command, row_env, cwd)
    shutil.rmtree(cache)
    cold = timed(search, warm, ROOT)

    load = os.getloadavg()
    figures: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in rows}
    for _ in range(args.runs):
        for name, (command, row_env, cwd) in rows.items():
            wall, cpu = timed(command, row_env, cwd)
            figures[name]["wall"].append(wall)
            figures[name]["cpu"].append(cpu)
    load_after = os.getloadavg()

    print(f"machine: {machine()}; load average {load[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"question: {question!r}; {args.runs} runs each, rows in turn\n")
    print(f"| {'process':22} | wall p50 | wall p95 | CPU p50 | CPU p95 |")
    print(f"|{'-' * 24}|---------:|---------:|--------:|--------:|")
    table = {}
    for name, got in figures.items():
        row = {
            "wall_p50_ms": statistics.median(got["wall"]),
            "wall_p95_ms": percentile(got["wall"], 0.95),
            "cpu_p50_ms": statistics.median(got["cpu"]),
            "cpu_p95_ms": percentile(got["cpu"], 0.95),
        }
        table[name] = row
        print(
            f"| {name:22} | {row['wall_p50_ms']:8.0f} | {row['wall_p95_ms']:8.0f} |"
            f" {row['cpu_p50_ms']:7.0f} | {row['cpu_p95_ms']:7.0f} |"
        )
    print(
        f"| {'hybrid, cache cold':22} | {cold[0]:8.0f} | {'(once)':>8} | {cold[1]:7.0f} | {'':>7} |"
    )
    pairs = {"keyword": "keyword, before", "hybrid, cache warm": "hybrid, before"}
    ratios = {
        name: table[name]["wall_p50_ms"] / table[before_name]["wall_p50_ms"]
        for name, before_name in pairs.items()
        if before_name in table
    }
    for name, ratio in ratios.items():
        print(f"{name}: {ratio:.2f} of before (wall p50)")
    if args.out:
        report = {
            "machine": machine(),
            "load": [load[0], load_after[0]],
            "chunks": args.chunks,
            "runs": args.runs,
            "rows": table,
            "hybrid_cache_cold_ms": {"wall": cold[0], "cpu": cold[1]},
            "p50_of_before": ratios,
        }
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
