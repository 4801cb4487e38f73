"""A BEIR collection (corpus.jsonl, queries.jsonl, qrels/test.tsv) as an evaluation set and a base.

A base indexes folders, so the corpus is written out as one Markdown file per record, beside
the base (`BASE.corpus/`): the file is named by the record's `_id` (characters a file name
cannot hold are escaped as `~XX`), its front matter holds the title (which becomes the
document's title), and its body is the text, with any line that Markdown would read as a
heading escaped so that the record stays one section. The folder is added as the base's source
and indexed as any other; a result's document path leads back to its `_id`.

A base built this way records the corpus's fingerprint (sha256 of corpus.jsonl and of this
layout) in its spec, `eval_corpus`, and is reused only for the same corpus.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from metis_lite.errors import InvalidRequest
from metis_lite.evaluation.sets import QUESTIONS_LEFT_OUT, EvalSet, Expected, Question
from metis_lite.records import MetisWarning

LAYOUT_VERSION = 1
"""Bumped whenever the way records are written out changes (a base built before is rebuilt)."""

NAME_BYTES_MAX = 180
"""File names past this many bytes are shortened and end with a hash of the `_id`."""

QRELS_SPLITS = ("test.tsv", "dev.tsv", "train.tsv")
"""The judgements read, the first present: BEIR evaluates on test."""

_SAFE = re.compile(r"[A-Za-z0-9_.\-]")
_MARKDOWN_BLOCK = re.compile(r"^( {0,3})(#|=+[ \t]*$|-+[ \t]*$)")
"""A line Markdown reads as a heading (ATX) or a heading's underline (setext)."""


@dataclass(frozen=True)
class Corpus:
    """A BEIR folder's corpus: where it is and what identifies its content."""

    folder: Path
    fingerprint: str


def is_beir(path: Path) -> bool:
    return path.is_dir() and (path / "corpus.jsonl").is_file()


def document_path(record_id: str) -> str:
    """The file name a record is written to: its `_id`, escaped, + ".md"."""
    name = "".join(
        c if _SAFE.match(c) else "".join(f"~{b:02X}" for b in c.encode()) for c in record_id
    )
    if name.startswith("."):
        name = "~2E" + name[1:]  # a leading dot would make it a hidden file, never indexed
    if len(name.encode()) > NAME_BYTES_MAX:
        digest = hashlib.sha256(record_id.encode()).hexdigest()[:16]
        name = name[: NAME_BYTES_MAX - 17] + "~" + digest
    return name + ".md"


def markdown(title: str, text: str) -> str:
    """One record as Markdown: the title in front matter, the text as one section."""
    body = "\n".join(_MARKDOWN_BLOCK.sub(r"\1\\\2", line) for line in text.splitlines())
    quoted = title.replace("\n", " ").replace('"', '\\"').strip()
    return f'---\ntitle: "{quoted}"\n---\n{body}\n'


def _records(path: Path, what: str) -> Iterator[tuple[int, dict]]:
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror or exc}") from exc
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InvalidRequest(f"{path}:{number}: not JSON ({exc.msg})") from exc
                if not isinstance(record, dict) or "_id" not in record:
                    raise InvalidRequest(f"{path}:{number}: each {what} needs an _id")
                yield number, record
        except UnicodeDecodeError as exc:
            raise InvalidRequest(f"{path} is not UTF-8 text") from exc


def fingerprint(folder: Path) -> Corpus:
    """Hash corpus.jsonl (and the layout version) without writing anything."""
    path = folder / "corpus.jsonl"
    digest = hashlib.sha256(f"metis-lite eval layout {LAYOUT_VERSION}\n".encode())
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror or exc}") from exc
    return Corpus(folder, digest.hexdigest())


def write_corpus(folder: Path, target: Path) -> int:
    """Write each record of folder/corpus.jsonl as a Markdown file in `target`; returns how many.

    A file whose content is already what it would be is left alone (its time kept), so that
    indexing again skips it.
    """
    target.mkdir(parents=True, exist_ok=True)
    seen: dict[str, str] = {}
    for number, record in _records(folder / "corpus.jsonl", "record"):
        record_id = str(record["_id"])
        name = document_path(record_id)
        if name in seen:
            raise InvalidRequest(
                f"{folder / 'corpus.jsonl'}:{number}: _id {record_id!r} repeats (or names the "
                f"same file as {seen[name]!r})"
            )
        seen[name] = record_id
        content = markdown(str(record.get("title") or ""), str(record.get("text") or ""))
        path = target / name
        data = content.encode("utf-8")
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
    return len(seen)


def read_questions(folder: Path) -> EvalSet:
    """queries.jsonl and the qrels as questions; each expects the files of its judged records."""
    qrels_path = next(
        (
            folder / "qrels" / split
            for split in QRELS_SPLITS
            if (folder / "qrels" / split).is_file()
        ),
        None,
    )
    if qrels_path is None:
        raise InvalidRequest(
            f"{folder} has no qrels/test.tsv: a BEIR folder judges its queries there"
        )
    judged = _qrels(qrels_path)
    texts: dict[str, str] = {}
    for _, record in _records(folder / "queries.jsonl", "query"):
        texts[str(record["_id"])] = str(record.get("text") or "")
    questions, missing, empty = [], 0, 0
    for query_id, grades in judged.items():
        text = texts.get(query_id)
        if text is None:
            missing += 1
            continue
        if not text.strip():
            empty += 1
            continue
        expected = tuple(Expected(document_path(doc), grade=g) for doc, g in grades.items())
        questions.append(Question(text, expected))
    if not questions:
        raise InvalidRequest(f"{qrels_path} judges no query of {folder / 'queries.jsonl'}")
    warnings = []
    if missing:
        said = f"{missing} judged queries are not in queries.jsonl (left out)"
        warnings.append(MetisWarning(QUESTIONS_LEFT_OUT, said))
    if empty:
        warnings.append(
            MetisWarning(QUESTIONS_LEFT_OUT, f"{empty} judged queries have no text (left out)")
        )
    return EvalSet(folder.name, "beir", str(folder), tuple(questions), tuple(warnings))


def _qrels(path: Path) -> dict[str, dict[str, float]]:
    """query id → {corpus id: grade > 0}, in the file's order; a header line is optional."""
    judged: dict[str, dict[str, float]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"cannot read {path}: {exc}") from exc
    for number, line in enumerate(lines, start=1):
        fields = line.split("\t") if "\t" in line else line.split()
        if not fields or not line.strip():
            continue
        if len(fields) == 4:  # TREC layout: query 0 document grade
            fields = [fields[0], fields[2], fields[3]]
        if len(fields) != 3:
            raise InvalidRequest(f"{path}:{number}: expected query-id, corpus-id, score")
        try:
            grade = float(fields[2])
        except ValueError:
            if number == 1:
                continue  # the header
            raise InvalidRequest(f"{path}:{number}: the score must be a number") from None
        if grade > 0:
            judged.setdefault(fields[0].strip(), {})[fields[1].strip()] = grade
    return judged
