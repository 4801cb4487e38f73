"""`metis-lite search`: ask a base a question; each result with its citation and score line."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from metis_lite.cli.common import add_command, print_json, replaced_text, say, warn
from metis_lite.records import Filters
from metis_lite.settings import FUSIONS, KINDS, MODES, TOP_K, TOP_K_MAX

_NOT_EMBEDDED = {"NO_VECTORS", "EMBEDDING_MODEL_UNAVAILABLE"}
"""Warnings of a search whose question was not embedded: it ran by words only."""

ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1"}
"""Read by OpenBLAS when NumPy loads it: a search process starts no BLAS thread of its own. The
embedded models run BLAS at one thread anyway (models/batching.py), and the rest of a search
(one matrix-vector product) does not need two; starting them is ~50 ms of a fresh process's
NumPy import on the project's 2 cores (more when the machine is busy). A value the user set is
kept."""


def add_parser(commands: Any) -> None:
    search = add_command(
        commands,
        "search",
        run,
        "ask a base a question",
        'metis-lite search handbook.db "how many holidays do I get"',
        'metis-lite search handbook.db "configuracao do proxy" --mode keyword --top-k 3',
        'metis-lite search handbook.db "expenses" --prefix handbook/policies/ --kind md --json',
    )
    search.add_argument("base", help="the base file")
    search.add_argument("question", help="the question, in any language the base holds")
    search.add_argument(
        "--mode",
        choices=MODES,
        default="hybrid",
        help="hybrid: by meaning and by words, fused; dense: by meaning only; keyword: by words"
        " only, no model needed (default %(default)s)",
    )
    search.add_argument(
        "--top-k",
        type=int,
        default=TOP_K,
        metavar="N",
        help=f"results to return (1-{TOP_K_MAX}; default %(default)s)",
    )
    search.add_argument(
        "--prefix",
        help="keep documents whose path starts with this, as results show it "
        "(handbook/policies/) or relative to the source (policies/) (default: every path)",
    )
    search.add_argument(
        "--kind",
        action="append",
        type=str.lower,
        choices=KINDS + ("note",),
        help="keep this kind, in any case (md, PDF); repeatable (default: every kind)",
    )
    search.add_argument(
        "--source",
        action="append",
        metavar="NAME",
        help="keep this source, as results show it (handbook, metis-BASE for notes); "
        "repeatable (default: every source)",
    )
    search.add_argument("--no-rerank", action="store_true", help="skip the reranker")
    search.add_argument(
        "--fusion",
        choices=FUSIONS,
        help="how hybrid joins its two lists: relative (scores relative to each list's best) or"
        " rrf (reciprocal-rank fusion); default: the base's spec.fusion, else relative",
    )
    search.add_argument(
        "--all-copies",
        action="store_true",
        help="every passage a result of its own, even one nearly the same as a result before it"
        " (default: one result per text, the other places listed as 'also in')",
    )
    search.add_argument(
        "--json", action="store_true", help="print exactly what the HTTP API answers"
    )


def run(args: argparse.Namespace) -> int:
    if "numpy" not in sys.modules:  # a process of its own (later, it would change nothing)
        for name, value in ONE_BLAS_THREAD.items():
            os.environ.setdefault(name, value)
    from metis_lite.base.core import Base

    filters = Filters(
        path_prefix=args.prefix, kinds=tuple(args.kind or ()), sources=tuple(args.source or ())
    )
    with Base.open(args.base) as base:
        answer = base.search(
            args.question,
            mode=args.mode,
            top_k=args.top_k,
            rerank=not args.no_rerank,
            filters=filters,
            fusion=args.fusion,
            collapse=not args.all_copies,
        )
    if args.json:
        from metis_lite.service.serialize import answer_to_json

        print_json(answer_to_json(answer))
        return 0
    for warning in answer.warnings:
        warn(f"warning: {warning.code}: {warning.message}")
    for n, result in enumerate(answer.results, start=1):
        c = result.citation
        say(f"{n}. {c.title} — {citation_text(c)}")
        if result.fact is not None and not result.fact.holds:
            say(f"   {replaced_text(result.fact.replaced_by, result.fact.replaced_at)}")
        if c.headings:
            say(f"   {' > '.join(c.headings)}")
        say(f"   {c.snippet}")
        for place in result.also_in:
            say(f"   also in {citation_text(place.citation)}")
        say(f"   {score_line(result.scores, answer.mode)}")
    warn(summary_line(answer))
    return 0


def citation_text(c: Any) -> str:
    """`source/path:line` (md, txt), `source/path, page N` (pdf), `source/path, slide N`
    (pptx: its page is its slide's number), `source/path#anchor` (html, epub: the cited
    heading's id, where the page gives it one), `source/path` (docx, odt); `(OCR)` after a
    passage read from an image."""
    page = "slide" if c.kind == "pptx" else "page"
    where = f", {page} {c.page}" if c.page else f":{c.line}" if c.line else ""
    anchor = f"#{c.anchor}" if c.anchor else ""
    ocr = " (OCR)" if c.ocr else ""
    return f"{c.source}/{c.document}{anchor}{where}{ocr}"


def score_line(scores: Any, mode: str = "hybrid") -> str:
    """The score line (docs/how-search-works.md):
    meaning 0.830 (#1) · words 7.41 (#2) · fused 0.0328 · reranker 0.970.

    Only the scores the mode produced: a keyword or dense search has no fused score."""
    parts = []
    if scores.dense is not None:
        parts.append(f"meaning {scores.dense:.3f} (#{scores.dense_rank})")
    if scores.keyword is not None:
        parts.append(f"words {scores.keyword:.2f} (#{scores.keyword_rank})")
    if scores.fused is not None and mode == "hybrid":
        parts.append(f"fused {scores.fused:.4f}")
    if scores.rerank is not None:
        parts.append(f"reranker {scores.rerank:.3f}")
    return " · ".join(parts)


def summary_line(answer: Any) -> str:
    """`N results, mode; took T ms (…)`, naming only the steps that ran."""
    codes = {w.code for w in answer.warnings}
    t = answer.took
    ran = {
        "embed": answer.mode != "keyword" and not codes & _NOT_EMBEDDED,
        "meaning": answer.mode != "keyword" and not codes & _NOT_EMBEDDED,
        "words": answer.mode != "dense",
        "fuse": answer.mode == "hybrid",
        "rerank": answer.reranked or "RERANKER_UNAVAILABLE" in codes,
    }
    ms = {
        "embed": t.embed,
        "meaning": t.dense,
        "words": t.keyword,
        "fuse": t.fuse,
        "rerank": t.rerank,
    }
    steps = " · ".join(f"{step} {ms[step]:.1f}" for step, did in ran.items() if did)
    count = len(answer.results)
    return (
        f"{count} result{'' if count == 1 else 's'}, {answer.mode}"
        f"{', reranked' if answer.reranked else ''}; took {t.total:.1f} ms"
        + (f" ({steps})" if steps else "")
    )
