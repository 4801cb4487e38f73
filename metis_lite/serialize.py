"""Answers, reports and statuses as JSON-ready dicts, once, for both edges (CLI --json and HTTP).

A score that does not apply is absent, as the spec says (not among the closest: no `dense`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from metis_lite.base import BaseStatus
from metis_lite.ingest import IndexReport
from metis_lite.records import Answer, Result

SCORE_DIGITS = 6


def _round(value: float) -> float:
    return round(float(value), SCORE_DIGITS)


def result_to_json(result: Result) -> dict[str, Any]:
    c = result.citation
    citation: dict[str, Any] = {
        "source": c.source,
        "document": c.document,
        "title": c.title,
        "kind": c.kind,
        "page": c.page,
        "line": c.line,
        "headings": list(c.headings),
        "snippet": c.snippet,
    }
    scores = {
        name: (_round(value) if isinstance(value, float) else value)
        for name, value in dataclasses.asdict(result.scores).items()
        if value is not None
    }
    out: dict[str, Any] = {
        "score": _round(result.score),
        "text": result.text,
        "citation": citation,
        "scores": scores,
    }
    if result.base is not None:
        out["base"] = result.base
    out.update(result.extra)
    return out


def answer_to_json(answer: Answer, *, include_base: bool = False) -> dict[str, Any]:
    results = []
    for result in answer.results:
        item = result_to_json(result)
        if not include_base:
            item.pop("base", None)
        results.append(item)
    return {
        "mode": answer.mode,
        "reranked": answer.reranked,
        "warnings": [{"code": w.code, "message": w.message} for w in answer.warnings],
        "took": {k: round(v, 3) for k, v in dataclasses.asdict(answer.took).items()},
        "results": results,
    }


def report_to_json(report: IndexReport) -> dict[str, Any]:
    out = dataclasses.asdict(report)
    out["skipped"] = [{"path": s.path, "reason": s.reason} for s in report.skipped]
    out["warnings"] = [{"code": w.code, "message": w.message} for w in report.warnings]
    return out


def status_to_json(status: BaseStatus) -> dict[str, Any]:
    out = dataclasses.asdict(status)
    out["sources"] = [{"name": s.name, "path": s.path} for s in status.sources]
    out["warnings"] = [{"code": w.code, "message": w.message} for w in status.warnings]
    return out
