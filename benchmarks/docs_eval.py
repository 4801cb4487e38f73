"""Real documentation, measured: ask a base built from a folder exactly as installed the
questions of a benchmarks/docs/*.jsonl set, per mode, and report nDCG@10 and right page first.

    python3 benchmarks/docs_eval.py BASE benchmarks/docs/sqlite.jsonl [--json OUT] [--examples 5]

BASE was made with `metis-lite index BASE FOLDER` (one source; the set's documents are paths
inside it). Modes: keyword, dense, hybrid (relative fusion, the default) and hybrid:rrf.

Scoring is `metis-lite eval`'s (metis_lite.evaluation.metrics): each question is asked as a user
asks it (top_k = 10); results are documents, the first chunk of a document deciding its place;
nDCG@10 with linear gains from the set's grades. "first" (right page first) is the share of
questions whose top result's document is an expected page (any grade).

Two readings of a result's document: `strict` (the path as indexed) and `page`, where a file
`X.txt` that lies beside `X.html` in the folder (git-doc ships each manual page both as HTML
and as its AsciiDoc source), or Sphinx's copy of a page's source `_sources/X.rst.txt`
(python3.11-doc), counts as the page `X.html`: the same text, so the same answer. On a tree
without such twins (sqlite3-doc) the two readings are equal.

One result per text (the default; `--all-copies` turns it off): a result stands for its
passage in each of its places (`also_in`), so its document is the first of its places that
the set expects, else its own.

For the analysis it also asks each question with top_k = 100 and keeps, per mode, the place of
the first expected page (page reading) and the first pages of the keyword list, so that the
questions dense ranks better than hybrid can be shown with what the words put first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_lite import Base  # noqa: E402
from metis_lite.evaluation import metrics  # noqa: E402

MODES = ("keyword", "dense", "hybrid", "hybrid:rrf")
K = 10
DEEP = 100


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


SPHINX_SOURCES = "_sources/"
"""Where Sphinx copies each page's source: `_sources/X.rst.txt` (older: `_sources/X.txt`)."""


def as_page(document: str, folder: Path | None) -> str:
    """`X.txt` beside `X.html`, or Sphinx's `_sources/X.rst.txt` of `X.html`, is that page."""
    if folder is None or not document.endswith(".txt"):
        return document
    stem = document[: -len(".txt")]
    stems = [stem]
    if stem.startswith(SPHINX_SOURCES):
        source = stem[len(SPHINX_SOURCES) :]
        stems += [source, source.rpartition(".")[0]]
    for each in stems:
        if each and (folder / f"{each}.html").is_file():
            return f"{each}.html"
    return document


def ask(base: Base, question: str, mode: str, top_k: int, collapse: bool = True):
    name, _, fusion = mode.partition(":")
    return base.search(
        question, mode=name, top_k=top_k, rerank=False, fusion=fusion or None, collapse=collapse
    )


def places(result) -> list[str]:
    """The documents of a result's text: its own, then those of its `also_in`."""
    return [result.citation.document, *(p.citation.document for p in result.also_in)]


def judged_document(documents: list[str], expected: dict[str, int]) -> str:
    return next((d for d in documents if d in expected), documents[0])


def judged(documents: list[str], expected: dict[str, int]) -> metrics.Judged:
    names = list(expected)
    rows = [(d, frozenset([names.index(d)]) if d in expected else frozenset()) for d in documents]
    return metrics.judge(rows, [expected[n] for n in names])


