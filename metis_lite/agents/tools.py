"""What an agent may ask of bases: five tools and the passages results cite, whatever carries them.

    search       a question asked of one base or several (merged): results with citations,
                 scores at every step, warnings and `took`, each result with its passage address
    remember     add a fact (subject, key, when it was stated, the facts it replaces)
    facts        a base's facts, newest first, with what replaced each
    status       a base's state and counts
    list_bases   the bases the caller may name

mcp_server.py carries them over MCP (stdio and streamable HTTP) and knows nothing of searching;
this module knows nothing of the protocol. Each tool's arguments are checked once, here, into a
frozen request; what a tool answers is the JSON of serialize.py plus a short text form.
A scope limits the bases a caller may name (an HTTP token's grant): a base outside it is
FORBIDDEN, whether or not it is served, and `list_bases` shows only the bases inside it.
Every call runs on a small pool of lasting threads, since each thread holds its own connection
to each base it reads (Base.store). Nothing here logs, so a question is never written anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

from metis_lite.base import passages
from metis_lite.base.core import Base
from metis_lite.base.multi import MultiAnswer, search_bases
from metis_lite.errors import BaseNotFound, Forbidden, InvalidRequest
from metis_lite.records import Filters
from metis_lite.service.access import ALL_BASES
from metis_lite.service.serialize import (
    fact_to_json,
    facts_page_to_json,
    multi_answer_to_json,
    status_to_json,
)
from metis_lite.settings import FUSIONS, KINDS, MODES, TOP_K, TOP_K_MAX

THREADS = 4
"""Calls answered at once, and bases of one search asked side by side."""

FACTS_LIMIT = 50
FACTS_LIMIT_MAX = 1000

Scope = frozenset[str] | None
"""The bases a caller may name; None (or a set holding `*`) is every base."""

T = TypeVar("T")

_BASE = {
    "type": "string",
    "description": "The base's name, as list_bases shows it; may be left out when there is one.",
}
_TEXT_OR_NULL = {"type": ["string", "null"]}

TOOLS: dict[str, dict[str, Any]] = {
    "search": {
        "title": "Search the bases",
        "description": (
            "Ask a question of one or several bases (hybrid search: by meaning and by words, "
            "fused, then reranked when the base has a reranker). Returns the best passages "
            "first, each with its text, a citation (source, document, page or line, headings, "
            "snippet), its scores at every step and `uri`, an address to read the passage "
            "around it with resources/read. `warnings` say what could not be done (e.g. "
            "EMBEDDING_MODEL_UNAVAILABLE: the answer is by words only); `took` is in "
            "milliseconds. In a memory base, facts that still hold come before replaced ones."
        ),
        "readOnly": True,
        "inputSchema": {
            "type": "object",
            "properties": {
                "question": {"type": "string", "description": "The question, in any language."},
                "bases": {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "uniqueItems": True,
                    "description": "Bases to ask (list_bases); default every base you may read."
                    " Several are merged into one list, each result naming its base.",
                },
                "mode": {
                    "type": "string",
                    "enum": list(MODES),
                    "default": "hybrid",
                    "description": "hybrid (both, fused), dense (by meaning), keyword (by words:"
                    " exact names, codes, error numbers).",
                },
                "top_k": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": TOP_K_MAX,
                    "default": TOP_K,
                    "description": "How many results.",
                },
                "rerank": {
                    "type": "boolean",
                    "default": True,
                    "description": "Use the base's reranker when it has one.",
                },
                "fusion": {
                    "type": "string",
                    "enum": list(FUSIONS),
                    "description": "How hybrid joins its two lists: relative (each chunk's"
                    " meaning and words on fixed scales, the default) or rrf (reciprocal rank,"
                    " Σ 1/(60 + rank)); default the bases' own.",
                },
                "collapse": {
                    "type": "boolean",
                    "description": "One result per text (default true): a passage nearly the"
                    " same as one ranked before it is listed in that result's also_in.",
                },
                "filters": {
                    "type": "object",
                    "description": "Keep only some documents before anything is ranked.",
                    "properties": {
                        "path_prefix": {
                            "type": "string",
                            "description": "A path as results show it (handbook/policies/) "
                            "or inside the source (policies/).",
                        },
                        "kinds": {
                            "type": "array",
                            "items": {"type": "string", "enum": [*KINDS, "note"]},
                            "description": "Document kinds to keep (note: a base's facts).",
                        },
                        "sources": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "Source names to keep (status lists them).",
                        },
                    },
                    "additionalProperties": False,
                },
            },
            "required": ["question"],
            "additionalProperties": False,
        },
    },
    "remember": {
        "title": "Remember a fact",
        "description": (
            "Add a fact to a base's notes; later searches find it. A newer fact with the same "
            "`key` replaces the one that held (nothing is deleted: the old one stays findable, "
            "marked replaced). Returns the fact: id, stated_at, holds, replaced_by."
        ),
        "readOnly": False,
        "inputSchema": {
            "type": "object",
            "properties": {
                "base": _BASE,
                "text": {"type": "string", "minLength": 1, "description": "The fact, a sentence."},
                "subject": {**_TEXT_OR_NULL, "description": "Who or what it is about."},
                "key": {
                    **_TEXT_OR_NULL,
                    "description": "What it is the value of, e.g. ana/role: a newer fact with "
                    "the same key replaces this one.",
                },
                "at": {
                    **_TEXT_OR_NULL,
                    "description": "When it was stated, ISO 8601 (default now).",
                },
                "replaces": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "Ids of facts this one replaces.",
                },
            },
            "required": ["text"],
            "additionalProperties": False,
        },
    },
    "facts": {
        "title": "List facts",
        "description": (
            "A base's facts, newest stated first: id, text, stated_at, subject, key, holds, "
            "replaced_by, replaced_at; `total` counts them all."
        ),
        "readOnly": True,
        "inputSchema": {
            "type": "object",
            "properties": {
                "base": _BASE,
                "offset": {"type": "integer", "minimum": 0, "default": 0},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": FACTS_LIMIT_MAX,
                    "default": FACTS_LIMIT,
                },
                "holding": {
                    "type": "boolean",
                    "description": "true: only facts that hold; false: only replaced ones.",
                },
            },
            "additionalProperties": False,
        },
    },
    "status": {
        "title": "A base's status",
        "description": (
            "A base's state (Indexing or Waiting), kind, sources, documents, chunks, chunks "
            "without a vector, kinds, models, last indexing, searches per day and warnings."
        ),
        "readOnly": True,
        "inputSchema": {
            "type": "object",
            "properties": {"base": _BASE},
            "additionalProperties": False,
        },
    },
    "list_bases": {
        "title": "List the bases",
        "description": (
            "The bases you may search: name, kind (documents or memory), documents, chunks, "
            "embedding model and source names. Start here to choose `bases` for search."
        ),
        "readOnly": True,
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
    },
}


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool answers: its JSON (serialize.py's) and a short text form of it."""

    data: dict[str, Any]
    text: str


