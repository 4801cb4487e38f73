"""Which files of a source folder a base leaves out: its ignore files and its own patterns,
read as git reads a .gitignore.

A folder source honours the ignore files it holds — `.gitignore`, `.ignore` and `.metisignore`,
in its own folder and in each folder below — and the patterns stored with it (`index
--exclude`), all in gitignore's syntax: `*.log`, `/build` (anchored to the folder of its
file), `cache/` (folders only), `!keep.md` (a negation), `docs/**/draft.md`. The patterns are
compiled by `pathspec` (git's wildmatch rules and edge cases, kept by others), not by glob
code of ours; which pattern decides is git's rule (Patterns). `tests/test_ignore.py` compares
every file's verdict with `git check-ignore`'s. One rule is the base's own: a Sphinx build's
`_sources/` is left out as if the build's folder said so first (SPHINX_SOURCES).

Which pattern decides, as git decides between its files: the last one that matches, reading
the ignore files from the source folder down to the file's own folder (so a deeper file wins),
in one folder `.gitignore`, then `.ignore`, then `.metisignore`; the source's `--exclude`
patterns come after all of them (so `--exclude '!PATTERN'` keeps what an ignore file leaves
out). A folder left out is not entered: nothing inside it is read, and, as in git, no pattern
below can bring one of its files back. `--no-ignore` reads no ignore file (hidden files stay
out, the `--exclude` patterns still apply). Ignore files above the source folder, in `.git`,
or git's global ones are not read: a source is read the same wherever it lies.

A bad ignore file never stops a run, nor loses what was indexed: one larger than
IGNORE_FILE_BYTES_MAX or IGNORE_FILE_LINES_MAX is read up to that; a line that is no pattern
is skipped; one that cannot be read (a permission, a link leading out of the source, a folder
of that name) holds its folder: the folder's files are neither listed nor removed, their
documents kept as indexed until it can be read. Each is said once a run, naming the file.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from metis_lite.errors import InvalidRequest
from metis_lite.records import MetisWarning
from metis_lite.store.files import Unreadable, open_inside, read_all

IGNORE_FILES = (".gitignore", ".ignore", ".metisignore")
"""The ignore files a folder may hold, from the one that weighs least to the one that weighs
most (each later one's patterns come after the earlier ones', as git reads later lines)."""

SPHINX_BUILD_MARKS = ("objects.inv", "searchindex.js")
"""What Sphinx's HTML builder writes at the top of a build (its inventory, its search index),
beside SPHINX_SOURCES."""

SPHINX_SOURCES = "_sources"
"""The folder where a Sphinx build copies each page's source as text (`_sources/library/
os.rst.txt` for `library/os.html`): every page again, in its markup, cut at other places. Read,
it doubles a folder's embedding (Python's documentation: 497 copies beside 530 pages, 21,182
chunks instead of 10,491) and puts a page's source beside the page in its results. So a folder
that holds one of SPHINX_BUILD_MARKS leaves its `_sources/` out, as if its own ignore file
said `/_sources/` first: that folder's ignore files, those below it and `--exclude
'!_sources/'` bring it back, and `--no-ignore` reads it (measured: docs/eval.md, "A fourth
tree")."""

SPHINX_RULE_ORIGIN = "a Sphinx build's copies of its pages' sources"
"""Where the SPHINX_SOURCES rule comes from, as a rule's origin says it."""

RULE_NAMES = (*IGNORE_FILES, *SPHINX_BUILD_MARKS)
"""The names whose presence in a folder changes what its rules leave out."""

IGNORE_FILE_BYTES_MAX = 1 << 20
"""An ignore file is read up to 1 MiB (the rest is said, once, and not read): hand-written
ones are a few KiB; a larger one is generated, and would cost every file a run lists."""

IGNORE_FILE_LINES_MAX = 10_000
"""… and up to 10,000 lines: each pattern is a regular expression every listed file is
matched against (10,000 of them: ~4 s a run over 100 files, compiling them included)."""

EXCLUDES_MAX = 1_000
"""The most patterns a source may store (`--exclude`)."""

PATTERN_CHARS_MAX = 4_096
"""The longest pattern a source may store: a path's length on Linux (PATH_MAX)."""

LINES_SHOWN = 5
"""The bad lines of one ignore file a warning names (then how many more)."""

IGNORE_FILE_TOO_LARGE = "IGNORE_FILE_TOO_LARGE"
IGNORE_FILE_UNREADABLE = "IGNORE_FILE_UNREADABLE"
IGNORE_LINE_INVALID = "IGNORE_LINE_INVALID"

FOLDER_MARK = "ps_d"
"""The group pathspec's regular expressions name for a match that ends at a folder's slash
(`a` matching `a/b.md` through its folder `a`): such a match is not of the path itself.
tests/test_ignore.py would fail on the day pathspec renamed it (every verdict against git's)."""

_TRAILING_SPACES = re.compile(r"(?<!\\) +$")
"""Spaces ending a pattern, which git drops unless the first is escaped (`name\\ `)."""

UTF8_BOM = b"\xef\xbb\xbf"

EXCLUDE_OPTION = "--exclude"
"""Where a source's own patterns come from, as a rule's origin says it."""


@dataclass(frozen=True)
class Rule:
    """A pattern that left something out, and where it is written, for a person."""

    pattern: str
    origin: str  # ".gitignore:3", "work/.ignore:1", or "--exclude"

    def __str__(self) -> str:
        return f"{self.origin} {self.pattern!r}"


@dataclass(frozen=True)
class _Pattern:
    """One compiled pattern: its regular expression for a file's path and for a folder's (a
    folder-only pattern, `cache/`, compiled without its slash), whether it leaves out (else it
    keeps: `!`), and its rule."""

    file: re.Pattern[str]
    folder: re.Pattern[str]
    excludes: bool
    rule: Rule


@dataclass(frozen=True)
class Patterns:
    """One ignore file's patterns (or a source's --exclude ones), in their order, matched
    against a path relative to `folder`, the folder of their file ('' or 'work/', '/'-ended).

    pathspec compiles each pattern (wildcards, `**`, anchoring, escapes, character classes);
    which one decides is git's rule, applied here: the last that matches the path itself.
    pathspec's GitIgnoreSpec also answers for a path through its folders (a pattern matching a
    folder matches what lies in it), which the walk has already decided: a folder left out is
    never entered, and a folder kept (by a negation, maybe in a deeper file) must not lose its
    files to a pattern that matched the folder (`doc/**` above, `!**/` below)."""

    folder: str
    patterns: tuple[_Pattern, ...]

    @classmethod
    def of(cls, folder: str, lines: Sequence[tuple[GitIgnoreSpecPattern, str, str]]) -> Patterns:
        """The patterns of (compiled pattern, its line, its origin) triples."""
        compiled = []
        for pattern, line, origin in lines:
            as_folder = pattern
            stripped = _TRAILING_SPACES.sub("", line)
            if stripped.endswith("/") and not stripped.endswith("\\/"):
                as_folder = _compile(stripped[:-1])[0] or pattern
            assert pattern.regex is not None and as_folder.regex is not None
            compiled.append(
                _Pattern(pattern.regex, as_folder.regex, bool(pattern.include), Rule(line, origin))
            )
        return cls(folder, tuple(compiled))

    def decide(self, relative: str, *, folder: bool) -> _Pattern | None:
        """The pattern that decides for a path of this folder (relative to it), or None."""
        for pattern in reversed(self.patterns):
            found = (pattern.folder if folder else pattern.file).search(relative)
            if found is not None and found.groupdict().get(FOLDER_MARK) is None:
                return pattern
        return None


@dataclass(frozen=True)
class Verdict:
    """A path's fate by the patterns: left out (`rule`, the pattern that decided), or kept."""

    excluded: bool
    rule: Rule | None = None


KEPT = Verdict(False)


def check_excludes(patterns: Iterable[object]) -> tuple[str, ...]:
    """A source's --exclude patterns, checked: INVALID_REQUEST for one that is not text, that
    gitignore would read as nothing (blank, a comment), that does not compile, or too many."""
    checked = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise InvalidRequest(f"an exclude pattern is text, not {pattern!r}")
        if "\n" in pattern or "\r" in pattern or "\0" in pattern:
            raise InvalidRequest(f"an exclude pattern is one line: {pattern!r}")
        if len(pattern) > PATTERN_CHARS_MAX:
            raise InvalidRequest(f"an exclude pattern has at most {PATTERN_CHARS_MAX} characters")
        compiled, error = _compile(pattern)
        if error is not None:
            raise InvalidRequest(f"exclude pattern {pattern!r} cannot be read: {error}")
        if compiled is None:
            raise InvalidRequest(
                f"exclude pattern {pattern!r} excludes nothing (gitignore reads it as blank or "
                "a comment; write \\# for a name starting with #)"
            )
        checked.append(pattern)
    if len(checked) > EXCLUDES_MAX:
        raise InvalidRequest(f"a source has at most {EXCLUDES_MAX} exclude patterns")
    return tuple(checked)


def exclude_patterns(excludes: Sequence[str]) -> Patterns | None:
    """A source's own patterns (checked when stored), anchored at the source folder."""
    if not excludes:
        return None
    compiled = ((_compile(p)[0], p) for p in excludes)
    return Patterns.of("", [(c, p, EXCLUDE_OPTION) for c, p in compiled if c is not None])


class Rules:
    """What one walk of a source folder leaves out, read as the walk goes down: each folder's
    ignore files read once, their patterns stacked on those of the folders above."""

    def __init__(
        self,
        root: Path,
        source: str,
        excludes: Sequence[str],
        *,
        read_files: bool,
        warnings: list[MetisWarning],
    ) -> None:
        self.root = root
        self.source = source
        self.read_files = read_files
        self.warnings = warnings
        self.excludes = exclude_patterns(excludes)
        self.used: dict[Rule, None] = {}
        """The rules that left something out this walk, in the order first used."""

    def folder(
        self, relative: str, entries: Iterable[str], above: tuple[Patterns, ...]
    ) -> tuple[Patterns, ...] | None:
        """The patterns in force in a folder ('' or 'work/'): those of the folders above, the
        SPHINX_SOURCES rule where `entries` (its names) make it a Sphinx build, and those of
        its own ignore files among them. None when one of them cannot be read: the folder is
        held (see the module)."""
        if not self.read_files:
            return above
        present = set(entries)
        stack = above
        if SPHINX_SOURCES in present and not present.isdisjoint(SPHINX_BUILD_MARKS):
            stack = (*stack, _sphinx_sources(relative))
        for name in IGNORE_FILES:
            if name in present:
                patterns = self._read(relative, name)
                if patterns is None:
                    return None
                if patterns.patterns:
                    stack = (*stack, patterns)
        return stack

    def verdict(self, stack: tuple[Patterns, ...], relative: str, *, folder: bool) -> Verdict:
        """Whether a file or folder ('/'-separated, relative to the source) is left out: the
        source's own patterns first, then the deepest ignore file's, up to the source's."""
        for patterns in (self.excludes, *reversed(stack)):
            if patterns is None:
                continue
            decided = patterns.decide(relative[len(patterns.folder) :], folder=folder)
            if decided is None:
                continue
            if not decided.excludes:
                return KEPT
            self.used[decided.rule] = None
            return Verdict(True, decided.rule)
        return KEPT

    @property
    def active(self) -> bool:
        """Whether anything could be left out at all (else the walk need not ask)."""
        return self.excludes is not None or self.read_files

    def _read(self, relative: str, name: str) -> Patterns | None:
        """One ignore file's patterns, its bad lines skipped and said; None when it cannot be
        read (said)."""
        shown = f"{self.source}/{relative}{name}"
        try:
            fd, opened = open_inside(self.root / relative / name, str(self.root))
        except Unreadable as exc:
            self._held(shown, relative, exc.reason)
            return None
        try:
            data = read_all(fd, min(opened.st_size, IGNORE_FILE_BYTES_MAX))
        except OSError as exc:
            self._held(shown, relative, f"cannot be read: {exc.strerror or exc}")
            return None
        finally:
            os.close(fd)
        data = data.removeprefix(UTF8_BOM)  # as git, which skips it
        lines = data.removesuffix(b"\n").split(b"\n")  # git's lines: a last newline ends one
        if len(data) > IGNORE_FILE_BYTES_MAX or len(lines) > IGNORE_FILE_LINES_MAX:
            lines = data[:IGNORE_FILE_BYTES_MAX].split(b"\n")[:IGNORE_FILE_LINES_MAX]
            if len(data) > IGNORE_FILE_BYTES_MAX:
                lines = lines[:-1]  # the last line read may be cut: left out
            self.warnings.append(
                MetisWarning(
                    IGNORE_FILE_TOO_LARGE,
                    f"{shown} is larger than an ignore file is read ({IGNORE_FILE_LINES_MAX:,} "
                    f"lines, {IGNORE_FILE_BYTES_MAX:,} bytes): it is read up to line "
                    f"{len(lines):,}, the rest is not",
                )
            )
        return self._patterns(shown, relative, name, lines)

    def _patterns(self, shown: str, relative: str, name: str, lines: list[bytes]) -> Patterns:
        good: list[tuple[GitIgnoreSpecPattern, str, str]] = []
        bad: list[str] = []
        for number, raw in enumerate(lines, start=1):
            try:
                line = raw.removesuffix(b"\r").decode("utf-8")
            except UnicodeDecodeError:
                bad.append(f"{number} (not UTF-8)")
                continue
            if not line:
                continue
            pattern, error = _compile(line)
            if error is not None:
                bad.append(f"{number} {line[:80]!r} ({error})")
            elif pattern is not None:
                good.append((pattern, line, f"{relative}{name}:{number}"))
        if bad:
            more = f" and {len(bad) - LINES_SHOWN} more" if len(bad) > LINES_SHOWN else ""
            self.warnings.append(
                MetisWarning(
                    IGNORE_LINE_INVALID,
                    f"{shown}: lines that are no pattern were skipped: "
                    f"{'; '.join(bad[:LINES_SHOWN])}{more}",
                )
            )
        return Patterns.of(relative, good)

    def _held(self, shown: str, relative: str, reason: str) -> None:
        where = f"{self.source}/{relative}" if relative else f"{self.source}/"
        self.warnings.append(
            MetisWarning(
                IGNORE_FILE_UNREADABLE,
                f"{shown}: {reason}; the files of {where} are left as they were indexed (none "
                "added, changed or removed) until it can be read",
            )
        )


def _compile(line: str) -> tuple[GitIgnoreSpecPattern | None, str | None]:
    """(the line's pattern, None), (None, None) for a line that is no pattern (blank, a
    comment), or (None, why) for one that cannot be compiled (`a\\`, `[z-a]`: git's own
    reading of such a line matches nothing, as skipping it does)."""
    try:
        pattern = GitIgnoreSpecPattern(line)
    except (ValueError, re.error, RecursionError) as exc:
        return None, str(exc) or type(exc).__name__
    return (pattern, None) if pattern.include is not None else (None, None)


def _sphinx_sources(folder: str) -> Patterns:
    """The SPHINX_SOURCES rule of a Sphinx build's folder ('' or 'html/')."""
    line = f"/{SPHINX_SOURCES}/"
    pattern = _compile(line)[0]
    assert pattern is not None
    return Patterns.of(folder, [(pattern, line, SPHINX_RULE_ORIGIN)])


def excluded_by(rules: Iterable[Rule], shown: int = 3) -> str:
    """The rules that left something out, for a person: the first `shown`, then how many more."""
    listed = list(rules)
    text = ", ".join(str(r) for r in listed[:shown])
    return text + (f" and {len(listed) - shown} more" if len(listed) > shown else "")
