"""Identical files and chunks cost no second embedding: a folder of pages indexed alone, then
with byte-identical copies of every page beside it, every page ending in the same notice.

    python benchmarks/bench_copies.py [--pages 200] [--copies 2] [--cost-ms 2]

The model is a stand-in that hashes words into 64 dimensions and waits `--cost-ms` per text
(multilingual-e5-small embeds a ~250-token passage in a few ms per core), counting the texts
it is given. Prints, for each folder: files, documents, copies, chunks, texts embedded and
the run's seconds, with the machine; and the texts a run would embed if every file and every
chunk were embedded on its own. Aim: the copies add no text embedded.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import machine  # noqa: E402

from metis_lite import Base  # noqa: E402
from metis_lite.models import registry  # noqa: E402
from metis_lite.models.base import Provider  # noqa: E402

NOTICE = "Copyright notice: share this page under the same licence, without any warranty."


class Stand:
    """Words hashed into 64 buckets, after `cost` seconds a text; counts what it embeds."""

    name = "copies-bench"

    def __init__(self, cost: float) -> None:
        self.cost, self.texts = cost, 0

    def embed(self, texts):
        self.texts += len(texts)
        time.sleep(self.cost * len(texts))
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.split():
                out[row, hashlib.blake2b(word.encode(), digest_size=2).digest()[0] % 64] += 1
            out[row, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def close(self) -> None:
        pass


def make_pages(folder: Path, pages: int) -> None:
    for n in range(pages):
        one = " ".join(f"alpha{n}w{i}" for i in range(120))
        two = " ".join(f"beta{n}w{i}" for i in range(120))
        (folder / f"page{n:04}.md").write_text(
            f"# Guide\n\n## Part {n}\n\n{one}\n\n## More {n}\n\n{two}\n\n## Licence\n\n{NOTICE}\n",
            encoding="utf-8",
        )


def run(folder: Path, base_path: Path, cost: float) -> dict[str, float]:
    model = Stand(cost)
    provider = Provider("copies-bench", "embedding", lambda options, making: model)
    with registry.registered(provider), Base(base_path, create=True) as base:
        base.configure(embedding={"provider": "copies-bench"})
        base.add_source(folder)
        started = time.perf_counter()
        report = base.index()
        seconds = time.perf_counter() - started
        (source,) = base.sources()
    files = sum(1 for p in folder.rglob("*.md"))
    return {
        "files": files,
        "documents": source.documents,
        "copies": source.copies,
        "chunks": report.chunks,
        "embedded": model.texts,
        "seconds": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--copies", type=int, default=2, help="copies of every page")
    parser.add_argument("--cost-ms", type=float, default=2.0, help="the model's time a text")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="metis-copies-"))
    try:
        alone = work / "alone"
        alone.mkdir()
        make_pages(alone, args.pages)
        mirrored = work / "mirrored"
        shutil.copytree(alone, mirrored / "current")
        for n in range(args.copies):
            shutil.copytree(alone, mirrored / f"old{n}")
        rows = [
            ("pages alone", run(alone, work / "alone.db", args.cost_ms / 1000)),
            ("with copies", run(mirrored, work / "mirrored.db", args.cost_ms / 1000)),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(machine())
    print(f"model: words hashed, {args.cost_ms:g} ms a text")
    print("folder        files  documents  copies  chunks  embedded  seconds")
    for label, r in rows:
        print(
            f"{label:<12} {r['files']:>6} {r['documents']:>10} {r['copies']:>7} {r['chunks']:>7}"
            f" {r['embedded']:>9} {r['seconds']:>8.2f}"
        )
    each = rows[1][1]["files"] * rows[0][1]["chunks"] // rows[0][1]["files"]
    print(f"every file and chunk embedded on its own: {each} texts for the folder with copies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
