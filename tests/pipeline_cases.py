"""A table of searches whose answers pin the search pipeline: the shipped handbook, FaQuAD
(tests/fixtures/eval, CC BY 4.0) and a memory base, each embedded by words and reranked by
overlap (word_models.py), asked in every mode and fusion, reranked or not, filtered, with the
warnings of an empty, a cut and an unmatched search — one base at a time and several at once.

`record(bases)` gives every answer as plain JSON: the answers of the code of the day compared
with tests/fixtures/pipeline/answers.jsonl, which the pipeline before its merge into one wrote
(`python tests/pipeline_cases.py OUT.json`). `digest` keeps of each answer the sha256 of
everything but its floats (ids, order, texts, citations, warnings, which scores are missing),
and its floats' count, sum and sum of squares: the last bits of a float sum depend on the CPU's
vector instructions (NumPy's and BLAS's kernels for AVX2 and AVX-512 add in other orders), so
`same` compares the floats within FLOAT_TOLERANCE and all the rest exactly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from metis_lite import Base, Filters, MetisError, search_bases  # noqa: E402
from metis_lite.evaluation import beir  # noqa: E402

HANDBOOK = HERE.parent / "examples" / "handbook"
FAQUAD = HERE / "fixtures" / "eval" / "faquad_pt"


TIMELINE = [
    # (text, stated_at, subject, key)
    ("Ana works on the billing service.", "2026-03-01", "Ana", "ana/work"),
    ("Ana's role is backend engineer.", "2026-06-01", "Ana", "ana/role"),
    ("Ana's role is engineering manager of the platform group.", "2026-09-15", "Ana", "ana/role"),
    ("Ana works on the search team now.", "2026-10-01", "Ana", "ana/work"),
    ("Bruno leads the mobile app team.", "2026-05-01", "Bruno", "bruno/work"),
    ("Carla is based in the Lisbon office.", "2026-02-01", "Carla", None),
]


def remember_timeline(base: Base) -> None:
    """A team's facts over a year, some replacing others by key, one by `replaces`."""
    for text, when, subject, key in TIMELINE:
        base.remember(text, stated_at=when, subject=subject, key=key)
    bruno = next(f for f in base.facts()[0] if f.subject == "Bruno")
    base.remember(
        "Bruno moved to the data platform team.",
        stated_at="2026-11-01",
        subject="Bruno",
        replaces=[bruno.id],
    )


HANDBOOK_QUESTIONS = (
    "how many holidays do I get",
    "who approves my expenses",
    "security incident reporting",
    "remote work policy equipment",
    "parental leave weeks",
)
TEAM_QUESTIONS = ("what does Ana work on", "which team is Bruno in", "Lisbon office")
LONG = " ".join(f"word{n}" for n in range(80)) + " holidays"


DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""A model that never answers, named before `attach` names the word models in its place."""


def _made(path: Path, attach: Callable[[Base], Base], kind: str = "documents") -> Base:
    base = Base(path, create=True)
    base.configure(embedding=DEAD_EMBEDDING, kind=kind)
    return attach(base)


def build(folder: Path, attach: Callable[[Base], Base]) -> dict[str, Path]:
    """The three bases, indexed with the word models `attach` gives a Base."""
    corpus = folder / "faquad-corpus"
    beir.write_corpus(FAQUAD, corpus)
    made = {name: folder / f"{name}.db" for name in ("handbook", "faquad", "team")}
    for name, source in (("handbook", HANDBOOK), ("faquad", corpus)):
        with _made(made[name], attach) as base:
            base.add_source(source, name="corpus" if name == "faquad" else name)
            base.index()
    with _made(made["team"], attach, kind="memory") as base:
        remember_timeline(base)
    return made


def cases(faquad_questions: list[str]) -> list[tuple[str, str, dict]]:
    """(bases, question, options): "+"-joined base names; one name is a one-base search."""
    table: list[tuple[str, str, dict]] = []
    for mode in ("keyword", "dense", "hybrid"):
        for fusion in ("relative", "rrf"):
            for rerank in (False, True):
                for top_k in (1, 5, 30):
                    options = dict(mode=mode, fusion=fusion, rerank=rerank, top_k=top_k)
                    for q in HANDBOOK_QUESTIONS[:3]:
                        table.append(("handbook", q, options))
                    for q in TEAM_QUESTIONS:
                        table.append(("team", q, options))
                    for q in faquad_questions[:3]:
                        table.append(("faquad", q, options))
                    table.append(("handbook+team", HANDBOOK_QUESTIONS[0], options))
    for q in faquad_questions:
        table.append(("faquad", q, dict(top_k=10)))
        table.append(("faquad", q, dict(top_k=10, fusion="rrf")))
    filtered = [
        dict(filters=Filters(kinds=("md",))),
        dict(filters=Filters(path_prefix="policies/")),
        dict(filters=Filters(sources=("handbook",))),
        dict(filters=Filters(sources=("nowhere",))),
        dict(filters=Filters(path_prefix="nothing-here/")),
        dict(filters=Filters(kinds=("pdf",)), mode="dense"),
    ]
    for options in filtered:
        for q in HANDBOOK_QUESTIONS:
            table.append(("handbook", q, options))
    for q in ("", "   ", LONG):
        for mode in ("keyword", "hybrid"):
            table.append(("handbook", q, dict(mode=mode)))
            table.append(("handbook+faquad", q, dict(mode=mode)))
    for q in HANDBOOK_QUESTIONS:
        table.append(("handbook+faquad", q, dict(top_k=8)))
        table.append(("handbook+faquad+team", q, dict(top_k=8, rerank=False)))
    return table


def _plain(value):
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def answer_json(answer) -> dict:
    """What a user reads of an answer; of `took`, which steps it names."""
    return {
        "mode": answer.mode,
        "reranked": answer.reranked,
        "warnings": [[w.code, w.message] for w in answer.warnings],
        "took": sorted(f.name for f in dataclasses.fields(answer.took)),
        "results": [_plain(r) for r in answer.results],
    }


def _asked(search: Callable[[], object]) -> dict:
    try:
        return answer_json(search())
    except MetisError as exc:
        return {"error": [exc.code, exc.message]}


def record(bases: dict[str, Base]) -> list[dict]:
    questions = [q.text for q in beir.read_questions(FAQUAD).questions[:12]]
    out = []
    for names, question, options in cases(questions):
        chosen = names.split("+")
        row = {"bases": names, "question": question, "options": repr(options)}
        several = {n: bases[n] for n in chosen}
        if len(chosen) == 1:
            row["alone"] = _asked(partial(several[names].search, question, **options))
        row["several"] = _asked(partial(search_bases, several, question, **options))
        out.append(row)
    return out


FLOAT_TOLERANCE = 1e-12
"""How far a float of an answer, or a sum of them, may lie from the fixture's (relative, and
absolute near 0): a CPU's other order of addition moves the last bit (~1e-16); a change of the
pipeline moves a score by far more."""

FLOAT = "<float>"


def digest(row: dict) -> dict:
    """A row as the fixture keeps it: each answer's sha256 over its canonical JSON with its
    floats left out, their count, sum and sum of squares, and the chunk ids and scores it
    returned (what a failure shows first)."""
    kept = {k: row[k] for k in ("bases", "question", "options")}
    for side in ("alone", "several"):
        if side in row:
            answer = row[side]
            floats: list[float] = []
            text = json.dumps(_floats_out(answer, floats), sort_keys=True, ensure_ascii=False)
            kept[side] = {
                "sha256": hashlib.sha256(text.encode()).hexdigest(),
                "floats": [len(floats), math.fsum(floats), math.fsum(f * f for f in floats)],
                "results": [
                    [r["base"], r["chunk_id"], r["score"]] for r in answer.get("results", [])
                ],
            }
    return kept


def _floats_out(value, floats: list[float]):
    """`value` with each float replaced by FLOAT, the floats appended to `floats` in order."""
    if isinstance(value, float):
        floats.append(value)
        return FLOAT
    if isinstance(value, dict):
        return {k: _floats_out(v, floats) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_floats_out(v, floats) for v in value]
    return value


def same(old, new) -> bool:
    """Digests equal but for their floats, which lie within FLOAT_TOLERANCE."""
    if isinstance(old, float) or isinstance(new, float):
        if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
            return False
        return old == new or math.isclose(
            old, new, rel_tol=FLOAT_TOLERANCE, abs_tol=FLOAT_TOLERANCE
        )
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(same(old[k], new[k]) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(same(a, b) for a, b in zip(old, new, strict=True))
    return old == new


if __name__ == "__main__":
    import tempfile
    from contextlib import ExitStack

    from word_models import attach

    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        paths = build(Path(tmp), attach)
        bases = {n: stack.enter_context(attach(Base(p))) for n, p in paths.items()}
        rows = record(bases)
    lines = [json.dumps(digest(row), ensure_ascii=False) for row in rows]
    Path(sys.argv[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(len(rows), "searches")
