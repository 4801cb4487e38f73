"""The command line, `metis-lite`: each command calls one library function and prints its answer.

    common.py    the parser, the -h epilog with the exit codes, output (stdout, stderr, JSON)
    interrupts.py  Ctrl-C and SIGTERM: an index run stopped tidily, one line, exit 130 or 143
    index.py     index (and the options that set a base's models)
    search.py    search: results with citations, score lines, the steps' times
    sources.py   status, sources
    facts.py     remember, facts
    eval.py      eval, eval save, eval run
    serve.py     serve, models serve, mcp
    copy.py      copy, shell

Each module adds its commands with `add_parser(commands)`; `build_parser` assembles them. Human
output goes to stdout, progress and warnings to stderr; `--json` prints exactly what the HTTP
API answers. Exit codes are the same for every command: each error knows its own (errors.py;
the README's table says when each is given).

Its face: none: nothing imports the command line but `python -m metis_lite`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from metis_lite import __version__
from metis_lite.cli.common import EXIT_CODES, Parser, print_json, warn
from metis_lite.cli.interrupts import Interrupts
from metis_lite.errors import (
    EXIT_BROKEN_PIPE,
    BaseNotFound,
    MetisError,
    exit_code,
)

__all__ = ["build_parser", "main"]

COMMAND_MODULES = ("index", "search", "sources", "facts", "copy", "serve", "eval")
"""In the order -h lists their commands (modules of metis_lite.cli, imported when needed)."""

COMMANDS = {
    "index": "index",
    "search": "search",
    "status": "sources",
    "sources": "sources",
    "remember": "facts",
    "facts": "facts",
    "copy": "copy",
    "publish": "copy",
    "shell": "copy",
    "serve": "serve",
    "mcp": "serve",
    "models": "serve",
    "eval": "eval",
}
"""Each command's module. A command line that starts with a command builds that module's parser
alone: a one-shot `search` then never imports what `serve` or `index` add their flags with (the
HTTP stack, the indexing run), ~0.1 s of a fresh process (docs/models.md)."""

QUICK_EXIT = frozenset({"search"})
"""Commands that write nothing and leave nothing running: run as the program, their process
ends once their output is flushed and their base closed, without the interpreter's teardown of
every module it imported (~25 ms of a one-shot hybrid search's ~270; docs/models.md)."""

_MAY_BE_NEW = {"index", "serve", "models"}
"""Commands whose BASE may be new (index) or that check their bases themselves (serve)."""


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of `command`'s module alone (COMMANDS)."""
    parser = Parser(
        prog="metis-lite",
        description="Hybrid search in which each base is one SQLite file.",
        epilog="examples:\n"
        "  metis-lite index handbook.db examples/handbook\n"
        '  metis-lite search handbook.db "how many holidays do I get"\n\n' + EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"metis-lite {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES:
        _module(name).add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with Interrupts() as interrupts:  # Ctrl-C, SIGTERM: one line, exit 130 or 143 (interrupts.py)
        try:
            code = _main(argv, interrupts)
        except KeyboardInterrupt:  # start-up (the commands' imports, opening a base), or a
            warn("interrupted")  # command that has no points to stop at: no traceback
            code = interrupts.exit_code
    if interrupts.signal is not None:
        # What the command wrote is committed and closed. A model's threads may still be
        # computing a batch the run dropped: they are not waited for.
        _flush()
        os._exit(code)
    if argv is None and sys.argv[1:2] and sys.argv[1] in QUICK_EXIT:
        _flush()
        os._exit(code)
    return code


def _main(argv: Sequence[str] | None, interrupts: Interrupts) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(words[0] if words else None)
    args, extra = parser.parse_known_args(words)
    if extra:  # said by the command's own parser, which knows the option probably meant
        _command_parser(parser, args).unknown_options(extra)
    args.interrupts = interrupts  # an index run stops at its next safe point (cli/index.py)
    try:
        _check_named_base(args)
        return int(args.handler(args))
    except MetisError as exc:
        if getattr(args, "json", False):
            print_json(exc.to_json())
        warn(f"error: {exc.code}: {exc.message}")
        return exit_code(exc)
    except BrokenPipeError:
        # The reader stopped reading (`search … --json | head -1`): what it wanted it has. The
        # rest of the output goes nowhere, quietly, as other commands of a pipe do.
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone, or a stream closed
            pass


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Parser:
    """The parser of the command (or subcommand) the arguments named (a Parser: subparsers are
    made of their parent's class)."""
    for dest in ("command", "models_command"):
        action = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        name = getattr(args, dest, None)
        if action is None or name not in action.choices:
            break
        parser = action.choices[name]
    return cast(Parser, parser)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit finds no broken
    pipe to complain of (Python's documented recipe for SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # stdout is not a file (a test's buffer)
        pass


def _module(name: str) -> Any:
    return importlib.import_module(f"metis_lite.cli.{name}")


def _check_named_base(args: argparse.Namespace) -> None:
    """A base the command reads must exist: BASE_NOT_FOUND (exit 2), as a missing folder is,
    before anything is opened (Store says the same, but `shell` and `copy` open the file
    themselves, and an SQLite connection would create it)."""
    named = getattr(args, "base", None)
    if args.command == "eval":
        named = _module("eval").named_base(args)
    elif args.command in _MAY_BE_NEW:
        named = None
    if isinstance(named, str) and not Path(named).exists():
        raise BaseNotFound(
            f"no base at {named}: create it with `metis-lite index {named} FOLDER` (a memory"
            f" base needs no folder: `metis-lite index {named} --kind memory`)"
        )
