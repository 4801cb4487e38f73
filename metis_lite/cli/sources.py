"""`metis-lite status` and `metis-lite sources`: what a base holds, and removing a source."""

from __future__ import annotations

import argparse
from typing import Any

from metis_lite.cli.common import add_command, print_json, say, warn
from metis_lite.records import SourceInfo


def add_parser(commands: Any) -> None:
    status = add_command(
        commands,
        "status",
        run_status,
        "show a base's state, sources, documents and chunks",
        "metis-lite status handbook.db",
        "metis-lite status handbook.db --json",
    )
    status.add_argument("base", help="the base file")
    status.add_argument(
        "--json", action="store_true", help="print exactly what GET /v1/bases says of it"
    )

    sources = add_command(
        commands,
        "sources",
        run_sources,
        "list a base's sources with their documents, chunks and rules, or remove one with its"
        " documents (--remove NAME); `index BASE FOLDER --exclude …` changes a folder's rules",
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


def run_status(args: argparse.Namespace) -> int:
    from metis_lite.base.core import Base
    from metis_lite.service.serialize import status_to_json

    with Base.open(args.base) as base:
        status = base.status()
    if args.json:
        print_json(status_to_json(status))
        return 0
    say(f"{status.name} ({status.kind}): {status.state}")
    if status.published is not None:
        say(
            f"  a published copy: {status.published.id}, published {status.published.at};"
            " read-only (to change it, publish the working base again)"
        )
    elif status.read_only:
        say("  read-only: nothing is written to it (no indexing, no facts, no search counts)")
    say(
        f"  documents {status.documents}{_copies(sum(s.copies for s in status.sources))} · "
        f"chunks {status.chunks} · without a vector "
        f"{status.chunks_without_vector}"
    )
    say(f"  kinds: {', '.join(f'{k} {n}' for k, n in status.kinds.items()) or 'none'}")
    say(
        f"  embedding: {status.embedding} · reranker: {status.reranker or 'none'} · "
        f"chunk size {status.chunk_size}"
    )
    for source in status.sources:
        say(f"  source {source.name}: {source.path or '(notes)'}")
    run = status.last_indexing
    if run:
        say(
            f"  last indexing: {run['state']}, started {run['started_at']}, finished "
            f"{run['finished_at'] or '-'}: {run['added']} added, {run['updated']} updated, "
            f"{run['removed']} removed, {run['skipped']} skipped"
        )
    else:
        say("  never indexed")
    if status.searches_per_day:
        days = ", ".join(f"{d} {n}" for d, n in sorted(status.searches_per_day.items())[-7:])
        say(f"  searches per day: {days}")
    for warning in status.warnings:
        warn(f"warning: {warning.code}: {warning.message}")
    return 0


def _copies(copies: int) -> str:
    """Files held as copies of a document (store/document_copies.py), said when there are any."""
    return f" (+ {copies} {'copy' if copies == 1 else 'copies'})" if copies else ""


def _rules(source: SourceInfo) -> str:
    """A folder's rules as `sources` says them (nothing for the defaults)."""
    said = ""
    if source.excludes:
        said += " · excludes " + " ".join(repr(p) for p in source.excludes)
    if source.no_ignore:
        said += " · ignore files not read (--no-ignore)"
    if source.ocr_languages:
        said += f" · OCR in {source.ocr_languages}"
    return said


def run_sources(args: argparse.Namespace) -> int:
    from metis_lite.base.core import Base
    from metis_lite.service.serialize import source_to_json

    with Base.open(args.base) as base:
        if args.remove is not None:
            removed = base.remove_source(args.remove)
            if args.json:  # as DELETE /v1/bases/{name}/sources/{source} answers
                print_json({"source": args.remove, "documents": removed})
            else:
                say(f"removed the source {args.remove} and its {removed} documents")
            return 0
        sources = base.sources()
    if args.json:  # as GET /v1/bases/{name}/sources answers
        print_json({"sources": [source_to_json(s) for s in sources]})
        return 0
    for source in sources:
        say(
            f"{source.name}: {source.path or '(notes: the base’s facts)'}"
            f"{' (a file)' if source.kind == 'file' else ''} · "
            f"{source.documents} documents{_copies(source.copies)} · {source.chunks} chunks"
            f"{_rules(source)}"
        )
    if not sources:
        warn(f"{args.base} has no source yet")
    return 0
