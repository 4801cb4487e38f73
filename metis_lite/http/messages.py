"""The index service's requests, one frozen type each, parsed and checked here and nowhere else.

Each body is a `msgspec.Struct`: msgspec decodes the JSON straight into it and checks every
field against its type and `Meta` bounds (unknown fields, wrong types, a boolean for a number,
a number past its bounds: all 400 INVALID_REQUEST). tests/test_api.py checks that the JSON
Schema msgspec derives from these types is the one openapi.yaml publishes, so the contract
and the code cannot disagree. What JSON allows and a Struct cannot see — a key given twice,
NaN — is refused by `_plain_json` first. Below this module nothing checks a request again.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from metis_lite.errors import InvalidRequest
from metis_lite.records import Filters
from metis_lite.retrieval.memory import FACT_TEXT_MAX
from metis_lite.service.bases import SearchRequest
from metis_lite.settings import TOP_K, TOP_K_MAX

Mode = Literal["hybrid", "dense", "keyword"]
Fusion = Literal["relative", "rrf"]
Kind = Literal["md", "txt", "html", "pdf", "docx", "epub", "odt", "pptx", "image", "note"]
TopK = Annotated[int, msgspec.Meta(ge=1, le=TOP_K_MAX)]
FactId = Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
"""A fact's id: SQLite's rowid range (a larger number is a 400, not an overflow)."""

FACTS_OFFSET_MAX = 10**9
FACTS_LIMIT_MAX = 1000
"""A page of facts: memory.list_facts's bounds."""


class FiltersBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    path_prefix: str | msgspec.UnsetType = msgspec.UNSET
    kinds: tuple[Kind, ...] = ()
    sources: tuple[str, ...] = ()

    def filters(self) -> Filters:
        prefix = None if self.path_prefix is msgspec.UNSET else self.path_prefix
        return Filters(path_prefix=prefix, kinds=self.kinds, sources=self.sources)


class SearchBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    question: str
    mode: Mode = "hybrid"
    top_k: TopK = TOP_K
    rerank: bool = True
    filters: FiltersBody = FiltersBody()
    fusion: Fusion | msgspec.UnsetType = msgspec.UNSET
    collapse: bool = True

    def request(self) -> SearchRequest:
        return SearchRequest(
            self.question,
            self.mode,
            self.top_k,
            self.rerank,
            self.filters.filters(),
            fusion=None if self.fusion is msgspec.UNSET else self.fusion,
            collapse=self.collapse,
        )


class SearchBasesBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    question: str
    bases: Annotated[tuple[str, ...], msgspec.Meta(min_length=1)]
    mode: Mode = "hybrid"
    top_k: TopK = TOP_K
    rerank: bool = True
    filters: FiltersBody = FiltersBody()
    fusion: Fusion | msgspec.UnsetType = msgspec.UNSET
    collapse: bool = True

    def __post_init__(self) -> None:
        if len(set(self.bases)) != len(self.bases):
            raise ValueError("bases names a base twice")

    def request(self) -> SearchRequest:
        return SearchRequest(
            self.question,
            self.mode,
            self.top_k,
            self.rerank,
            self.filters.filters(),
            self.bases,
            fusion=None if self.fusion is msgspec.UNSET else self.fusion,
            collapse=self.collapse,
        )


class FactBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=FACT_TEXT_MAX, pattern=r"\S")]
    stated_at: str | msgspec.UnsetType = msgspec.UNSET
    subject: Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    key: Annotated[str, msgspec.Meta(min_length=1, pattern=r"\S")] | msgspec.UnsetType = (
        msgspec.UNSET
    )
    replaces: tuple[FactId, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The keyword arguments of `Base.remember`."""
        given = {name: getattr(self, name) for name in ("stated_at", "subject", "key")}
        out: dict[str, Any] = {k: v for k, v in given.items() if v is not msgspec.UNSET}
        return {"text": self.text, "replaces": self.replaces, **out}


class IndexBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """No options: an empty body or `{}`."""


class FactsQuery(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    offset: Annotated[int, msgspec.Meta(ge=0, le=FACTS_OFFSET_MAX)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=FACTS_LIMIT_MAX)] = 50
    holding: Literal["true", "false"] | msgspec.UnsetType = msgspec.UNSET

    @property
    def holds(self) -> bool | None:
        return None if self.holding is msgspec.UNSET else self.holding == "true"


BODIES: dict[str, type[msgspec.Struct]] = {
    "SearchRequest": SearchBody,
    "SearchBasesRequest": SearchBasesBody,
    "FactRequest": FactBody,
    "IndexRequest": IndexBody,
    "Filters": FiltersBody,
}
"""Each body's type by its name in openapi.yaml's components.schemas."""

T = TypeVar("T", bound=msgspec.Struct)


def decode(raw: bytes, kind: type[T], *, empty_ok: bool = False) -> T:
    """The body as `kind`: JSON in UTF-8, checked field by field; an empty body is 400 unless
    `empty_ok` (then the type's defaults). A body of whitespace alone is no JSON: 400."""
    if not raw.strip():
        if empty_ok and not raw:
            return msgspec.json.decode(b"{}", type=kind)
        if empty_ok:
            raise InvalidRequest("the body is not valid JSON (only whitespace): send none, or {}")
        raise InvalidRequest("the request needs a JSON body")
    _plain_json(raw)
    try:
        value = msgspec.json.decode(raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"the body is not valid JSON: {_said(str(exc))}") from None
    try:
        return msgspec.convert(_whole_numbers(value), kind)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(_said(str(exc))) from None


def _whole_numbers(value: Any) -> Any:
    """JSON has one number type: `5.0` is the integer 5, as JSON Schema says (no field of these
    requests is a fraction, so every whole float becomes an int)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    return value


def decode_query(query: str, kind: type[T]) -> T:
    """A query string as `kind`: each parameter once, numbers as whole numbers."""
    try:
        pairs = urllib.parse.parse_qsl(
            query, keep_blank_values=True, strict_parsing=False, errors="strict"
        )
    except UnicodeDecodeError:
        raise InvalidRequest("the query is not percent-encoded UTF-8") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise InvalidRequest(f"the parameter {name!r} is given twice")
        params[name] = value
    fields = kind.__struct_fields__
    unknown = [name for name in params if name not in fields]
    if unknown:
        raise InvalidRequest(f"unknown parameter {unknown[0]!r}: {', '.join(fields)}")
    try:
        return msgspec.convert(params, kind, strict=False)  # strict=False: "50" is 50
    except msgspec.ValidationError as exc:
        raise InvalidRequest(_said(str(exc))) from None


def _said(message: str) -> str:
    """msgspec's message, its JSON path first: `top_k: Expected `int`, got `bool``."""
    text, sep, where = message.rpartition(" - at `$.")
    if not sep:
        return message
    return f"{where.rstrip('`')}: {text}"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> None:
    names = [key for key, _ in pairs]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise InvalidRequest(f"the field {twice!r} is given twice")


def _not_a_number(name: str) -> Any:
    raise InvalidRequest(f"{name} is not a JSON number")


def _plain_json(raw: bytes) -> None:
    """Refuse what msgspec would take silently: a key given twice (the last would win)."""
    try:
        json.loads(
            raw,
            object_pairs_hook=_no_duplicates,
            parse_constant=_not_a_number,
            parse_int=len,  # the shape only: a number of 5,000 digits is never converted
            parse_float=len,
        )
    except (ValueError, RecursionError):
        raise InvalidRequest("the body is not valid JSON in UTF-8") from None
