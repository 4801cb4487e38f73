"""Replay a docs set's questions under fusion variants, from every chunk's cosine and BM25.

    python3 benchmarks/docs_replay.py BASE benchmarks/docs/git.jsonl [--variants a,b] [--dump Q]

Each question is prepared once as a hybrid search prepares it (metis_lite.retrieval.steps.prepare: its
vector, its mean cosine over the base, its words and `full`), then every chunk's cosine and
every matching chunk's BM25 are read, and each variant ranks the chunks; the first 10 chunks
are turned into distinct pages as `metis-lite eval` does (metrics.judge), with `X.txt` beside
`X.html` read as `X.html` (docs_eval.py's "page" reading). `relative` and `rrf` reproduce the
pipeline's own fusions (checked against docs_eval.py); the others are candidate changes.
`--dump Q` prints, for question number Q, each of the first hybrid chunks with its two parts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metis_lite import Base  # noqa: E402
from metis_lite.evaluation import metrics  # noqa: E402
from metis_lite.records import Filters  # noqa: E402
from metis_lite.retrieval import keyword  # noqa: E402
from metis_lite.retrieval.steps import prepare  # noqa: E402
from metis_lite.settings import RRF_K, WEAK_SHARE  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from docs_eval import as_page, judged  # noqa: E402

K = 10


def read_base(base: Base):
    with base.searching() as ctx:
        rows = ctx.store.db.execute(
            "SELECT c.id, d.path, length(c.text) FROM chunks c JOIN documents d ON d.id = c.document_id"
            " ORDER BY c.id"
        ).fetchall()
    ids = np.array([r[0] for r in rows], dtype=np.int64)
    paths = [r[1] for r in rows]
    return ids, paths


def lists_of(base: Base, question: str, ids: np.ndarray):
    """Every chunk's cosine (nan: no vector), BM25 (0: no word), the question's mean cosine
    and `full`."""
    with base.searching() as ctx:
        ready = prepare(ctx, question, mode="hybrid", filters=Filters(), took={"embed": 0.0})
        known = ctx.vectors.cosines(ready.query, ids.tolist())
        cos = np.array([known.get(int(c), np.nan) for c in ids])
        hits = keyword.search(
            ctx.store, ready.question, len(ids), asked=ready.asked, index=ctx.words
        )
        bm = dict((h.chunk_id, h.score) for h in hits)
        bm25 = np.array([bm.get(int(c), 0.0) for c in ids])
        return cos, bm25, ready.unrelated, ready.full


def order(scores: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indexes best first; ties by the lower chunk id (retrieval/fusion.py)."""
    return np.lexsort((ids, -scores))


def ranks_of(values: np.ndarray, ids: np.ndarray, present: np.ndarray) -> np.ndarray:
    """1-based rank of each chunk in a list (inf where not in it)."""
    r = np.full(len(values), np.inf)
    idx = np.lexsort((ids, -values))
    idx = idx[present[idx]]
    r[idx] = np.arange(1, len(idx) + 1)
    return r


