"""A base's spec, as stored in its `spec` table (one JSON value per key), parsed once into a
frozen `BaseSpec`: what the base is (documents or memory), how it cuts and embeds text.

A base's spec carries its own version (`version`, 1 when absent: every base made before it was
recorded). A spec of a newer version than this metis-lite knows is refused, as a newer schema
is, rather than read by rules that may have changed. A value of the wrong type is refused
with its key named. Keys this module does not know (an evaluation's corpus fingerprint) are
left to whoever wrote them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from metis_lite.errors import InvalidRequest, SchemaTooNew, SpecInvalid
from metis_lite.models import registry
from metis_lite.settings import BASE_KINDS, CHUNK_CHARS, EMBEDDED_MODEL, FUSIONS, MAX_FILE_BYTES
from metis_lite.text.chunking import check_chunk_size

SPEC_VERSION = 1
"""The layout of a base's spec: the keys below and their types. A base written with a larger
number is refused by this code (SCHEMA_TOO_NEW)."""

DEFAULT_SPEC: dict[str, Any] = {
    "version": SPEC_VERSION,
    "kind": "documents",
    "chunk_size": CHUNK_CHARS,
    # New bases name their model; a base that recorded {"provider": "embedded"} alone keeps
    # meaning all-MiniLM-L6-v2, the default it was made with (registry.model_label).
    "embedding": {"provider": "embedded", "model": EMBEDDED_MODEL},
    "reranker": None,
    "max_file_bytes": MAX_FILE_BYTES,
    "dimension": None,  # recorded from the model's first answer
}
"""What a new base records, and what a key absent from an older base means."""


@dataclass(frozen=True)
class BaseSpec:
    """A base's spec, checked. `embedding` and `reranker` are the model specs registry.py
    builds providers from (read-only mappings); `model_label` is the name its vectors carry."""

    kind: str
    chunk_size: int
    embedding: Mapping[str, Any]
    reranker: Mapping[str, Any] | None
    max_file_bytes: int
    dimension: int | None
    fusion: str | None
    model_label: str
    version: int = SPEC_VERSION

    @property
    def is_memory(self) -> bool:
        return self.kind == "memory"

    def __getitem__(self, key: str) -> Any:
        """`spec["embedding"]`: read as the dict it was, for callers written before it was typed."""
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)


_FIELDS = frozenset(
    ("kind", "chunk_size", "embedding", "reranker", "max_file_bytes", "dimension", "fusion")
)


def parse_spec(stored: Mapping[str, Any], *, where: str = "the base") -> BaseSpec:
    """The BaseSpec of a spec table's values (absent keys take DEFAULT_SPEC's); SCHEMA_TOO_NEW
    for a newer version, SPEC_INVALID for a value of the wrong type."""
    raw = {**DEFAULT_SPEC, **stored}
    version = raw["version"]
    if not _whole(version, low=1):
        raise SpecInvalid(f"{where}: spec version must be a whole number, not {version!r}")
    if version > SPEC_VERSION:
        raise SchemaTooNew(
            f"{where} has spec version {version}; this metis-lite reads up to {SPEC_VERSION}: "
            "upgrade metis-lite to open it"
        )
    kind, fusion = raw["kind"], raw.get("fusion")
    if kind not in BASE_KINDS:
        raise SpecInvalid(f"{where}: kind must be one of {', '.join(BASE_KINDS)}, not {kind!r}")
    if fusion is not None and fusion not in FUSIONS:
        raise SpecInvalid(f"{where}: fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")
    for key, low in (("chunk_size", 1), ("max_file_bytes", 0)):
        if not _whole(raw[key], low=low):
            raise SpecInvalid(f"{where}: {key} must be a whole number, not {raw[key]!r}")
    if raw["dimension"] is not None and not _whole(raw["dimension"], low=1):
        raise SpecInvalid(f"{where}: dimension must be a whole number, not {raw['dimension']!r}")
    embedding, reranker = raw["embedding"], raw["reranker"]
    if not isinstance(embedding, Mapping):
        raise SpecInvalid(f"{where}: the embedding spec must be an object, not {embedding!r}")
    if reranker is not None and not isinstance(reranker, Mapping):
        raise SpecInvalid(f"{where}: the reranker spec must be an object or null, not {reranker!r}")
    return BaseSpec(
        kind=kind,
        chunk_size=raw["chunk_size"],
        embedding=MappingProxyType(dict(embedding)),
        reranker=None if reranker is None else MappingProxyType(dict(reranker)),
        max_file_bytes=raw["max_file_bytes"],
        dimension=raw["dimension"],
        fusion=fusion,
        model_label=registry.model_label(embedding),
        version=version,
    )


def _whole(value: object, *, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def spec_changes(
    spec: BaseSpec,
    counts: Mapping[str, int],
    *,
    embedding: Mapping[str, Any] | None = None,
    reranker: Mapping[str, Any] | None | Literal[False] = False,
    chunk_size: int | None = None,
    kind: str | None = None,
    reembed: bool = False,
    fusion: str | None = None,
) -> dict[str, Any]:
    """The keys to write to change `spec` as asked (Base.configure), checked against what the
    base holds (`counts`: its chunks, documents and vectors); {} when nothing changes. A new
    embedding model needs `reembed` once the base has vectors (never mixed vectors); chunk size
    and kind are set while the base is empty; `fusion` may change at any time; `reranker`
    False leaves it, None removes it."""
    changes: dict[str, Any] = {}
    if embedding is not None and dict(embedding) != dict(spec.embedding):
        registry.check_embedding_spec(embedding)
        new_label = registry.model_label(embedding)
        if counts["vectors"] and new_label != spec.model_label and not reembed:
            raise InvalidRequest(
                f"the base's vectors were made by {spec.model_label}; to use {new_label} "
                "index with --reembed (every chunk is embedded again)"
            )
        changes["embedding"] = dict(embedding)
        changes["dimension"] = None
    if reranker is not False:
        registry.check_reranker_spec(reranker or None)
        changes["reranker"] = dict(reranker) if reranker else None
    if chunk_size is not None and chunk_size != spec.chunk_size:
        if counts["chunks"]:
            raise InvalidRequest("the chunk size is set when a base is created (it is not empty)")
        changes["chunk_size"] = check_chunk_size(chunk_size)
    if kind is not None and kind != spec.kind:
        if kind not in BASE_KINDS:
            raise InvalidRequest(f"unknown base kind {kind!r}: {', '.join(BASE_KINDS)}")
        if counts["documents"]:
            raise InvalidRequest("a base's kind is chosen when it is created (it is not empty)")
        changes["kind"] = kind
    if fusion is not None and fusion != spec.fusion:
        if fusion not in FUSIONS:
            raise InvalidRequest(f"unknown fusion {fusion!r}: {', '.join(FUSIONS)}")
        changes["fusion"] = fusion
    return changes
