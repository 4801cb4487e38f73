"""An evaluation's report as `eval --json` prints it, and as a person reads it.

`to_json` turns the runner's EvalReport (with the set, the base and how it was chosen) into the
JSON the command prints; `human` turns that JSON into the table, the comparisons and the
questions every mode missed. Questions and document names come from the evaluation set: they are
shown with their control characters escaped, never obeyed by the terminal.
"""

from __future__ import annotations

from typing import Any

from metis_lite.base.core import Base
from metis_lite.escapes import escape_controls
from metis_lite.evaluation import saved
from metis_lite.evaluation.bases import BaseChoice
from metis_lite.evaluation.runner import DEEP_K, EvalReport
from metis_lite.evaluation.sets import EvalSet

MISSED_SHOWN = 10
"""Questions every mode missed that the text report lists; `--json` holds them all."""


def to_json(report: EvalReport, evalset: EvalSet, base: Base, choice: BaseChoice) -> dict[str, Any]:
    """The report as `--json` prints it."""
    status = base.store.counts()
    spec = saved.spec_snapshot(base)
    warnings: list[dict[str, Any]] = [
        {"code": w.code, "message": w.message} for w in report.warnings
    ]
    warnings += [{"code": w.code, "message": w.message} for w in choice.warnings]
    for mode in report.modes:
        warnings += [
            {"mode": mode.mode, "code": code, "message": message, "questions": count}
            for code, message, count in mode.warnings
        ]
    return {
        "evalset": {
            "name": evalset.name,
            "kind": evalset.kind,
            "origin": evalset.origin,
            "questions": len(evalset.questions),
        },
        "base": {
            "path": str(choice.path),
            "where": choice.where,
            "built": choice.built,
            **spec,
            "documents": status["documents"],
            "chunks": status["chunks"],
        },
        "k": report.k,
        "rerank": report.rerank,
        "modes": report.metrics(),
        "reranked": {m.mode: m.reranked for m in report.modes},
        "skipped": [{"mode": s.mode, "code": s.code, "message": s.message} for s in report.skipped],
        "comparisons": [
            {
                "modes": [c.first, c.second],
                "better": {c.first: c.first_better, c.second: c.second_better},
                "same": c.same,
                "examples": [
                    {
                        "question": e.question,
                        "expected": e.expected,
                        "better": e.better,
                        "ranks": dict(e.ranks),
                        "why": e.why,
                    }
                    for e in c.examples
                ],
            }
            for c in report.comparisons
        ],
        "missed": [
            {"question": m.question, "expected": list(m.expected), "ranks": dict(m.ranks)}
            for m in report.missed
        ],
        "warnings": warnings,
    }


def counted(n: int, word: str) -> str:
    """`1 question`, `2 questions`: a count with its noun (`word` is the singular)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def human(out: dict[str, Any]) -> str:
    """The report for a person: what was asked of which base, the table, the comparisons."""
    k, e, b = out["k"], out["evalset"], out["base"]
    kind = {"beir": "BEIR folder", "jsonl": "evaluation file", "saved": "saved set"}[e["kind"]]
    origin = e["origin"] if e["kind"] == "saved" else f"{kind} {e['origin']}"
    how = "built now" if b["built"] else "reused" if b["where"] != "given" else "as it is"
    where = "" if b["where"] == "given" else f", a cache {b['where']}"
    width = max(8, *(len(mode) for mode in out["modes"]))  # hybrid:relative is 15
    lines = [
        f"{e['name']}: {counted(e['questions'], 'question')} ({origin})",
        f"base {b['path']} ({how}{where}): {counted(b['documents'], 'document')}, "
        f"{counted(b['chunks'], 'chunk')} · "
        f"embedding {b['embedding']} · chunk size {b['chunk_size']} · "
        f"reranker {b['reranker'] or 'none'}",
        "",
        f"{'mode':<{width}} {'nDCG@' + str(k):>8} {'recall@' + str(k):>10} {'recall@' + str(DEEP_K):>11}"
        f" {'MRR@' + str(k):>7} {'questions':>10} {'ms/search':>10}",
    ]
    for mode, m in out["modes"].items():
        lines.append(
            f"{mode:<{width}} {m[f'ndcg@{k}']:>8.4f} {m[f'recall@{k}']:>10.4f}"
            f" {m[f'recall@{DEEP_K}']:>11.4f} {m[f'mrr@{k}']:>7.4f} {m['queries']:>10}"
            f" {m['ms_per_search']:>10.1f}"
        )
    for s in out["skipped"]:
        lines.append(f"{s['mode']:<{width}} not run: {s['code']}: {s['message']}")
    if out.get("previous") is not None:
        lines += _change_lines(out, k)
    for c in out["comparisons"]:
        a, bm = c["modes"]
        lines += [
            "",
            f"{a} vs {bm}: {a} ranks {counted(c['better'][a], 'question')} better, {bm} "
            f"{c['better'][bm]}, the same {c['same']}",
        ]
        for ex in c["examples"]:
            lines.append(
                f"  {ex['better']} better: {ex['question']!r} → {ex['expected']}: "
                + _ranks(ex["ranks"])
            )
            lines.append(f"      {ex['why']}")
    lines += _missed_lines(out, k)
    # Questions and document names come from the evaluation set: shown, never obeyed.
    return "\n".join(escape_controls(line) for line in lines)


def _ranks(ranks: dict[str, int | None]) -> str:
    return " · ".join(
        f"{mode} {'#' + str(r) if r else f'not in {DEEP_K}'}" for mode, r in ranks.items()
    )


def _missed_lines(out: dict[str, Any], k: int) -> list[str]:
    """The questions no mode found within its first k, the most a person reads of them."""
    missed = out["missed"]
    total = out["evalset"]["questions"]
    if not missed:
        return ["", f"every question was found within the first {k} by at least one mode"]
    lines = [
        "",
        f"missed by every mode within the first {k}: {len(missed)} of {counted(total, 'question')}",
    ]
    for m in missed[:MISSED_SHOWN]:
        lines.append(f"  {m['question']!r} → {'; '.join(m['expected'])}: {_ranks(m['ranks'])}")
    if len(missed) > MISSED_SHOWN:
        lines.append(f"  … and {len(missed) - MISSED_SHOWN} more (--json lists them all)")
    return lines


def _change_lines(out: dict[str, Any], k: int) -> list[str]:
    before = out["previous"]
    lines = ["", f"change since the run of {before['ran_at']}:"]
    changed = [
        f"{key} {before['spec'].get(key)} → {value}"
        for key, value in out["run"]["spec"].items()
        if before["spec"].get(key) != value
    ]
    lines.append("  spec: " + ("; ".join(changed) if changed else "unchanged"))
    for mode, delta in out["change"].items():
        lines.append(
            f"  {mode:<8} " + "  ".join(f"{key} {value:+.4f}" for key, value in delta.items())
        )
    return lines