def distinct(documents: list[str]) -> list[str]:
    seen: list[str] = []
    for d in documents:
        if d not in seen:
            seen.append(d)
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base")
    parser.add_argument("evalset")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", help="write every question's outcome here")
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument(
        "--all-copies", action="store_true", help="every passage a result (collapse=False)"
    )
    args = parser.parse_args()
    modes = args.modes.split(",")
    questions = load(Path(args.evalset))
    with Base.open(args.base) as base:
        sources = base.sources()
        folders = [s.path for s in sources if s.path]
        folder = Path(folders[0]) if len(folders) == 1 else None
        status = base.status()
        rows = []
        timings = {m: 0.0 for m in modes}
        for q in questions:
            expected = {e["document"]: e.get("grade", 1) for e in q["expected"]}
            row = {"id": q.get("id"), "question": q["question"], "modes": {}}
            for mode in modes:
                started = time.perf_counter()
                collapse = not args.all_copies
                answer = ask(base, q["question"], mode, K, collapse)
                timings[mode] += time.perf_counter() - started
                docs = [places(r) for r in answer.results]
                deep = [places(r) for r in ask(base, q["question"], mode, DEEP, collapse).results]
                out = {}
                for reading, norm in (
                    ("strict", lambda d: d),
                    ("page", lambda d: as_page(d, folder)),
                ):
                    top = [judged_document([norm(d) for d in ds], expected) for ds in docs]
                    j = judged(top, expected)
                    ranking = distinct(
                        [judged_document([norm(d) for d in ds], expected) for ds in deep]
                    )
                    place = next((i for i, d in enumerate(ranking, 1) if d in expected), None)
                    out[reading] = {
                        "ndcg": metrics.ndcg(j, K),
                        "first": bool(top) and top[0] in expected,
                        "place": place,  # first expected page within 100 chunks, distinct pages
                    }
                out["top"] = distinct([ds[0] for ds in docs])[:5]
                out["warnings"] = [w.code for w in answer.warnings]
                row["modes"][mode] = out
            rows.append(row)
    summary = {
        "base": args.base,
        "evalset": args.evalset,
        "documents": status.documents,
        "chunks": status.chunks,
        "chunks_without_vector": getattr(status, "chunks_without_vector", None),
        "questions": len(rows),
        "modes": {},
    }
    for mode in modes:
        summary["modes"][mode] = {
            reading: {
                "ndcg@10": round(
                    metrics.mean([r["modes"][mode][reading]["ndcg"] for r in rows]), 4
                ),
                "first": round(
                    metrics.mean([float(r["modes"][mode][reading]["first"]) for r in rows]), 4
                ),
            }
            for reading in ("strict", "page")
        }
        summary["modes"][mode]["ms_per_search"] = round(1000 * timings[mode] / len(rows), 1)

    def better(a: str, b: str, reading: str = "page") -> int:
        n = 0
        for r in rows:
            pa, pb = r["modes"][a][reading]["place"], r["modes"][b][reading]["place"]
            if pa is not None and (pb is None or pa < pb):
                n += 1
        return n

    print(
        f"{args.evalset}: {summary['documents']} documents, {summary['chunks']} chunks, "
        f"{len(rows)} questions"
    )
    print(
        f"{'mode':<12} {'nDCG@10':>8} {'first':>6}   {'nDCG strict':>11} {'first strict':>12}  ms"
    )
    for mode in modes:
        s = summary["modes"][mode]
        print(
            f"{mode:<12} {s['page']['ndcg@10']:>8.3f} {s['page']['first']:>6.3f}   "
            f"{s['strict']['ndcg@10']:>11.3f} {s['strict']['first']:>12.3f}  {s['ms_per_search']}"
        )
    pairs = []
    if "dense" in modes and "hybrid" in modes:
        pairs.append(("dense", "hybrid"))
    if "keyword" in modes and "hybrid" in modes:
        pairs.append(("keyword", "hybrid"))
    for a, b in pairs:
        summary[f"{a}_vs_{b}"] = {a: better(a, b), b: better(b, a)}
        print(
            f"first expected page placed higher: {a} {better(a, b)}, {b} {better(b, a)} "
            f"(of {len(rows)}; others the same)"
        )
    if "dense" in modes and "hybrid" in modes and "keyword" in modes:
        worse = [
            r
            for r in rows
            if r["modes"]["dense"]["page"]["place"] is not None
            and (
                r["modes"]["hybrid"]["page"]["place"] is None
                or r["modes"]["hybrid"]["page"]["place"] > r["modes"]["dense"]["page"]["place"]
            )
        ]
        worse.sort(
            key=lambda r: (
                (r["modes"]["hybrid"]["page"]["place"] or 999)
                - r["modes"]["dense"]["page"]["place"]
            ),
            reverse=True,
        )
        print(f"\nquestions hybrid places lower than dense ({len(worse)}), widest first:")
        for r in worse[: args.examples]:
            m = r["modes"]
            print(
                f"- {r['question']!r}: dense #{m['dense']['page']['place']}, hybrid "
                f"#{m['hybrid']['page']['place']}, keyword #{m['keyword']['page']['place']}"
            )
            print(f"    keyword top: {', '.join(m['keyword']['top'][:3])}")
            print(f"    hybrid top:  {', '.join(m['hybrid']['top'][:3])}")
            print(f"    dense top:   {', '.join(m['dense']['top'][:3])}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "questions": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