@dataclass(frozen=True)
class SearchRequest:
    question: str
    bases: tuple[str, ...]
    mode: str = "hybrid"
    top_k: int = TOP_K
    rerank: bool = True
    filters: Filters = field(default_factory=Filters)
    fusion: str | None = None
    collapse: bool = True


Hold = Callable[[], AbstractContextManager[None]]
"""What keeps the bases a call reads open until it ends (a read-only service's copies.py pins:
a copy replaced meanwhile is closed only after)."""


class Agent:
    """The tools over a set of open bases (not closed here: their owner closes them). Each call
    runs under `hold()`, from its start to its very end: a carrier that stops waiting for an
    answer (MCP's deadline) does not end the call, nor the hold on what it reads."""

    def __init__(
        self, bases: Mapping[str, Base], *, threads: int = THREADS, hold: Hold = nullcontext
    ) -> None:
        self.bases = bases  # read at each call: a read-only service puts new copies in it
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="agent")
        self._hold = hold

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result()

    # -- scope --------------------------------------------------------------------------------

    def visible(self, scope: Scope) -> list[str]:
        return [name for name in list(self.bases) if _allows(scope, name)]

    def base(self, name: str, scope: Scope) -> Base:
        if not _allows(scope, name):
            raise Forbidden(f"this token may not read the base {name!r}")
        base = self.bases.get(name)
        if base is None:
            raise BaseNotFound(f"no base named {name!r} is served here (see list_bases)")
        return base

    def _named(self, args: Mapping[str, Any], scope: Scope) -> Base:
        name = _text(args, "base")
        if name is None:
            visible = self.visible(scope)
            if len(visible) != 1:
                raise InvalidRequest(f"name the base: one of {', '.join(visible) or '(none)'}")
            name = visible[0]
        return self.base(name, scope)

    # -- tools --------------------------------------------------------------------------------

    def call(self, tool: str, arguments: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        """Run one tool; MetisErrors (with their public codes) for the carrier to report."""
        spec = TOOLS.get(tool)
        if spec is None:
            raise InvalidRequest(f"unknown tool {tool!r}: {', '.join(TOOLS)}")
        if not isinstance(arguments, Mapping):
            raise InvalidRequest("a tool's arguments are a JSON object")
        unknown = sorted(set(arguments) - set(spec["inputSchema"]["properties"]))
        if unknown:
            raise InvalidRequest(f"{tool} takes no argument {unknown[0]!r}")
        handler: Callable[[Mapping[str, Any], Scope], ToolAnswer] = getattr(self, f"_{tool}")
        with self._hold():
            return handler(arguments, scope)

    def _search(self, args: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        request = self._search_request(args, scope)
        answer = search_bases(
            {name: self.base(name, scope) for name in request.bases},
            request.question,
            mode=request.mode,
            top_k=request.top_k,
            rerank=request.rerank,
            filters=request.filters,
            fusion=request.fusion,
            collapse=request.collapse,
            executor=self._pool,
        )
        data = multi_answer_to_json(answer)
        for item, result in zip(data["results"], answer.results, strict=True):
            uri = passages.address_of(result.base or "", result.citation)
            if uri is not None:
                item["uri"] = uri
        return ToolAnswer(data, _answer_text(answer, data))

    def _search_request(self, args: Mapping[str, Any], scope: Scope) -> SearchRequest:
        question = args.get("question")
        if not isinstance(question, str):
            raise InvalidRequest("search needs a question (text)")
        bases = _texts(args, "bases") or tuple(self.visible(scope))
        if not bases:
            raise Forbidden("this token may read no base")
        if len(set(bases)) != len(bases):
            raise InvalidRequest("bases names a base twice")
        for name in bases:
            self.base(name, scope)
        filters = args.get("filters") or {}
        if not isinstance(filters, Mapping):
            raise InvalidRequest("filters is an object: path_prefix, kinds, sources")
        unknown = sorted(set(filters) - {"path_prefix", "kinds", "sources"})
        if unknown:
            raise InvalidRequest(f"filters takes no {unknown[0]!r}: path_prefix, kinds, sources")
        kinds = _texts(filters, "kinds")
        for kind in kinds:
            if kind not in (*KINDS, "note"):
                raise InvalidRequest(f"unknown kind {kind!r}: {', '.join((*KINDS, 'note'))}")
        mode = _text(args, "mode") or "hybrid"
        if mode not in MODES:
            raise InvalidRequest(f"mode is one of {', '.join(MODES)}, not {mode!r}")
        fusion = _text(args, "fusion")
        if fusion is not None and fusion not in FUSIONS:
            raise InvalidRequest(f"fusion is one of {', '.join(FUSIONS)}, not {fusion!r}")
        return SearchRequest(
            question=question,
            bases=bases,
            mode=mode,
            top_k=_int(args, "top_k", TOP_K, 1, TOP_K_MAX),
            rerank=_bool(args, "rerank", True),
            filters=Filters(
                path_prefix=_text(filters, "path_prefix"),
                kinds=kinds,
                sources=_texts(filters, "sources"),
            ),
            fusion=fusion,
            collapse=_bool(args, "collapse", True),
        )

    def _remember(self, args: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        base = self._named(args, scope)
        text = args.get("text")
        if not isinstance(text, str):
            raise InvalidRequest("remember needs the fact's text")
        replaces = args.get("replaces") or []
        if not isinstance(replaces, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in replaces
        ):
            raise InvalidRequest("replaces is a list of fact ids")
        fact = self._run(
            lambda: base.remember(
                text,
                stated_at=_text(args, "at"),
                subject=_text(args, "subject"),
                key=_text(args, "key"),
                replaces=tuple(replaces),
            )
        )
        state = "holds" if fact.holds else f"already replaced by fact {fact.replaced_by}"
        data = {"base": base.name, **fact_to_json(fact)}
        return ToolAnswer(data, f"fact {fact.id} of {base.name}, stated {fact.stated_at}: {state}")

    def _facts(self, args: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        base = self._named(args, scope)
        offset = _int(args, "offset", 0, 0, 10**9)
        limit = _int(args, "limit", FACTS_LIMIT, 1, FACTS_LIMIT_MAX)
        holding = args.get("holding")
        if holding is not None and not isinstance(holding, bool):
            raise InvalidRequest("holding is true or false")
        facts, total = self._run(lambda: base.facts(offset=offset, limit=limit, holding=holding))
        data = {
            "base": base.name,
            **facts_page_to_json(facts, total=total, offset=offset, limit=limit),
        }
        lines = [f"{len(facts)} of {total} facts of {base.name}"]
        for fact in facts:
            state = "holds" if fact.holds else f"replaced by fact {fact.replaced_by}"
            lines.append(f"{fact.id}. {fact.stated_at} [{fact.key or '-'}] {state}: {fact.text}")
        return ToolAnswer(data, "\n".join(lines))

    def _status(self, args: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        base = self._named(args, scope)
        status = self._run(base.status)
        data = status_to_json(status)
        text = (
            f"{status.name} ({status.kind}): {status.state}; {status.documents} documents, "
            f"{status.chunks} chunks, {status.chunks_without_vector} without a vector; "
            f"embedding {status.embedding}, reranker {status.reranker or 'none'}; sources "
            + (", ".join(s.name for s in status.sources) or "none")
        )
        warnings = [f"warning: {w.code}: {w.message}" for w in status.warnings]
        return ToolAnswer(data, "\n".join([text, *warnings]))

    def _list_bases(self, args: Mapping[str, Any], scope: Scope) -> ToolAnswer:
        statuses = [self._run(self.bases[name].status) for name in self.visible(scope)]
        data = {"bases": [_summary(status_to_json(s)) for s in statuses]}
        lines = [
            f"{s.name} ({s.kind}): {s.documents} documents, {s.chunks} chunks; sources "
            + (", ".join(x.name for x in s.sources) or "none")
            for s in statuses
        ]
        return ToolAnswer(data, "\n".join(lines) or "no base")

    # -- passages -----------------------------------------------------------------------------

    def read(self, uri: str, scope: Scope) -> passages.Passage:
        """The passage a `metis://` address names (passages.py), within the scope."""
        address = passages.parse_address(uri)
        with self._hold():
            base = self.base(address.base, scope)
            return self._run(passages.read_passage, base, address)


def _allows(scope: Scope, name: str) -> bool:
    return scope is None or ALL_BASES in scope or name in scope


def _answer_text(answer: MultiAnswer, data: dict[str, Any]) -> str:
    count = len(answer.results)
    lines = [
        f"{count} result{'' if count == 1 else 's'} from {', '.join(answer.bases)}, "
        f"{answer.mode}{', reranked' if answer.reranked else ''}; took {answer.took.total:.0f} ms"
    ]
    lines += [f"warning: {w.code}: {w.message}" for w in answer.warnings]
    for n, (result, item) in enumerate(zip(answer.results, data["results"], strict=True), 1):
        c = result.citation
        where = f", page {c.page}" if c.page else f":{c.line}" if c.line else ""
        lines.append(f"{n}. {c.title} — {c.source}/{c.document}{where} [{result.base}]")
        if c.headings:
            lines.append(f"   {' > '.join(c.headings)}")
        lines.append(f"   {c.snippet}")
        lines += [f"   also in {p.citation.source}/{p.citation.document}" for p in result.also_in]
        lines.append(f"   score {item['score']}" + (f" · {item['uri']}" if "uri" in item else ""))
    return "\n".join(lines)


def _summary(status: dict[str, Any]) -> dict[str, Any]:
    """list_bases' line for one base: what choosing a base to search needs."""
    keys = ("name", "kind", "state", "documents", "chunks", "embedding", "reranker")
    return {
        **{key: status[key] for key in keys},
        "sources": [s["name"] for s in status["sources"]],
    }


# -- arguments: checked once, with messages an agent can act on ---------------------------------


def _text(args: Mapping[str, Any], name: str) -> str | None:
    value = args.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{name} is text")
    return value


def _texts(args: Mapping[str, Any], name: str) -> tuple[str, ...]:
    value = args.get(name)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidRequest(f"{name} is a list of names")
    return tuple(value)


def _int(args: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = args.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidRequest(f"{name} is a whole number from {low} to {high}")
    return value


def _bool(args: Mapping[str, Any], name: str, default: bool) -> bool:
    value = args.get(name, default)
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} is true or false")
    return value
