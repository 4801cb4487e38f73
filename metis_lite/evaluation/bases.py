"""The base a BEIR collection is evaluated on: built from its corpus, or reused when it was.

With no base named, the base is a cache file beside the collection's folder
(`faquad_pt.metis-eval.db` next to `faquad_pt/`) or, where that folder's parent cannot be
written, in the temp dir; a cache built from an older corpus is rebuilt. A base that is named
is built there when it is new or empty (so `metis-lite index BASE --embedding … --chunk-size …`
with no folder, then `eval --base BASE`, evaluates another model or chunk size), reused when it
was built from the same corpus, and refused otherwise: nothing a user indexed is replaced.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.evaluation import beir
from metis_lite.indexing.ingest import Progress
from metis_lite.records import MetisWarning

SPEC_KEY = "eval_corpus"
"""The base's spec entry recording which corpus it was built from."""

SOURCE_NAME = "corpus"
CACHE_SUFFIX = ".metis-eval.db"


@dataclass(frozen=True)
class BaseChoice:
    """Which base an evaluation ran on, and how it came to be."""

    path: Path
    where: str  # "given", "beside the evalset" or "in the temp dir"
    built: bool  # its documents were indexed by this run (not reused)
    warnings: tuple[MetisWarning, ...] = ()


def corpus_folder(base_path: Path) -> Path:
    """Where a base's corpus records are written as files: BASE.corpus/ beside it."""
    return Path(str(base_path) + ".corpus")


def default_base_path(folder: Path) -> tuple[Path, str]:
    folder = folder.resolve()
    name = folder.name or "corpus"
    if os.access(folder.parent, os.W_OK):
        return folder.parent / (name + CACHE_SUFFIX), "beside the evalset"
    tag = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
    return Path(tempfile.gettempdir()) / "metis-lite-eval" / f"{name}-{tag}.db", "in the temp dir"


def open_beir_base(
    folder: Path, base_path: str | Path | None = None, *, progress: Progress | None = None
) -> tuple[Base, BaseChoice]:
    """Open (building or reusing) the base for a BEIR folder; the caller closes it."""
    corpus = beir.fingerprint(folder)
    if base_path is None:
        path, where = default_base_path(folder)
    else:
        path, where = Path(base_path), "given"
    path.parent.mkdir(parents=True, exist_ok=True)
    base = Base(path, create=True)
    try:
        recorded = base.store.spec().get(SPEC_KEY)
        if recorded is not None and recorded.get("fingerprint") != corpus.fingerprint:
            if where == "given":
                raise InvalidRequest(
                    f"{path} was built from another corpus ({recorded.get('folder')}): name "
                    "another --base, or delete it to build it again"
                )
            base.close()
            _remove_cache(path)
            base = Base(path, create=True)
            recorded = None
        if recorded is None:
            counts = base.store.counts()
            if counts["documents"] or counts["sources"]:
                raise InvalidRequest(
                    f"{path} holds other sources: evaluate a collection on a new base (--base "
                    "NEW.db) or on the one built from the same corpus"
                )
            base.store.set_spec(
                {SPEC_KEY: {"fingerprint": corpus.fingerprint, "folder": str(folder.resolve())}}
            )
            beir.write_corpus(folder, corpus_folder(path))
            base.add_source(corpus_folder(path), name=SOURCE_NAME)
        # Also finishes a build that was interrupted, and fills vectors that were left missing.
        report = base.index(progress=progress)
    except BaseException:
        base.close()
        raise
    built = report.added > 0 or report.updated > 0
    return base, BaseChoice(path, where, built, report.warnings)


def _remove_cache(path: Path) -> None:
    """Delete an evaluation cache base (only ever one whose spec says it was built by eval)."""
    for suffix in ("", "-wal", "-shm", ".lock"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    shutil.rmtree(corpus_folder(path), ignore_errors=True)
