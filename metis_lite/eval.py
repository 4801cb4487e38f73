"""`metis-lite eval`: ask an evaluation set each way and see which mode finds what (docs/eval.md).

    metis-lite eval EVALSET [--base BASE] [--modes hybrid,dense,keyword] [--rerank/--no-rerank]
                    [--k 10] [--json]
    metis-lite eval save BASE NAME EVALSET     keep an evaluation set inside the base
    metis-lite eval run BASE NAME              run it again; shows the change since its last run

EVALSET is a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv: the base is built from
the corpus) or a JSON-lines file of questions for an existing base (`--base`). The CLI wires
`add_arguments` and `run_from_args` as its `eval` command; `python -m metis_lite.eval` runs the
same command alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metis_lite.base import Base
from metis_lite.errors import InvalidRequest, MetisError, exit_code
from metis_lite.escapes import escape_controls
from metis_lite.evaluation import beir, saved
from metis_lite.evaluation.bases import BaseChoice, open_beir_base
from metis_lite.evaluation.runner import DEEP_K, EvalReport, evaluate, parse_modes, resolve
from metis_lite.evaluation.sets import EvalSet, read_jsonl
from metis_lite.settings import MODES, TOP_K, TOP_K_MAX

HELP = "measure search quality: ask an evaluation set in each mode and compare them"
EXAMPLES = (
    "metis-lite eval examples/handbook-questions.jsonl --base handbook.db",
    "metis-lite eval examples/mini-beir --base mini.db --modes hybrid:relative,hybrid:rrf,keyword",
    "metis-lite eval save handbook.db smoke examples/handbook-questions.jsonl",
    "metis-lite eval run handbook.db smoke   # again after a change: the change per mode",
)
"""The -h examples (run by tests/test_examples.py from a clone, after scripts/quickstart)."""
EXAMPLE = EXAMPLES[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `eval` command's arguments, on the parser the CLI made for it."""
    parser.add_argument(
        "evalset",
        metavar="EVALSET",
        help="a BEIR folder, or a JSON-lines file of questions for --base; "
        "or: save BASE NAME EVALSET; run BASE NAME",
    )
    parser.add_argument("more", nargs="*", metavar="ARG", help=argparse.SUPPRESS)
    parser.add_argument(
        "--base",
        help="the base to ask (a BEIR folder's base is built there if new; default: for a BEIR"
        " folder, a cache file beside it, EVALSET.metis-eval.db; for a file, required)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="modes to compare, comma-separated: hybrid, dense, keyword, hybrid:relative,"
        " hybrid:rrf (default %(default)s)",
    )
    parser.add_argument(
        "--rerank",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="use the base's reranker, when it has one (default: yes)",
    )
    parser.add_argument(
        "--k",
        type=int,
        default=TOP_K,
        metavar="N",
        help=f"results per search for nDCG, recall and MRR @k (1-{TOP_K_MAX}; default %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def run_from_args(args: argparse.Namespace) -> int:
    """Run `eval`, `eval save` or `eval run` from parsed arguments; returns the exit code."""
    if args.evalset == "save" and len(args.more) == 3:
        return _save(args, *args.more)
    if args.evalset == "run" and len(args.more) == 2:
        return _run_saved(args, *args.more)
    if args.more:
        raise InvalidRequest(
            "usage: metis-lite eval EVALSET [--base BASE] | eval save BASE NAME EVALSET | "
            "eval run BASE NAME (a file named save or run: write ./save)"
        )
    modes = parse_modes(args.modes)
    path = Path(args.evalset)
    if beir.is_beir(path):
        evalset = beir.read_questions(path)
        base, choice = open_beir_base(path, args.base, progress=_progress(args))
    else:
        evalset = _read_file(path)
        if not args.base:
            raise InvalidRequest(
                f"{path} is an evaluation file: name the base it asks with --base BASE"
            )
        base, choice = Base.open(args.base), BaseChoice(Path(args.base), "given", False)
    with base:
        report = evaluate(
            base, evalset, modes=modes, k=args.k, rerank=args.rerank, progress=_progress(args)
        )
        out = to_json(report, evalset, base, choice)
    _print(args, out)
    return 0


def _read_file(path: Path) -> EvalSet:
    if path.is_dir():
        raise InvalidRequest(f"{path} is a folder without corpus.jsonl: not a BEIR collection")
    if not path.exists():
        raise InvalidRequest(f"no evaluation set at {path}")
    return read_jsonl(path)


def _save(args: argparse.Namespace, base_path: str, name: str, evalset_path: str) -> int:
    path = Path(evalset_path)
    evalset = beir.read_questions(path) if beir.is_beir(path) else _read_file(path)
    with Base.open(base_path) as base:
        saved.save_set(base, name, evalset)
        _, missing = resolve(base, {e for q in evalset.questions for e in q.expected})
    warnings = list(evalset.warnings)
    if missing:
        warnings.append(f"{len(missing)} expected items are not in the base yet")
    if args.json:
        _print_json(
            {
                "saved": name,
                "base": base_path,
                "questions": len(evalset.questions),
                "warnings": warnings,
            }
        )
        return 0
    print(
        f"saved {name!r} in {base_path}: {len(evalset.questions)} questions and what should answer "
        f"them (no results); run it with: metis-lite eval run {base_path} {name}"
    )
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _run_saved(args: argparse.Namespace, base_path: str, name: str) -> int:
    modes = parse_modes(args.modes)
    with Base.open(base_path) as base:
        evalset = saved.load_set(base, name)
        before = saved.last_run(base, name)
        report = evaluate(
            base, evalset, modes=modes, k=args.k, rerank=args.rerank, progress=_progress(args)
        )
        spec = saved.spec_snapshot(base)
        now = saved.record_run(base, name, report.metrics(), spec)
        out = to_json(report, evalset, base, BaseChoice(Path(base_path), "given", False))
    out["run"] = {"ran_at": now.ran_at, "spec": spec}
    out["previous"] = (
        None
        if before is None
        else {"ran_at": before.ran_at, "spec": before.spec, "modes": before.metrics}
    )
    out["change"] = {} if before is None else saved.change(report.metrics(), before.metrics)
    _print(args, out)
    return 0


# -- output ---------------------------------------------------------------------------------


def to_json(report: EvalReport, evalset: EvalSet, base: Base, choice: BaseChoice) -> dict[str, Any]:
    """The report as `--json` prints it."""
    status = base.store.counts()
    spec = saved.spec_snapshot(base)
    warnings: list[dict[str, Any]] = [{"message": w} for w in report.warnings]
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
        "warnings": warnings,
    }


