"""What an index run does with a file whose bytes are a document's already: records a copy.

A file read because it is new or changed (ingest.py), whose sha256 and kind are those of a
document of the base (of any source) or of a file this run reads before it, is not parsed: once
the files before it are written (the pipeline writes in the order they were read, so the
earlier file is then a document), it is recorded as a copy of that document (Store.record_copy;
store/document_copies.py says what happens when either changes or goes). An earlier file that
could not be indexed leaves its copies skipped with why: they hold the same bytes, and are read
again by the next run. A run that cuts documents again by newer rules reads each copy again
too and records it again. An empty file is no copy: it has no text, so no document either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from metis_lite.indexing.parse_pool import Parsed
from metis_lite.indexing.walk import Skip, SourceFile
from metis_lite.store import Store, StoredDocument


class _Counts(Protocol):
    added: int
    updated: int
    skipped: list[Skip]


@dataclass
class CopyRun:
    """One run's files sent to be parsed, by (sha256, kind): a later file with the same bytes
    and kind waits for the first to be written, and becomes its copy."""

    _read: dict[tuple[str, str], str] = field(default_factory=dict)  # → its label

    def claim(
        self,
        store: Store,
        source_id: int,
        file: SourceFile,
        read: tuple[bytes, str, Any],
        stored: StoredDocument | None,
        tally: _Counts,
        label: str,
    ) -> Callable[[Parsed | None], int] | None:
        """What writes `file` as a copy, once the files read before it are written; None when
        it is no copy (it is then parsed, and a later file with its bytes is its copy)."""
        data, digest, before = read
        if not data:  # an empty file is no document (no text), so no copy of one either
            return None
        key = (digest, file.kind)
        earlier = self._read.get(key)
        here = (source_id, file.name)
        if earlier is None and store.original_of(digest, file.kind, other_than=here) is None:
            self._read[key] = label
            return None

        def write(parsed: Parsed | None) -> int:
            original = store.original_of(digest, file.kind, other_than=here)
            if original is None:
                tally.skipped.append(
                    Skip(label, f"the same bytes as {earlier or 'a document'}, not indexed")
                )
                return 0
            store.record_copy(
                source_id=source_id,
                path=file.name,
                document_id=original,
                size=before.st_size,
                mtime=before.st_mtime,
            )
            if stored is not None:
                tally.updated += 1
            else:
                tally.added += 1
            return 0

        return write
