"""docs/eval.md's table in one command: every BEIR collection in a folder × both embedded models
× keyword, dense and hybrid (under each fusion), nDCG@10 judged as `metis-lite eval` judges.

    python benchmarks/eval_table.py COLLECTIONS               # every BEIR folder in it
    python benchmarks/eval_table.py COLLECTIONS --sets faquad_pt,ar_arcd --work /tmp/eval

Each (collection, model) pair gets its own base in --work (`faquad_pt.multilingual-e5-small.db`),
built from the corpus the first time (embedding is most of the time: about 25 minutes for the
five development collections with multilingual-e5-small on 2 cores) and reused after, so the
table is cheap to make again after a change that does not touch the vectors (fusion, words).

Each collection is also asked split over three bases (`… , 3 bases` rows): three copies of its
base, each keeping the documents whose path hashes to its third (the same chunks and vectors,
each base with its own word statistics), searched together with `search_bases`. A search of
several bases ranks as if they were one base, so these rows should be within 0.01 of the one
base's.

Prints the Markdown table, with the date and the machine, and writes it as JSON beside the bases,
with each question's nDCG@10 per mode; `--against OLD.json` (a JSON this script wrote) then
prints, per row and mode, the questions the new run ranks better, worse and the same.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import date
from pathlib import Path

from run import machine  # benchmarks/run.py: the machine line every benchmark prints

from metis_lite.base.core import Base
from metis_lite.base.multi import search_bases
from metis_lite.copies.backup import copy_base
from metis_lite.evaluation import metrics
from metis_lite.evaluation.bases import open_beir_base
from metis_lite.evaluation.beir import read_questions
from metis_lite.evaluation.runner import _items_by_chunk, resolve
from metis_lite.records import Result
from metis_lite.settings import EMBEDDED_MODEL, MINILM_MODEL

MODELS = (EMBEDDED_MODEL, MINILM_MODEL)
MODES = ("keyword", "dense", "hybrid:relative", "hybrid:rrf")
COLUMNS = ("keyword", "dense", "hybrid (relative, default)", "hybrid (rrf, spec)")
PARTS = 3
K = 10

Search = Callable[[str, str, str | None], list[Result]]
"""(question, mode, fusion) → results, best first."""


def run_one(folder: Path, model: str, work: Path) -> dict[str, dict[str, list[float]]]:
    """Each question's nDCG@10 per mode, on the collection's base and split over PARTS bases."""
    path = work / f"{folder.name}.{model}.db"
    if not path.exists():
        with Base(path, create=True) as base:
            base.configure(embedding={"provider": "embedded", "model": model})
    started = time.perf_counter()
    base, _ = open_beir_base(folder, path)
    base.close()
    evalset = read_questions(folder)
    with ExitStack() as stack:
        whole = stack.enter_context(Base(path))
        parts = [stack.enter_context(Base(p)) for p in split(path, work)]
        holders, _ = resolve(whole, {e for q in evalset.questions for e in q.expected})

        def alone(question: str, mode: str, fusion: str | None) -> list[Result]:
            return list(whole.search(question, mode=mode, top_k=K, fusion=fusion).results)

        def together(question: str, mode: str, fusion: str | None) -> list[Result]:
            answer = search_bases(parts, question, mode=mode, top_k=K, fusion=fusion)
            return list(answer.results)

        found = {
            model: ndcgs(alone, evalset, holders),
            f"{model}, {PARTS} bases": ndcgs(together, evalset, holders),
        }
    print(f"  {folder.name} × {model}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return found


def split(path: Path, work: Path) -> list[Path]:
    """PARTS copies of the base at `path`, each keeping the documents whose path hashes to it."""
    parts = []
    for n in range(PARTS):
        part = work / f"{path.stem}.part{n + 1}-of-{PARTS}.db"
        for old in work.glob(part.name + "*"):
            old.unlink()
        copy_base(path, part)
        with Base(part) as base:
            store = base.store
            for doc_id, name in store.db.execute("SELECT id, path FROM documents").fetchall():
                if int(hashlib.sha256(name.encode()).hexdigest(), 16) % PARTS != n:
                    store.remove_document(doc_id)
        parts.append(part)
    return parts


def ndcgs(search: Search, evalset, holders) -> dict[str, list[float]]:
    """Each question's nDCG@10 in each mode, judged as `metis-lite eval` judges them."""
    out: dict[str, list[float]] = {}
    for mode in MODES:
        plain, _, fusion = mode.partition(":")
        scores = []
        for question in evalset.questions:
            items = _items_by_chunk(question.expected, holders)
            ranked = [
                ((r.citation.source, r.citation.document), items.get(r.chunk_id, frozenset()))
                for r in search(question.text, plain, fusion or None)
            ]
            judged = metrics.judge(ranked, [e.grade for e in question.expected])
            scores.append(metrics.ndcg(judged, K))
        out[mode] = scores
    return out


def table(results: dict[str, dict[str, dict[str, list[float]]]]) -> str:
    lines = [
        "| collection | model | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for name, by_model in results.items():
        for model, scores in by_model.items():
            cells = [f"{metrics.mean(scores[m]):.3f}" if m in scores else "—" for m in MODES]
            lines.append(f"| {name} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(results, old) -> str:
    """Per row and mode: the questions this run ranks better than `old`, worse, the same."""
    lines = ["| collection | model | mode | old | new | better | worse | same |", "|---" * 8 + "|"]
    for name, by_model in results.items():
        for model, scores in by_model.items():
            before = old.get(name, {}).get(model, {})
            for mode in MODES:
                a, b = before.get(mode), scores.get(mode)
                if not isinstance(a, list) or b is None or len(a) != len(b):
                    continue
                better = sum(y > x + 1e-12 for x, y in zip(a, b, strict=True))
                worse = sum(y < x - 1e-12 for x, y in zip(a, b, strict=True))
                lines.append(
                    f"| {name} | {model} | {mode} | {metrics.mean(a):.3f} | {metrics.mean(b):.3f}"
                    f" | {better} | {worse} | {len(a) - better - worse} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="a folder of BEIR collections")
    parser.add_argument("--sets", help="comma-separated collection names (default: all)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--work", type=Path, default=Path("benchmarks/.eval-bases"))
    parser.add_argument("--against", type=Path, help="a JSON an earlier run wrote: compare")
    args = parser.parse_args()
    names = (
        args.sets.split(",")
        if args.sets
        else sorted(p.name for p in args.root.iterdir() if (p / "corpus.jsonl").is_file())
    )
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name in names:
        for model in args.models.split(","):
            results.setdefault(name, {}).update(run_one(args.root / name, model, args.work))
    header = f"nDCG@10, {date.today().isoformat()}, {machine()}"
    print(header + "\n\n" + table(results))
    if args.against:
        old = json.loads(args.against.read_text(encoding="utf-8"))["results"]
        print("\nPer question, against " + str(args.against) + "\n\n" + paired(results, old))
    (args.work / "eval-table.json").write_text(
        json.dumps({"run": header, "results": results}, indent=1), encoding="utf-8"
    )


if __name__ == "__main__":
    main()
