"""One result per text, at what cost: a hybrid search with collapsing beside the same search
without it (`collapse=False`), interleaved question by question on one base.

    python benchmarks/bench_collapse.py [--size 100000] [--work DIR]

The base is benchmarks/run.py's: a generated corpus indexed by words, random unit vectors as
the default model's, questions from the same word law; the embedded model embeds each
question. Prints p50/p95 of `took.total` both ways and their ratio (aim: ≤ 1.1 at 100,000
chunks), with the machine. Timings on a shared machine are noisy: read the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gencorpus import Vocabulary, questions  # noqa: E402
from run import build, machine, p  # noqa: E402

from metis_lite import Base  # noqa: E402

AIM = 1.1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="chunks in the base")
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--work", help="folder for the corpus and base (default: temp)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="metis-collapse-"))
    vocab = Vocabulary(seed=7)
    asks = questions(vocab, args.questions)
    path = work / f"bench-{args.size}.db"
    if not path.exists():
        build(args.size, work, vocab, lambda line: print(line, file=sys.stderr))
    with_ms, without_ms, collapsed = [], [], 0
    with Base(path) as base:
        for ask in asks[:10]:  # warm: the matrix read, the model loaded, the words in memory
            base.search(ask, top_k=10, rerank=False)
        time.sleep(1.0)
        for n, ask in enumerate(asks):
            first, second = (True, False) if n % 2 else (False, True)
            for collapse in (first, second):
                answer = base.search(ask, top_k=10, rerank=False, collapse=collapse)
                (with_ms if collapse else without_ms).append(answer.took.total)
                collapsed += sum(len(r.also_in) for r in answer.results) if collapse else 0
    ratio = p(with_ms, 50) / p(without_ms, 50)
    print(machine())
    print(f"{args.size:,} chunks, {len(asks)} hybrid questions, top_k 10, no reranker")
    print(f"  without collapsing: p50 {p(without_ms, 50):.1f} ms, p95 {p(without_ms, 95):.1f} ms")
    print(f"  with collapsing:    p50 {p(with_ms, 50):.1f} ms, p95 {p(with_ms, 95):.1f} ms")
    print(f"  ratio of p50: {ratio:.3f} (aim ≤ {AIM}); places collapsed: {collapsed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