def variant_scores(name: str, cos, bm25, unrelated, full, ids, lengths=None, doc_of=None):
    has_vec = ~np.isnan(cos)
    c = np.where(has_vec, cos, -np.inf)
    best = np.nanmax(cos)
    spread = max(best - unrelated, WEAK_SHARE * (1.0 - unrelated))
    meaning = np.where(
        has_vec, np.maximum(0.0, (np.nan_to_num(cos, nan=unrelated) - unrelated) / spread), 0.0
    )
    share = bm25 / full if full > 0 else np.zeros_like(bm25)
    words = share / max(WEAK_SHARE, share.max(initial=0.0))
    if name == "relative":
        return 0.5 * meaning + 0.5 * words
    if name == "dense":
        return c
    if name == "keyword":
        return np.where(bm25 > 0, bm25, -np.inf)
    if name.startswith("rrf"):
        depth = 50
        rd = ranks_of(c, ids, has_vec)
        rk = ranks_of(bm25, ids, bm25 > 0)
        s = np.where(rd <= depth, 1.0 / (RRF_K + rd), 0.0) + np.where(
            rk <= depth, 1.0 / (RRF_K + rk), 0.0
        )
        return np.where(s > 0, s, -np.inf)
    if name.startswith("share"):  # relative with DENSE_SHARE = x
        x = float(name[5:])
        return x * meaning + (1 - x) * words
    if name.startswith("mfloor"):  # meaning's weak floor at x of the way to 1 (0: none)
        x = float(name[6:])
        sp = max(best - unrelated, x * (1.0 - unrelated))
        m = np.where(
            has_vec, np.maximum(0.0, (np.nan_to_num(cos, nan=unrelated) - unrelated) / sp), 0.0
        )
        return 0.5 * m + 0.5 * words
    if name == "words-by-full":  # words read against the question's full weight, capped at 1
        return 0.5 * meaning + 0.5 * np.minimum(1.0, share)
    if name.startswith("wfloor"):  # words' best read against at least x of full
        x = float(name[6:])
        return 0.5 * meaning + 0.5 * share / max(x, share.max(initial=0.0))
    if name == "page-words":
        # words by page: each chunk's words part is its page's best words part (a page answers
        # as a whole; its chunks share the page's BM25), meaning stays the chunk's own
        best_of = {}
        for i, d in enumerate(doc_of):
            best_of[d] = max(best_of.get(d, 0.0), words[i])
        pw = np.array([best_of[d] for d in doc_of])
        return 0.5 * meaning + 0.5 * pw
    if name.startswith("rank-words"):
        # words part from the keyword rank, not the score: 1 / log2(rank + 1)
        rk = ranks_of(bm25, ids, bm25 > 0)
        w = np.where(np.isfinite(rk), 1.0 / np.log2(rk + 1.0), 0.0) * min(
            1.0, share.max(initial=0.0) / WEAK_SHARE
        )
        return 0.5 * meaning + 0.5 * w
    if name.startswith("dbsf") or name.startswith("z"):
        # distribution-based: each list read against its own top 50's mean and deviation
        x = float(name[4:] or 0.5) if name.startswith("dbsf") else float(name[1:] or 0.5)

        def dist(v, present):
            top = np.sort(v[present])[::-1][:50]
            mu, sd = top.mean(), max(top.std(), 1e-9)
            if name.startswith("dbsf"):
                return np.where(present, np.clip((v - (mu - 3 * sd)) / (6 * sd), 0, 1), 0.0)
            return np.where(present, np.maximum(0.0, (v - mu) / sd), 0.0)

        return x * dist(np.nan_to_num(cos, nan=-1.0), has_vec) + (1 - x) * dist(bm25, bm25 > 0)
    raise SystemExit(f"unknown variant {name}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("evalset")
    parser.add_argument(
        "--variants", default="keyword,dense,relative,rrf,share0.7,words-by-full,wfloor1.0"
    )
    parser.add_argument("--dump", type=int)
    parser.add_argument(
        "--drop-twins",
        action="store_true",
        help="leave out X.txt beside X.html (as if the tree held the HTML only)",
    )
    parser.add_argument(
        "--exclude", default="", help="comma-separated path prefixes treated as not in the base"
    )
    args = parser.parse_args()
    questions = [json.loads(x) for x in Path(args.evalset).read_text().splitlines() if x.strip()]
    variants = args.variants.split(",")
    excluded = [p for p in args.exclude.split(",") if p]
    with Base.open(args.base) as base:
        folder = Path([s.path for s in base.sources() if s.path][0])
        ids, paths = read_base(base)
        pages = [as_page(p, folder) for p in paths]
        keep = np.array(
            [
                not any(p.startswith(e) for e in excluded)
                and not (args.drop_twins and as_page(p, folder) != p)
                for p in paths
            ]
        )
        totals = {v: [0.0, 0.0] for v in variants}
        per_q = []
        for n, q in enumerate(questions, 1):
            if args.dump and n != args.dump:
                continue
            expected = {e["document"]: e.get("grade", 1) for e in q["expected"]}
            cos, bm25, unrelated, full = lists_of(base, q["question"], ids)
            row = {}
            for v in variants:
                s = variant_scores(v, cos, bm25, unrelated, full, ids, doc_of=pages)
                s = np.where(keep, s, -np.inf)
                top = [pages[i] for i in order(s, ids)[:K] if np.isfinite(s[i])]
                j = judged(top, expected)
                nd = metrics.ndcg(j, K)
                first = bool(top) and top[0] in expected
                totals[v][0] += nd
                totals[v][1] += first
                row[v] = (round(nd, 3), first, top[:3])
            per_q.append((q["question"], row))
            if args.dump:
                best = np.nanmax(cos)
                spread = max(best - unrelated, WEAK_SHARE * (1 - unrelated))
                share = bm25 / full
                wscale = max(WEAK_SHARE, share.max())
                print(
                    f"{q['question']!r}: unrelated {unrelated:.3f} best cos {best:.3f} spread "
                    f"{spread:.3f} full {full:.2f} best share {share.max():.2f}"
                )
                s = variant_scores("relative", cos, bm25, unrelated, full, ids)
                for i in order(s, ids)[:12]:
                    m = max(0, (cos[i] - unrelated) / spread)
                    w = share[i] / wscale
                    print(
                        f"  {s[i]:.3f} = .5*{m:.3f} + .5*{w:.3f}  cos {cos[i]:.3f} bm25 {bm25[i]:.2f}  "
                        f"{paths[i]}"
                    )
                for e in expected:
                    mask = np.array([p == e for p in pages])
                    if mask.any():
                        i = np.flatnonzero(mask)[np.argmax(s[mask])]
                        rank = int((s > s[i]).sum()) + 1
                        print(
                            f"  expected {e}: best chunk #{rank} {s[i]:.3f} cos {cos[i]:.3f} "
                            f"(meaning {max(0, (cos[i] - unrelated) / spread):.3f}) words {share[i] / wscale:.3f}"
                        )
        count = len(per_q)
        print(
            f"{args.evalset}: {count} questions" + (f", excluding {excluded}" if excluded else "")
        )
        for v in variants:
            print(f"  {v:<16} nDCG@10 {totals[v][0] / count:.3f}  first {totals[v][1] / count:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
