"""Whole-folder indexing on every core against one: chunks/s of `index`, without embeddings.

    python benchmarks/bench_indexing.py                      # HTML and PDF, 1 worker and all
    python benchmarks/bench_indexing.py --kinds html --workers 1,2,4 --repeat 3
    python benchmarks/bench_indexing.py --out indexing.json

The corpora are Debian packages, as in bench_parsing.py (nothing is downloaded; a missing one
is reported and skipped): Python 3.11's HTML documentation (`python3.11-doc`, its 530 .html
pages) and LaTeX's manuals (`texlive-latex-base-doc`, its PDFs), copied to a scratch folder
first so that the files read are these alone, and read once before the runs (the page cache
then holds them for every run alike).

Each run is one `Base.index(workers=N)` of a new base whose embedding model refuses at once
(nothing is embedded: the run's words, its parse and its writes are what is timed), in a
process of its own; this process waits for it (wait4), so its CPU time counts the indexer and
every process it started and ended: its parse workers, and PDFium's (less what the process
spent starting, before the run). Printed per run: chunks,
wall seconds, chunks/s, CPU seconds (chunks per CPU second: what the cores gave it, which the
load of other processes inflates far less than wall time; the indexer's own share, its
writing, beside: with workers it is the one part that does not spread over the cores), when
every file was written
(searchable by words), and the load average before and after. N = 1 parses in the indexer
itself; N > 1 in N worker processes (parse_pool.py) while the indexer writes.

Aims: ≥ 5,000 chunks/s on the HTML and ≥ 1,000 chunks/s on the PDFs, wall time,
on the machine's every core. Run it alone on the machine (`nice -n 10` as a good neighbour):
other processes' load takes cores from the runs, and the figures say so beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

CORPORA = {
    "html": (Path("/usr/share/doc/python3.11/html"), ".html"),
    "pdf": (Path("/usr/share/doc/texlive-doc"), ".pdf"),
}
"""Where Debian's python3.11-doc and texlive-latex-base-doc put their files, and which."""

AIMS = {"html": 5000.0, "pdf": 1000.0}
"""Chunks/s of the whole index, without embeddings."""

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that refuses at once: indexing without embeddings."""


def copy_corpus(kind: str, work: Path, limit: int | None) -> tuple[Path, int, int] | None:
    """The corpus's files copied under `work` (and read once); (folder, files, bytes)."""
    folder, suffix = CORPORA[kind]
    if not folder.is_dir():
        return None
    paths = sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file())[:limit]
    target = work / f"corpus-{kind}"
    size = 0
    for path in paths:
        copy = target / path.relative_to(folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
        size += len(copy.read_bytes())
    return target, len(paths), size


def one_run(folder: Path, base_path: Path, workers: int) -> dict:
    """In the measured process: index `folder` into a new base; the report's figures."""
    from metis_lite.base.core import Base

    with Base(base_path, create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING)
        base.add_source(folder)
        before = time.process_time()  # the process's start (Python, imports): not the run's
        report = base.index(workers=workers)
        indexer = time.process_time() - before
    return {
        "cpu_before": before,
        "indexer_cpu_seconds": indexer,
        "files": report.added,
        "skipped": len(report.skipped),
        "chunks": report.chunks,
        "seconds": report.seconds,
        "words_seconds": report.words_seconds,
        "workers": report.workers,
    }


def measured(folder: Path, work: Path, workers: int) -> dict:
    """One run in a child process: its figures, wall time and the CPU of all it started."""
    base_path = work / f"run-{workers}.db"
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(f"{base_path}{suffix}").unlink(missing_ok=True)
    load = os.getloadavg()[0]
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(
            [sys.executable, __file__, "--one", str(folder), str(base_path), str(workers)],
            stdout=out,
        )
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"the run with {workers} workers failed")
        out.seek(0)
        figures = json.loads(out.read())
    figures.update(
        wall_seconds=wall,
        cpu_seconds=usage.ru_utime + usage.ru_stime - figures.pop("cpu_before"),
        chunks_per_s=figures["chunks"] / figures["seconds"],
        load_before=load,
        load_after=os.getloadavg()[0],
    )
    figures["chunks_per_cpu_s"] = figures["chunks"] / figures["cpu_seconds"]
    return figures


def allowed_cores() -> int:
    from metis_lite.models.batching import allowed_cores as cores

    return cores()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--one":
        folder, base_path, workers = argv[1:4]
        print(json.dumps(one_run(Path(folder), Path(base_path), int(workers))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="html,pdf", help="html, pdf or both (default both)")
    parser.add_argument(
        "--workers", help="worker counts to compare, e.g. 1,2,4 (default: 1 and every core)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (default 1)")
    parser.add_argument("--limit", type=int, help="the first N files of each corpus only")
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    counts = (
        [int(n) for n in args.workers.split(",")] if args.workers else sorted({1, allowed_cores()})
    )
    results: dict = {"cores": allowed_cores(), "kinds": {}}
    with tempfile.TemporaryDirectory(prefix="bench-indexing-") as scratch:
        work = Path(scratch)
        for kind in args.kinds.split(","):
            copied = copy_corpus(kind, work, args.limit)
            if copied is None:
                print(f"{kind}: {CORPORA[kind][0]} is missing (apt-get install it): skipped")
                continue
            folder, files, size = copied
            print(f"{kind}: {files} files, {size / 1e6:.1f} MB, {results['cores']} cores allowed")
            runs = []
            for workers in counts:
                for _ in range(args.repeat):
                    figures = measured(folder, work, workers)
                    runs.append(figures)
                    aim = "PASS" if figures["chunks_per_s"] >= AIMS[kind] else "MISS"
                    print(
                        f"  {figures['workers']:>2} worker(s): {figures['chunks']:,} chunks in "
                        f"{figures['seconds']:.2f} s = {figures['chunks_per_s']:,.0f} chunks/s "
                        f"(aim {AIMS[kind]:,.0f}: {aim}); {figures['cpu_seconds']:.2f} CPU s = "
                        f"{figures['chunks_per_cpu_s']:,.0f} per CPU s (the indexer's own "
                        f"{figures['indexer_cpu_seconds']:.2f}); words all written at "
                        f"{figures['words_seconds']:.2f} s; load {figures['load_before']:.1f} → "
                        f"{figures['load_after']:.1f}",
                        flush=True,
                    )
            results["kinds"][kind] = {"files": files, "bytes": size, "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(results, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
