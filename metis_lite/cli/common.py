"""What every command of the CLI shares: its parser, its -h epilog, its output.

A command module adds its parsers with `add_command` (the help, the examples, the handler) and
prints with `say` (stdout), `warn` (stderr) and `print_json`. The parser class, `Parser`, says
more than argparse does when a command line is wrong: the option that was meant (`--topk`:
did you mean --top-k?) and how to ask a question that starts with `-` (after `--`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from metis_lite.errors import EXIT_USAGE
from metis_lite.escapes import escape_controls

EXIT_CODES = (
    "exit codes (the same for every command): 0 done · 1 error · 2 bad usage or request, or a\n"
    "base, folder or file that does not exist · 3 a model did not answer (index, remember: all\n"
    "kept, chunks left without vectors) · 4 the base is busy (another process is indexing it)"
)
"""The line every command's -h ends with; the README's table says the same at length."""

SUGGESTION_CUTOFF = 0.6
"""How alike (difflib's ratio, 0-1) an unknown option and a real one must be to suggest it:
`--topk` and `--top-k` are 0.91, `--mode` and `--more` 0.75, `--json` and `--top-k` 0.31."""

Command = Callable[[argparse.Namespace], int]

_TEXT_ARGUMENTS = re.compile(r"required: .*\b(question|fact)\b")
"""The positionals a user writes in words, which may start with "-"."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, with errors that say what was probably meant."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        given = getattr(self, "_given", [])
        dashed = [a for a in given if a.startswith("-") and a not in self._option_string_actions]
        if dashed and _TEXT_ARGUMENTS.search(message):
            message += (
                f" ({dashed[0]!r} was read as an option: a question or fact that starts with"
                f' "-" goes after --, as in: {self.prog} … -- {dashed[0]!r})'
            )
        super().error(message)

    def unknown_options(self, extra: Sequence[str]) -> NoReturn:
        """Refuse what no option of this command reads, naming the option probably meant."""
        import difflib  # a command line that is understood never needs it

        message = f"unrecognized arguments: {' '.join(extra)}"
        for arg in extra:
            if not arg.startswith("--"):
                continue
            known = [o for o in self._option_string_actions if o.startswith("--")]
            close = difflib.get_close_matches(
                arg.split("=", 1)[0], known, n=1, cutoff=SUGGESTION_CUTOFF
            )
            if close and close[0] != arg:  # the option itself: given after `--`, or twice
                message += f" (did you mean {close[0]}?)"
                break
        self.error(message)


def add_command(
    commands: Any, name: str, handler: Command, help: str, *examples: str
) -> argparse.ArgumentParser:
    """One command's parser: its help, its examples and the exit codes in its -h."""
    sub: argparse.ArgumentParser = commands.add_parser(
        name,
        help=help,
        description=help,
        epilog=epilog(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub.set_defaults(handler=handler)
    return sub


def epilog(examples: Sequence[str]) -> str:
    """Every command's -h ends with its examples (each runs as written from a clone of
    metis-lite, after scripts/quickstart; tests/test_examples.py runs them) and EXIT_CODES."""
    lines = "".join(f"  {example}\n" for example in examples)
    return f"examples:\n{lines}\n{EXIT_CODES}"


def usage(parser: argparse.ArgumentParser) -> int:
    """A command group named without its subcommand: its help, on stderr, exit 2."""
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, ensure_ascii=False, indent=2)
    sys.stdout.write("\n")


def warn(message: str) -> None:
    """A line on stderr (progress, warnings, errors), its control characters escaped."""
    print(escape_controls(message), file=sys.stderr)


def say(line: str) -> None:
    """One line of human output: what came from a base or a file (titles, names, passages,
    facts) shown with its control characters escaped, never obeyed by the terminal."""
    print(escape_controls(line))


def replaced_text(replaced_by: object, replaced_at: object) -> str:
    """What a search result and `facts` say of a fact a newer one replaced."""
    return f"replaced by fact {replaced_by} on {replaced_at}"
