"""`metis-lite eval`: ask an evaluation set each way and see which mode finds what (docs/eval.md).

    metis-lite eval EVALSET [--base BASE] [--modes hybrid,dense,keyword] [--rerank/--no-rerank]
                    [--k 10] [--json]
    metis-lite eval save BASE NAME EVALSET     keep an evaluation set inside the base
    metis-lite eval run BASE NAME              run it again; shows the change since its last run

EVALSET is a BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv: the base is built from
the corpus) or a JSON-lines file of questions for an existing base (`--base`). The evaluation
itself is metis_lite/evaluation/ (runner.py asks, report.py writes the report).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metis_lite.cli.common import add_command, print_json, say, warn
from metis_lite.errors import InvalidRequest
from metis_lite.settings import MODES, TOP_K, TOP_K_MAX

HELP = "measure search quality: ask an evaluation set in each mode and compare them"
EXAMPLES = (
    "metis-lite eval examples/handbook-questions.jsonl --base handbook.db",
    "metis-lite eval examples/mini-beir --base mini.db --modes hybrid:relative,hybrid:rrf,keyword",
    "metis-lite eval save handbook.db smoke examples/handbook-questions.jsonl",
    "metis-lite eval run handbook.db smoke   # again after a change: the change per mode",
)
"""The -h examples (run by tests/test_examples.py from a clone, after scripts/quickstart)."""


def add_parser(commands: Any) -> None:
    parser = add_command(commands, "eval", run, HELP, *EXAMPLES)
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


def named_base(args: argparse.Namespace) -> str | None:
    """The base the command reads, which must exist (None: it may be built, from a BEIR folder)."""
    if args.evalset in ("save", "run") and args.more:
        return str(args.more[0])
    return None if Path(args.evalset).is_dir() else args.base


def run(args: argparse.Namespace) -> int:
    """Run `eval`, `eval save` or `eval run` from parsed arguments; returns the exit code."""
    from metis_lite.base.core import Base
    from metis_lite.evaluation import beir
    from metis_lite.evaluation.bases import BaseChoice, open_beir_base
    from metis_lite.evaluation.report import to_json
    from metis_lite.evaluation.runner import evaluate, parse_modes

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


def _read_file(path: Path) -> Any:
    from metis_lite.evaluation.sets import read_jsonl

    if path.is_dir():
        raise InvalidRequest(f"{path} is a folder without corpus.jsonl: not a BEIR collection")
    if not path.exists():
        raise InvalidRequest(f"no evaluation set at {path}")
    return read_jsonl(path)


def _save(args: argparse.Namespace, base_path: str, name: str, evalset_path: str) -> int:
    from metis_lite.base.core import Base
    from metis_lite.evaluation import beir, saved
    from metis_lite.evaluation.report import counted
    from metis_lite.evaluation.runner import resolve
    from metis_lite.evaluation.sets import EXPECTED_NOT_IN_BASE
    from metis_lite.records import MetisWarning

    path = Path(evalset_path)
    evalset = beir.read_questions(path) if beir.is_beir(path) else _read_file(path)
    expected = {e for q in evalset.questions for e in q.expected}
    with Base.open(base_path) as base:
        replaced = saved.check_name(name) in {n for n, *_ in saved.list_sets(base)}
        saved.save_set(base, name, evalset)
        _, missing = resolve(base, expected)
    warnings = list(evalset.warnings)
    if missing:
        are = "is" if len(missing) == 1 else "are"
        said = f"{counted(len(missing), 'expected answer')} {are} not in the base yet"
        warnings.append(MetisWarning(EXPECTED_NOT_IN_BASE, said))
    if args.json:
        print_json(
            {
                "saved": name,
                "base": base_path,
                "questions": len(evalset.questions),
                "expected": len(expected),
                "in_base": len(expected) - len(missing),
                "replaced": replaced,
                "warnings": [{"code": w.code, "message": w.message} for w in warnings],
            }
        )
        return 0
    found = "all" if not missing else f"{len(expected) - len(missing)}"
    say(
        f"{'replaced' if replaced else 'saved'} the evaluation set {name!r} in {base_path}: "
        f"{counted(len(evalset.questions), 'question')}, "
        f"{counted(len(expected), 'expected answer')} ({found} in the base)"
        + ("; its earlier runs are kept" if replaced else "")
    )
    say(f"nothing was searched yet; run it with: metis-lite eval run {base_path} {name}")
    for warning in warnings:
        warn(f"warning: {warning.code}: {warning.message}")
    return 0


def _run_saved(args: argparse.Namespace, base_path: str, name: str) -> int:
    from metis_lite.base.core import Base
    from metis_lite.evaluation import saved
    from metis_lite.evaluation.bases import BaseChoice
    from metis_lite.evaluation.report import to_json
    from metis_lite.evaluation.runner import evaluate, parse_modes

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


def _print(args: argparse.Namespace, out: dict[str, Any]) -> None:
    from metis_lite.evaluation.report import counted, human

    if args.json:
        print_json(out)
        return
    print(human(out))  # each line escaped by human()
    for warning in out["warnings"]:
        where = f"{warning['mode']}: " if "mode" in warning else ""
        code = f"{warning['code']}: " if "code" in warning else ""
        count = f" ({counted(warning['questions'], 'question')})" if "questions" in warning else ""
        warn(f"warning: {where}{code}{warning['message']}{count}")


def _progress(args: argparse.Namespace) -> Callable[[str, int, int], None] | None:
    """A one-line counter on stderr while a terminal watches; None otherwise."""
    if args.json or not sys.stderr.isatty():
        return None

    def show(what: str, done: int, total: int) -> None:
        if not total:  # an index run's chunks, counted without a total: files say it
            return
        sys.stderr.write(f"\r{what}: {done}/{total} ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show