def _print(args: argparse.Namespace, out: dict[str, Any]) -> None:
    if args.json:
        _print_json(out)
    else:
        print(human(out))
        for warning in out["warnings"]:
            where = f"{warning['mode']}: " if "mode" in warning else ""
            count = f" ({warning['questions']} questions)" if "questions" in warning else ""
            line = f"warning: {where}{warning['message']}{count}"
            print(escape_controls(line), file=sys.stderr)


def human(out: dict[str, Any]) -> str:
    """The report for a person: what was asked of which base, the table, the comparisons."""
    k, e, b = out["k"], out["evalset"], out["base"]
    kind = {"beir": "BEIR folder", "jsonl": "evaluation file", "saved": "saved set"}[e["kind"]]
    origin = e["origin"] if e["kind"] == "saved" else f"{kind} {e['origin']}"
    how = "built now" if b["built"] else "reused" if b["where"] != "given" else "as it is"
    where = "" if b["where"] == "given" else f", a cache {b['where']}"
    width = max(8, *(len(mode) for mode in out["modes"]))  # hybrid:relative is 15
    lines = [
        f"{e['name']}: {e['questions']} questions ({origin})",
        f"base {b['path']} ({how}{where}): {b['documents']} documents, {b['chunks']} chunks · "
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
            f"{a} vs {bm}: {a} ranks {c['better'][a]} questions better, {bm} "
            f"{c['better'][bm]}, the same {c['same']}",
        ]
        for ex in c["examples"]:
            ranks = " · ".join(
                f"{mode} {'#' + str(r) if r else f'not in {DEEP_K}'}"
                for mode, r in ex["ranks"].items()
            )
            lines.append(f"  {ex['better']} better: {ex['question']!r} → {ex['expected']}: {ranks}")
            lines.append(f"      {ex['why']}")
    # Questions and document names come from the evaluation set: shown, never obeyed.
    return "\n".join(escape_controls(line) for line in lines)


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


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def _progress(args: argparse.Namespace):
    """A one-line counter on stderr while a terminal watches; None otherwise."""
    if args.json or not sys.stderr.isatty():
        return None

    def show(what: str, done: int, total: int) -> None:
        sys.stderr.write(f"\r{what}: {done}/{total} ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m metis_lite.eval …`: the eval command on its own, with the CLI's exit codes."""
    parser = argparse.ArgumentParser(
        prog="metis-lite eval",
        description=HELP,
        epilog="examples:\n" + "".join(f"  {example}\n" for example in EXAMPLES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run_from_args(args)
    except MetisError as exc:
        if args.json:
            _print_json(exc.to_json())
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
