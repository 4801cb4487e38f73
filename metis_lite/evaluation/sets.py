"""Evaluation sets: questions, each with what should be found, read from a JSON-lines file.

One line per question (blank lines are skipped):

    {"question": "how many holidays do I get",
     "expected": [{"document": "policies/leave.md", "page": 3}, {"document": "faq.md", "grade": 2}]}

`document` is the path inside its source (`policies/leave.md`) or `source/path`; `page` (PDF)
and `line` (text, Markdown) narrow it to the chunk holding that page or line; `grade` (default
1) weighs it in nDCG. A bare string in `expected` names a whole document. A BEIR folder is read
into the same shape by `beir.py`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metis_lite.errors import InvalidRequest
from metis_lite.records import MetisWarning

QUESTION_CHARS_MAX = 10_000
"""A question longer than this is a mistake in the file, not a question."""


@dataclass(frozen=True)
class Expected:
    """One thing a question should find: a document, or the chunk holding a page or line of it."""

    document: str
    page: int | None = None
    line: int | None = None
    grade: float = 1.0

    def label(self) -> str:
        where = f", page {self.page}" if self.page else ""
        where += f", line {self.line}" if self.line else ""
        return self.document + where

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"document": self.document}
        if self.page is not None:
            out["page"] = self.page
        if self.line is not None:
            out["line"] = self.line
        if self.grade != 1.0:
            out["grade"] = self.grade
        return out


@dataclass(frozen=True)
class Question:
    text: str
    expected: tuple[Expected, ...]

    def to_json(self) -> dict[str, Any]:
        return {"question": self.text, "expected": [e.to_json() for e in self.expected]}


QUESTIONS_LEFT_OUT = "QUESTIONS_LEFT_OUT"
"""The warning of a set read with questions it could not ask (judged, but without their text)."""
EXPECTED_NOT_IN_BASE = "EXPECTED_NOT_IN_BASE"
"""The warning of expected answers the base does not hold (they count as not found)."""


@dataclass(frozen=True)
class EvalSet:
    """Questions to ask a base, and where they came from."""

    name: str
    kind: str  # "beir", "jsonl" or "saved"
    origin: str  # the folder or file it was read from, or the base it is saved in
    questions: tuple[Question, ...]
    warnings: tuple[MetisWarning, ...] = ()
    """What reading it left out (QUESTIONS_LEFT_OUT)."""


def read_jsonl(path: str | Path) -> EvalSet:
    """Read an evaluation file; InvalidRequest names the line of the first mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read the evaluation file {path}: {exc}") from exc
    questions = parse_items(_lines(text, path), where=str(path))
    return EvalSet(path.stem, "jsonl", str(path), questions)


def _lines(text: str, path: Path) -> Iterable[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidRequest(f"{path}:{number}: not JSON ({exc.msg})") from exc


def parse_items(items: Iterable[tuple[int, Any]], *, where: str) -> tuple[Question, ...]:
    """Questions from (line number, decoded JSON) pairs, each checked."""
    questions = tuple(_question(item, f"{where}:{number}") for number, item in items)
    if not questions:
        raise InvalidRequest(f"{where} holds no question")
    return questions


def _question(item: Any, at: str) -> Question:
    if not isinstance(item, dict):
        raise InvalidRequest(f"{at}: each line must be an object with question and expected")
    unknown = set(item) - {"question", "expected", "id"}
    if unknown:
        raise InvalidRequest(f"{at}: unknown key {sorted(unknown)[0]!r} (question, expected)")
    text = item.get("question")
    if not isinstance(text, str) or not text.strip():
        raise InvalidRequest(f"{at}: question must be a non-empty string")
    if len(text) > QUESTION_CHARS_MAX:
        raise InvalidRequest(f"{at}: question is longer than {QUESTION_CHARS_MAX:,} characters")
    expected = item.get("expected")
    if not isinstance(expected, list) or not expected:
        raise InvalidRequest(f"{at}: expected must be a non-empty list of documents")
    return Question(text, tuple(_expected(e, at) for e in expected))


def _expected(value: Any, at: str) -> Expected:
    if isinstance(value, str):
        value = {"document": value}
    if not isinstance(value, dict):
        raise InvalidRequest(f"{at}: each expected item is an object with a document")
    unknown = set(value) - {"document", "page", "line", "grade"}
    if unknown:
        raise InvalidRequest(
            f"{at}: unknown key {sorted(unknown)[0]!r} in expected (document, page, line, grade)"
        )
    document = value.get("document")
    if not isinstance(document, str) or not document.strip():
        raise InvalidRequest(f"{at}: expected document must be a non-empty path")
    numbers = {}
    for key in ("page", "line"):
        number = value.get(key)
        if number is not None and (
            isinstance(number, bool) or not isinstance(number, int) or number < 1
        ):
            raise InvalidRequest(f"{at}: {key} must be a whole number from 1, not {number!r}")
        numbers[key] = number
    grade = value.get("grade", 1)
    if (
        isinstance(grade, bool)
        or not isinstance(grade, int | float)
        or not math.isfinite(grade)
        or grade <= 0
    ):
        raise InvalidRequest(f"{at}: grade must be a number above 0, not {grade!r}")
    return Expected(document.strip().strip("/"), numbers["page"], numbers["line"], float(grade))
