"""Answers, reports, statuses and facts as JSON-ready dicts, once, for both edges (CLI --json
and HTTP): no other module builds a dict for the wire.

A score that does not apply is absent, as docs/how-search-works.md says (not among the closest:
no `dense`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from metis_lite.errors import MetisError
from metis_lite.records import Answer, Citation, Fact, Result, SourceInfo, Took

if TYPE_CHECKING:  # types only: `search --json` imports no indexing run and no service
    from metis_lite.base.core import BaseStatus
    from metis_lite.base.multi import MultiAnswer
    from metis_lite.copies.publish import Published
    from metis_lite.indexing.ingest import IndexReport
    from metis_lite.service.follow import BaseHealth

SCORE_DIGITS = 6


def _round(value: float) -> float:
    return round(float(value), SCORE_DIGITS)


def result_to_json(result: Result) -> dict[str, Any]:
    out: dict[str, Any] = {
        "score": _round(result.score),
        "text": result.text,
        "citation": citation_to_json(result.citation),
        "scores": {
            name: (_round(value) if isinstance(value, float) else value)
            for name, value in dataclasses.asdict(result.scores).items()
            if value is not None
        },
    }
    if result.base is not None:
        out["base"] = result.base
    if result.fact is not None:
        out["fact"] = fact_to_json(result.fact)
    out["words"] = [
        {
            "word": w.word,
            "chunks": w.chunks,
            "common": w.common,
            "exact": w.exact,
            "forms": list(w.forms),
        }
        for w in result.words
    ]
    if result.also_in:
        out["also_in"] = [
            {"citation": citation_to_json(place.citation)}
            | ({"base": place.base} if place.base is not None else {})
            for place in result.also_in
        ]
    return out


def citation_to_json(c: Citation) -> dict[str, Any]:
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
    if c.anchor is not None:
        citation["anchor"] = c.anchor
    if c.ocr:
        citation["ocr"] = True
    return citation


def answer_to_json(answer: Answer, *, include_base: bool = False) -> dict[str, Any]:
    results = []
    for result in answer.results:
        item = result_to_json(result)
        if not include_base:
            item.pop("base", None)
            for place in item.get("also_in", ()):
                place.pop("base", None)
        results.append(item)
    return {
        "mode": answer.mode,
        "reranked": answer.reranked,
        "warnings": [{"code": w.code, "message": w.message} for w in answer.warnings],
        "took": took_to_json(answer.took),
        "results": results,
    }


def took_to_json(took: Took) -> dict[str, float]:
    return {k: round(v, 3) for k, v in dataclasses.asdict(took).items()}


def multi_answer_to_json(answer: MultiAnswer) -> dict[str, Any]:
    """Several bases' merged answer: as one base's, each result and warning with its `base`."""
    return {
        "mode": answer.mode,
        "reranked": answer.reranked,
        "warnings": [
            {"code": w.code, "message": w.message, "base": w.base} for w in answer.warnings
        ],
        "took": took_to_json(answer.took),
        "results": [result_to_json(result) for result in answer.results],
    }


def facts_page_to_json(
    facts: Sequence[Fact], *, total: int, offset: int, limit: int
) -> dict[str, Any]:
    """A page of facts, newest first, as `facts --json`, GET …/facts and the MCP tool give it."""
    return {
        "facts": [fact_to_json(f) for f in facts],
        "total": total,
        "offset": offset,
        "limit": limit,
    }


def fact_to_json(fact: Fact) -> dict[str, Any]:
    return {
        "id": fact.id,
        "text": fact.text,
        "stated_at": fact.stated_at,
        "subject": fact.subject,
        "key": fact.key,
        "holds": fact.holds,
        "replaced_by": fact.replaced_by,
        "replaced_at": fact.replaced_at,
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


def unavailable_to_json(name: str, error: MetisError) -> dict[str, Any]:
    """A served base that cannot be used now (damaged, …): its name and its error."""
    return {"name": name, "code": error.code, "message": error.message}


def health_to_json(health: BaseHealth) -> dict[str, Any]:
    """One base in /v1/health: whether it is open (a read-only service's: and `warm`, read into
    memory) and which file it serves (that file's inode, size and modification time as the
    service opened it, its publication, its last indexing run), or its error; `replacement`,
    the error of a newer file at its path not served."""
    out: dict[str, Any] = {"name": health.name, "open": health.open}
    if health.warm is not None:
        out["warm"] = health.warm
    copy = health.copy
    if copy is not None:
        state, published = copy.state, copy.publication
        mtime = datetime.fromtimestamp(state.mtime_ns / 1e9, UTC)
        out["copy"] = {
            "path": str(copy.path),
            "device": state.device,
            "inode": state.inode,
            "bytes": state.size,
            "modified_at": mtime.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "immutable": copy.immutable,
            "published_id": published.id if published else None,
            "published_at": published.at if published else None,
            "last_run": copy.last_run,
        }
    for field, error in (("error", health.error), ("replacement", health.replacement)):
        if error is not None:
            out[field] = {"code": error.code, "message": error.message}
    return out


def published_to_json(done: Published) -> dict[str, Any]:
    """What `metis-lite publish --json` prints."""
    return {
        "base": str(done.source),
        "published": str(done.dest),
        "bytes": done.bytes,
        "chunks": done.chunks,
        "last_run": done.last_run,
        "published_id": done.publication.id,
        "published_at": done.publication.at,
        "seconds": round(done.seconds, 3),
    }


def source_to_json(source: SourceInfo) -> dict[str, Any]:
    """A source as `sources --json` and GET /v1/bases/{name}/sources give it: its counts,
    and how it is read (kind, a folder's exclude patterns as a list, no_ignore)."""
    out = dataclasses.asdict(source)
    out["excludes"] = list(source.excludes)
    return out
