"""`metis-lite remember` and `metis-lite facts`: a base's notes, added and listed."""

from __future__ import annotations

import argparse
from typing import Any

from metis_lite.cli.common import add_command, print_json, replaced_text, say, warn
from metis_lite.errors import EXIT_MODEL, ModelError


def add_parser(commands: Any) -> None:
    remember = add_command(
        commands,
        "remember",
        run_remember,
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

    facts = add_command(
        commands,
        "facts",
        run_facts,
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


def run_remember(args: argparse.Namespace) -> int:
    from metis_lite.base.core import Base
    from metis_lite.service.serialize import fact_to_json

    with Base.open(args.base) as base:
        fact = base.remember(
            args.fact,
            stated_at=args.at,
            subject=args.subject,
            key=args.key,
            replaces=tuple(args.replaces or ()),
        )
        waiting = base.store.counts()["chunks"] - base.store.chunks_with_vector(base.model_label)
        why = "the embedding model did not answer"
        if waiting:
            try:
                base.embedder()  # a model that cannot even load says why: not installed, and how
            except ModelError as exc:
                why = exc.message
    if args.json:
        print_json(fact_to_json(fact))
    else:
        state = "holds" if fact.holds else f"already replaced by fact {fact.replaced_by}"
        say(f"fact {fact.id} stated {fact.stated_at}: {state}")
    chunks_wait = "chunk waits for its vector" if waiting == 1 else "chunks wait for their vectors"
    if waiting:  # the fact is kept, found by words until a run reaches the model
        warn(
            f"warning: CHUNKS_WITHOUT_VECTORS: {waiting} {chunks_wait}: {why};"
            " found by words until the next index run"
        )
        return EXIT_MODEL
    return 0


def run_facts(args: argparse.Namespace) -> int:
    from metis_lite.base.core import Base
    from metis_lite.service.serialize import facts_page_to_json

    with Base.open(args.base) as base:
        facts, total = base.facts(offset=args.offset, limit=args.limit)
    if args.json:
        print_json(facts_page_to_json(facts, total=total, offset=args.offset, limit=args.limit))
        return 0
    for fact in facts:
        state = "holds" if fact.holds else replaced_text(fact.replaced_by, fact.replaced_at)
        say(f"{fact.id:>5}  {fact.stated_at}  {fact.key or '-':<16} {state}")
        say(f"       {fact.text}")
    warn(f"{len(facts)} of {total} facts")
    return 0
