"""Evaluation sets saved inside a base, and the metrics of each run, to see whether a change helped.

`eval save` stores a set's questions and expected documents (never results) in `eval_sets`;
each `eval run` stores its metrics in `eval_runs` with its time and the base's spec at the
time (embedding model, chunk size, reranker), and is compared with the run before it. Both
write through the Store, whose write transactions take the lock before they read.

Privacy: a base never records what its users ask (spec, "Where a search runs"); these tables
hold only what a user saved on purpose — their own test questions — and nothing is written
when an evaluation is run without `save`/`run`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.evaluation.sets import EvalSet, parse_items
from metis_lite.models import registry
from metis_lite.store import now_iso

NAME_CHARS_MAX = 100


@dataclass(frozen=True)
class SavedRun:
    ran_at: str
    spec: dict[str, Any]
    metrics: dict[str, dict[str, float | int]]


def _has_tables(base: Base) -> bool:
    return (
        base.store.db.execute(
            "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'eval_sets'"
        ).fetchone()
        is not None
    )


def check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_CHARS_MAX or not name.isprintable():
        raise InvalidRequest(
            f"an evaluation set's name is 1 to {NAME_CHARS_MAX} printable characters, not {name!r}"
        )
    return name


def save_set(base: Base, name: str, evalset: EvalSet) -> None:
    """Store (or replace) a named set's questions; its earlier runs are kept for comparison."""
    name = check_name(name)
    items = "\n".join(json.dumps(q.to_json(), ensure_ascii=False) for q in evalset.questions)
    base.store.save_eval_set(name, items, evalset.origin)


def load_set(base: Base, name: str) -> EvalSet:
    name = check_name(name)
    row = None
    if _has_tables(base):
        row = base.store.db.execute(
            "SELECT items FROM eval_sets WHERE name = ?", (name,)
        ).fetchone()
    if row is None:
        known = ", ".join(n for n, *_ in list_sets(base)) or "none"
        raise InvalidRequest(
            f"{base.path} has no evaluation set named {name!r} (saved: {known}); save one with "
            f"metis-lite eval save {base.path} {name} EVALSET"
        )
    lines = ((n, json.loads(line)) for n, line in enumerate(row[0].splitlines(), start=1))
    questions = parse_items(lines, where=f"{base.path}:{name}")
    return EvalSet(name, "saved", f"saved in {base.path}", questions)


def list_sets(base: Base) -> list[tuple[str, int, str]]:
    """(name, questions, saved at) of each saved set."""
    if not _has_tables(base):
        return []
    rows = base.store.db.execute("SELECT name, items, saved_at FROM eval_sets ORDER BY name")
    return [(n, len(items.splitlines()), saved_at) for n, items, saved_at in rows]


def spec_snapshot(base: Base) -> dict[str, Any]:
    """What of the base's spec decides its results: model, chunk size, reranker."""
    spec = base.spec
    return {
        "embedding": spec.model_label,
        "chunk_size": spec.chunk_size,
        "reranker": registry.model_label(spec.reranker) if spec.reranker else None,
    }


def last_run(base: Base, name: str) -> SavedRun | None:
    if not _has_tables(base):
        return None
    row = base.store.db.execute(
        "SELECT r.ran_at, r.spec, r.metrics FROM eval_runs r JOIN eval_sets s ON s.id = r.set_id"
        " WHERE s.name = ? ORDER BY r.id DESC LIMIT 1",
        (check_name(name),),
    ).fetchone()
    return None if row is None else SavedRun(row[0], json.loads(row[1]), json.loads(row[2]))


def record_run(
    base: Base, name: str, metrics: dict[str, dict[str, float | int]], spec: dict[str, Any]
) -> SavedRun:
    run = SavedRun(now_iso(), spec, metrics)
    base.store.record_eval_run(
        check_name(name), ran_at=run.ran_at, spec=json.dumps(spec), metrics=json.dumps(metrics)
    )
    return run


def change(
    now: dict[str, dict[str, float | int]], before: dict[str, dict[str, float | int]]
) -> dict[str, dict[str, float]]:
    """Per mode, each metric's change since the run before (modes and metrics in both)."""
    out = {}
    for mode, figures in now.items():
        if mode in before:
            out[mode] = {
                key: round(float(value) - float(before[mode][key]), 4)
                for key, value in figures.items()
                if key in before[mode] and key != "queries"
            }
    return out
