"""The seam every provider implements: an Embedder turns texts into unit vectors, a Reranker
scores passages against a question; and the record (`Provider`) by which a provider joins the
registry (registry.py), the built-in ones (providers.py) as a plugin's.

Providers raise `ModelUnavailable` subclasses when the model does not answer within its
deadline (or refuses, or the connection fails) and `ModelAnswerInvalid` when it answers
something unusable (wrong dimension, NaN, fewer vectors than texts, garbage). Callers decide
how to degrade; providers never return partial results silently.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from metis_lite.errors import InvalidRequest

if TYPE_CHECKING:  # in annotations only: a search by words never imports NumPy
    import numpy as np


class Embedder(Protocol):
    name: str
    """The model's name, recorded with every vector it makes (e.g. "all-MiniLM-L6-v2")."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 array (len(texts), dimension), each row L2-normalised. Prefixes are the
        caller's business: texts arrive as they must be embedded."""
        ...

    def close(self) -> None: ...


class Reranker(Protocol):
    name: str

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """One relevance score per passage, in the passages' order (higher is better)."""
        ...

    def close(self) -> None: ...


Kind = Literal["embedding", "reranker"]
KINDS: tuple[Kind, ...] = ("embedding", "reranker")


class Url(str):
    """The type of an option that holds a model server's url: text, checked as a url
    (http.check_url) when a spec is given (`index`, Base.configure), so a typo is refused
    before a base records it. A provider handed one that is not (a spec recorded before
    urls were checked) raises its Unavailable error when it is made."""


OPTION_TYPES = (str, int, float, bool, Url)
"""What an option's value may be (float takes an int too; int and float never a bool)."""


@dataclass(frozen=True)
class Making:
    """What the caller hands a factory beside a spec's options: `workers`, the cores an
    in-process model may run on (None: every core the process may use); `client`, an
    httpx.Client an HTTP provider may share (None: its own). A dataclass, so that a field
    added later leaves every factory written before it working."""

    workers: int | None = None
    client: Any = None


@dataclass(frozen=True)
class Provider:
    """How a provider of one kind joins the registry: by `name` (what a spec's "provider"
    says) and `kind` ("embedding" or "reranker"; a provider of both is two records of one
    name).

    - `make(options, making)`: the Embedder or Reranker, from a spec's options (only the
      keys of `options` it gives a value, each of its type) and a `Making`; a model
      that is not there raises a ModelError (the base then answers by words).
    - `options`: each key a spec may hold beside "provider", with its type (OPTION_TYPES); any
      other key is refused with InvalidRequest. An embedding spec may also hold
      `query_prefix` and `document_prefix`, which the caller applies (prefixes.py).
    - `required`: the options a spec must give.
    - `check(options)`: raises InvalidRequest for options it cannot make a model of, beyond
      their names and types (say, two that exclude each other); nothing loaded or contacted.
    - `present(options)`: raises the ModelError `make` would raise for a model that is not
      there (not installed, no such file), loading and contacting nothing: what a status says.
    - `label(spec)`: the name recorded on its vectors. Left None, it is a spec's `model`,
      else the provider's name; a plugin's provider must leave it None, so that a base whose
      plugin fails to load still knows its vectors' name (and keeps them).
    """

    name: str
    kind: Kind
    make: Callable[[Mapping[str, Any], Making], Any]
    options: Mapping[str, type] = field(default_factory=lambda: MappingProxyType({}))
    required: tuple[str, ...] = ()
    check: Callable[[Mapping[str, Any]], None] | None = None
    present: Callable[[Mapping[str, Any]], None] | None = None
    label: Callable[[Mapping[str, Any]], str] | None = None

    def __post_init__(self) -> None:
        """A record that cannot work is refused as it is made (in a plugin: when it loads)."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise InvalidRequest(f"a provider's name must be text, not {self.name!r}")
        if self.kind not in KINDS:
            raise InvalidRequest(
                f"provider {self.name!r}: kind must be embedding or reranker, not {self.kind!r}"
            )
        if not callable(self.make):
            raise InvalidRequest(f"provider {self.name!r}: make must be callable")
        options = dict(self.options)
        for key, kind in options.items():
            if not isinstance(key, str) or key in ("provider", "api_key"):
                raise InvalidRequest(f"provider {self.name!r}: {key!r} cannot be an option")
            if kind not in OPTION_TYPES:
                raise InvalidRequest(
                    f"provider {self.name!r}: option {key!r} must be of type str, int, float,"
                    f" bool or Url, not {kind!r}"
                )
        unknown = [key for key in self.required if key not in options]
        if unknown:
            raise InvalidRequest(
                f"provider {self.name!r}: required {', '.join(unknown)} not among its options"
            )
        object.__setattr__(self, "options", MappingProxyType(options))
        object.__setattr__(self, "required", tuple(self.required))
