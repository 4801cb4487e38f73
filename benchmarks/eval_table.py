"""docs/eval.md's table in one command: every BEIR collection in a folder × both embedded models
× keyword, dense and hybrid (under each fusion), nDCG@10 from `metis-lite eval`'s own runner.

    python benchmarks/eval_table.py ../shared/eval            # every collection in it
    python benchmarks/eval_table.py ../shared/eval --sets faquad_pt,ar_arcd --work /tmp/eval

Each (collection, model) pair gets its own base in --work (`faquad_pt.multilingual-e5-small.db`),
built from the corpus the first time (embedding is most of the time: about 25 minutes for the
five development collections with multilingual-e5-small on 2 cores) and reused after, so the
table is cheap to make again after a change that does not touch the vectors (fusion, words).
Prints the Markdown table, with the date and the machine, and writes it as JSON beside the bases.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path

from run import machine  # benchmarks/run.py: the machine line every benchmark prints

from metis_lite.base import Base
from metis_lite.evaluation.bases import open_beir_base
from metis_lite.evaluation.beir import read_questions
from metis_lite.evaluation.runner import evaluate
from metis_lite.settings import EMBEDDED_MODEL, MINILM_MODEL

MODELS = (EMBEDDED_MODEL, MINILM_MODEL)
MODES = ("keyword", "dense", "hybrid:relative", "hybrid:rrf")
COLUMNS = ("keyword", "dense", "hybrid (relative, default)", "hybrid (rrf, spec)")


def run_one(folder: Path, model: str, work: Path) -> dict[str, float]:
    path = work / f"{folder.name}.{model}.db"
    if not path.exists():
        with Base(path, create=True) as base:
            base.configure(embedding={"provider": "embedded", "model": model})
    started = time.perf_counter()
    base, _ = open_beir_base(folder, path)
    try:
        report = evaluate(base, read_questions(folder), modes=MODES, k=10)
    finally:
        base.close()
    print(f"  {folder.name} × {model}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {mode: round(metrics["ndcg@10"], 3) for mode, metrics in report.metrics().items()}


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| collection | model | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for name, by_model in results.items():
        for model, scores in by_model.items():
            cells = [f"{scores[m]:.3f}" if m in scores else "—" for m in MODES]
            lines.append(f"| {name} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a folder of BEIR collections")
    parser.add_argument("--sets", help="comma-separated collection names (default: all)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--work", type=Path, default=Path("benchmarks/.eval-bases"))
    args = parser.parse_args()
    names = (
        args.sets.split(",")
        if args.sets
        else sorted(p.name for p in args.root.iterdir() if (p / "corpus.jsonl").is_file())
    )
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict[str, float]]] = {}
    for name in names:
        for model in args.models.split(","):
            results.setdefault(name, {})[model] = run_one(args.root / name, model, args.work)
    header = f"nDCG@10, {date.today().isoformat()}, {machine()}"
    print(header + "\n\n" + table(results))
    (args.work / "eval-table.json").write_text(
        json.dumps({"run": header, "results": results}, indent=1), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
