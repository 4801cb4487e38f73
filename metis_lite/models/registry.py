"""Every embedding model and reranker is found by name here: a base's spec names a provider,
and the registry makes its model. The built-in providers (providers.py) join it as records;
a plugin joins it through the entry-point group `metis_lite.providers` — so adding a provider
never means editing metis-lite.

An embedding spec (a base's `spec.embedding`), for the built-ins (providers.py says more):

    {"provider": "embedded", "model": "multilingual-e5-small"}   a shipped model by name (the
                                                  default; or "all-MiniLM-L6-v2")
    {"provider": "embedded", "path": "/models/e5-small-q4.bin"}  an e5 .bin file, or a local
                                                  model folder in Hugging Face layout
    {"provider": "embedded"}                      all-MiniLM-L6-v2: what bases made before E5
                                                  was the default recorded, and still mean
    {"provider": "openai", "url": "http://127.0.0.1:8080/v1", "model": "m", "api_key_env": "OPENAI_API_KEY"}
    {"provider": "tei", "url": "http://127.0.0.1:8080"}
    {"provider": "tei", "urls": ["http://gpu1:8080", "http://gpu2:8080"]}   several servers of
                                                  one model (openai, tei, ollama embedders)
    {"provider": "ollama", "url": "http://127.0.0.1:11434", "model": "nomic-embed-text"}

A reranker spec (a base's `spec.reranker`; null for none):

    {"provider": "embedded", "path": "/models/ms-marco-MiniLM-L-6-v2"}
    {"provider": "tei", "url": "http://127.0.0.1:8081"}
    {"provider": "cohere", "url": "https://api.cohere.com/v1", "model": "rerank-v3.5", "api_key_env": "CO_API_KEY"}

Every embedding spec may carry `query_prefix` and `document_prefix` (see `prefixes.py`). A
missing `provider` means "embedded". An unknown provider, a missing or mistyped option, an
unknown key, an API key itself, or a url that is not one (`http.check_url`) raises
`InvalidRequest` — so `index` refuses it when it is given, before a base is made, and `serve`
refuses a base that holds one. Building a provider from a spec whose url is not one (a base
made before urls were checked) raises the model's Unavailable error instead: the base answers
by words, keeps every document and fact, and says which url to fix.

Plugins. An entry point of the group is named after the provider it adds and points at its
`Provider` record (base.py), or at a tuple of them (one per kind), each of that name:

    [project.entry-points."metis_lite.providers"]
    acme = "acme_metis:PROVIDER"

It is loaded the first time a spec names it, never before: a plugin that fails to load
(its import raises, or it points at something else) is a ModelError naming it, raised only
where its provider is asked for — a base of another provider never notices. A plugin cannot
take a built-in's name (an entry point of that name is never loaded).

Names recorded on vectors (`model_label`, loading and contacting nothing): a built-in's own
(providers.py); for any other provider, its spec's `model`, else the provider's name — decided
here, never by the plugin, so a base whose plugin is broken keeps its vectors' name, and an
index run meanwhile keeps its vectors. Vectors are compared only with vectors of the same
label, so changing a spec's `model` means re-embedding, while moving the same model to another
server or folder does not.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from metis_lite.errors import InvalidRequest, MetisError, ModelError
from metis_lite.models.base import KINDS, Embedder, Kind, Making, Provider, Reranker, Url
from metis_lite.models.http_answers import check_url
from metis_lite.models.providers import BUILT_IN, SEVERAL_URLS, URLS

if TYPE_CHECKING:  # read when plugins are looked for (~15 ms to import)
    from importlib import metadata

GROUP = "metis_lite.providers"
"""The entry-point group a plugin's distribution names its providers in."""

PREFIX_OPTIONS: dict[str, type] = {"query_prefix": str, "document_prefix": str}
"""Options of every embedding spec, whoever provides it: the caller applies them."""


class _Registry:
    """The providers of this process by (name, kind): the built-ins and those registered by
    code, then each plugin once a spec named it (a record registered by code goes first: a
    test's stand-in for a plugin's provider)."""

    def __init__(self, built_in: tuple[Provider, ...]) -> None:
        self._lock = threading.RLock()
        self._records: dict[tuple[str, Kind], Provider] = {}
        self._built_in = frozenset(p.name for p in built_in)
        self._plugins: dict[str, tuple[Provider, ...]] = {}  # loaded, by entry point name
        self._broken: dict[str, str] = {}  # a plugin that failed to load: why
        self._scanned: tuple[tuple[str, ...], dict[str, list[metadata.EntryPoint]]] | None = None
        for provider in built_in:
            self._records[(provider.name, provider.kind)] = provider

    # -- registering ------------------------------------------------------------------------

    def register(self, providers: tuple[Provider, ...]) -> None:
        with self._lock:
            for provider in _records(providers, "register"):
                known = self._records.get((provider.name, provider.kind))
                if known is not None and known != provider:
                    raise InvalidRequest(
                        f"the {provider.kind} provider {provider.name!r} is registered already"
                    )
            for provider in providers:
                self._records[(provider.name, provider.kind)] = provider

    @contextmanager
    def registered(self, providers: tuple[Provider, ...]) -> Iterator[None]:
        with self._lock:
            keys = [(p.name, p.kind) for p in _records(providers, "registered")]
            before = {key: self._records.get(key) for key in keys}
            for provider in providers:
                self._records[(provider.name, provider.kind)] = provider
        try:
            yield
        finally:
            with self._lock:
                for key, earlier in before.items():
                    if earlier is None:
                        self._records.pop(key, None)
                    else:
                        self._records[key] = earlier

    # -- finding ----------------------------------------------------------------------------

    def find(self, name: Any, kind: Kind) -> Provider:
        """The provider of that name and kind; InvalidRequest for none, ModelError for a
        plugin of that name that failed to load."""
        if isinstance(name, str):
            found = self._records.get((name, kind))
            if found is not None:
                return found
            if self._is_plugin(name):
                for provider in self._load(name):
                    if provider.kind == kind:
                        return provider
        raise InvalidRequest(
            f"unknown {kind} provider {name!r}; known: {', '.join(self.names(kind))}"
            + self._broken_said()
        )

    def label_rule(self, name: Any) -> Provider | None:
        """The record whose `label` names a provider's vectors, None for the default rule
        (a spec's model, else the name); InvalidRequest for no provider of that name.
        Never loads a plugin: its label follows the default."""
        if isinstance(name, str):
            for kind in KINDS:
                found = self._records.get((name, kind))
                if found is not None and found.label is not None:
                    return found
            if any(key[0] == name for key in self._records) or self._is_plugin(name):
                return None
        known = sorted({*self.names("embedding"), *self.names("reranker")})
        raise InvalidRequest(
            f"unknown model provider {name!r}; known: {', '.join(known)}"
            " (a plugin's provider is known once its plugin is installed)"
        )

    def names(self, kind: Kind) -> list[str]:
        """The providers of a kind: built-ins first, then those registered by code, then the
        plugins (each loaded to tell its kinds; one that fails to load is left out)."""
        names = [name for (name, of_kind) in list(self._records) if of_kind == kind]
        for name in self._entry_points():
            if self._is_plugin(name) and name not in names:
                try:
                    if any(p.kind == kind for p in self._load(name)):
                        names.append(name)
                except ModelError:
                    pass  # said apart (_broken_said)
        return names

    def _broken_said(self) -> str:
        broken = sorted(name for name in self._broken if self._is_plugin(name))
        return f" (plugins that failed to load: {', '.join(broken)})" if broken else ""

    # -- plugins ----------------------------------------------------------------------------

    def _is_plugin(self, name: str) -> bool:
        return name not in self._built_in and name in self._entry_points()

    def _entry_points(self) -> dict[str, list[metadata.EntryPoint]]:
        """The group's entry points by name, read from the installed distributions' metadata
        (nothing imported), read again only when sys.path changes."""
        key = tuple(sys.path)
        scanned = self._scanned
        if scanned is None or scanned[0] != key:
            from importlib import metadata

            found: dict[str, list[metadata.EntryPoint]] = {}
            for point in metadata.entry_points(group=GROUP):
                found.setdefault(point.name, []).append(point)
            scanned = self._scanned = (key, found)
        return scanned[1]

    def _load(self, name: str) -> tuple[Provider, ...]:
        """The providers of the plugin named so, imported once; a failure is kept, and raised
        as a ModelError naming the plugin at each lookup of its name."""
        with self._lock:
            if name in self._broken:
                raise ModelError(self._broken[name])
            if name in self._plugins:
                return self._plugins[name]
            points = self._entry_points()[name]
            where = "; ".join(f"{p.value} from {_distribution(p)}" for p in points)
            try:
                if len(points) > 1:
                    raise InvalidRequest("two installed distributions name this provider")
                records = _plugin_records(name, points[0].load())
            except Exception as exc:  # noqa: BLE001 - whatever a plugin raises, it is said
                self._broken[name] = (
                    f"the model provider plugin {name!r} ({where}) failed to load:"
                    f" {type(exc).__name__}: {exc}; fix it or uninstall it"
                )
                raise ModelError(self._broken[name]) from None
            self._plugins[name] = records
            return records


def _records(providers: tuple[Provider, ...], what: str) -> tuple[Provider, ...]:
    for provider in providers:
        if not isinstance(provider, Provider):
            raise InvalidRequest(f"{what} takes Provider records, not {type(provider).__name__}")
    return providers


def _plugin_records(name: str, loaded: Any) -> tuple[Provider, ...]:
    """What an entry point points at, checked: a Provider, or a tuple of them, each named as
    the entry point, of distinct kinds, and naming its vectors by the default rule."""
    records = (loaded,) if isinstance(loaded, Provider) else loaded
    if not isinstance(records, tuple | list) or not records:
        raise InvalidRequest(f"it points at {type(loaded).__name__}, not a Provider")
    for provider in records:
        if not isinstance(provider, Provider):
            raise InvalidRequest(f"it holds a {type(provider).__name__}, not a Provider")
        if provider.name != name:
            raise InvalidRequest(f"its provider is named {provider.name!r}, not {name!r}")
        if provider.label is not None:
            raise InvalidRequest(
                "a plugin's provider leaves label to the registry (its model, else its name)"
            )
    if len({p.kind for p in records}) != len(records):
        raise InvalidRequest("it names two providers of one kind")
    return tuple(records)


def _distribution(point: metadata.EntryPoint) -> str:
    dist = getattr(point, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "an unnamed distribution"


_REGISTRY = _Registry(BUILT_IN)


def register(*providers: Provider) -> None:
    """Add providers to this process's registry: what a program that runs metis-lite in its
    own process may do instead of installing a plugin. A name and kind taken by another record
    is refused (InvalidRequest); registering the same record again does nothing."""
    _REGISTRY.register(providers)


@contextmanager
def registered(*providers: Provider) -> Iterator[None]:
    """These providers for the block, each in place of any of its name and kind, and the
    ones before them back after: a test's stand-in models, a plugin's author trying one."""
    with _REGISTRY.registered(providers):
        yield


def provider_names(kind: Kind) -> list[str]:
    """The names a spec of that kind may give: the built-ins, then those registered, then the
    plugins installed (each loaded to tell its kinds; one that fails is left out)."""
    return _REGISTRY.names(kind)


# -- models from specs ------------------------------------------------------------------------


def embedder_from_spec(
    spec: Mapping[str, Any],
    *,
    client: Any = None,
    workers: int | None = None,
    dimension: int | None = None,
) -> Embedder:
    """The Embedder a spec names; `client` (an httpx.Client) is shared by HTTP providers;
    `workers`: threads an embedded model runs on (default: every core the process may use);
    `dimension`: the dimension the base's vectors have, handed to a provider that takes it
    (an HTTP one) unless its spec names one, so one wrong answer is refused rather than
    learnt."""
    provider, options = _checked(spec, "embedding")
    if dimension is not None and "dimension" in provider.options:
        options.setdefault("dimension", dimension)
    return cast(Embedder, _made(provider, options, Making(workers=workers, client=client)))


def reranker_from_spec(
    spec: Mapping[str, Any] | None, *, client: Any = None, workers: int | None = None
) -> Reranker | None:
    """The Reranker a spec names, or None when the base has none (`workers` as above)."""
    if spec is None:
        return None
    provider, options = _checked(spec, "reranker")
    return cast(Reranker, _made(provider, options, Making(workers=workers, client=client)))


def _made(provider: Provider, options: dict[str, Any], making: Making) -> Any:
    """The provider's model. What goes wrong in a provider not built in (its factory raises
    what is not a MetisError, or makes what lacks the seam's method) is said as a ModelError
    naming it — the base answers by words — rather than a crash of each search."""
    try:
        model = provider.make(options, making)
    except MetisError:
        raise
    except Exception as exc:
        if provider in BUILT_IN:
            raise
        raise ModelError(
            f"the {provider.kind} provider {provider.name!r} could not make its model:"
            f" {type(exc).__name__}: {exc}"
        ) from exc
    method = "embed" if provider.kind == "embedding" else "score"
    if not callable(getattr(model, method, None)) or not callable(getattr(model, "close", None)):
        raise ModelError(
            f"the {provider.kind} provider {provider.name!r} made {type(model).__name__},"
            f" which has no {method}() and close()"
        )
    return model


def check_embedder(spec: Mapping[str, Any]) -> None:
    """Raise the ModelError `embedder_from_spec` would raise for a model that is not there (an
    embedded model not installed, with how to install it; a model file or folder that does
    not exist; a url that is not one; a plugin that fails to load), without loading or
    contacting it: what status and a search without vectors say while the model is not
    loaded."""
    provider, options = _checked(spec, "embedding")
    if provider.present is not None:
        provider.present(options)


def model_label(spec: Mapping[str, Any]) -> str:
    """The name a spec's model records on what it makes (module docstring), without loading or
    contacting it; takes an embedding or a reranker spec."""
    if not isinstance(spec, Mapping):
        raise InvalidRequest(f"a model spec must be an object, not {type(spec).__name__}")
    name = spec.get("provider", "embedded")
    rule = _REGISTRY.label_rule(name)
    if rule is not None and rule.label is not None:
        return rule.label(spec)
    model = spec.get("model")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"model must be a string, not {model!r}")
    return model or str(name)


def check_embedding_spec(spec: Mapping[str, Any]) -> None:
    """Raise InvalidRequest unless `embedder_from_spec` can build this spec (nothing is loaded
    or contacted but the plugin that provides it), its url included."""
    _checked(spec, "embedding", urls=True)


def check_reranker_spec(spec: Mapping[str, Any] | None) -> None:
    """Raise InvalidRequest unless `reranker_from_spec` can build this spec (None is fine)."""
    if spec is not None:
        _checked(spec, "reranker", urls=True)


def check_urls(embedding: Mapping[str, Any], reranker: Mapping[str, Any] | None) -> None:
    """Raise InvalidRequest when a base's model spec holds a url that is not one (what `serve`
    checks of each base it opens; other keys are left to the base, as older bases wrote them)."""
    for what, spec in (("embedding", embedding), ("reranker", reranker)):
        url = spec.get("url") if isinstance(spec, Mapping) else None
        several = spec.get(URLS) if isinstance(spec, Mapping) else None
        urls = [url, *(several if isinstance(several, list) else ())]
        for one in urls:
            if not isinstance(one, str):
                continue
            try:
                check_url(one, what=f"the {what} url")
            except InvalidRequest as exc:
                message = f"{exc.message}; give it another with index --{what}-url URL"
                raise InvalidRequest(message) from None


def _checked(spec: Any, what: Kind, *, urls: bool = False) -> tuple[Provider, dict[str, Any]]:
    """(provider, its options) from a spec, each key known and of its type (with `urls`, each
    url a url too), else InvalidRequest; the options hold only the provider's own keys that
    have a value (not the prefixes, which the caller applies)."""
    if not isinstance(spec, Mapping):
        raise InvalidRequest(f"{what} spec must be an object, not {type(spec).__name__}")
    name = spec.get("provider", "embedded")
    provider = _REGISTRY.find(name, what)
    if "api_key" in spec:
        raise InvalidRequest(
            f"{what} spec must not hold an API key: put it in an environment variable"
            " and name that variable in api_key_env"
        )
    allowed = {**provider.options, **(PREFIX_OPTIONS if what == "embedding" else {})}
    several = provider in BUILT_IN and (provider.name, provider.kind) in SEVERAL_URLS
    for key, value in spec.items():
        if key == "provider" or (several and key == URLS):
            continue
        if key not in allowed:
            raise InvalidRequest(
                f"unknown key {key!r} in the {what} spec for provider {name!r};"
                f" known: {', '.join(sorted(allowed))}"
            )
        _check_type(what, key, value, allowed[key])
    options = {k: v for k, v in spec.items() if k in provider.options and v is not None}
    if several and spec.get(URLS) is not None:
        options[URLS] = _several_urls(what, spec[URLS])
        options.setdefault("url", options[URLS][0])  # the one its vectors are named after
    if provider.check is not None:
        provider.check(options)
    missing = [key for key in provider.required if key not in options]
    if missing:
        raise InvalidRequest(f"the {what} spec for provider {name!r} needs {', '.join(missing)}")
    if urls:
        for key, kind in provider.options.items():
            if kind is Url and key in options:
                said = f"the {what} url" if key == "url" else f"the {what} spec's {key}"
                check_url(options[key], what=said)
        for url in options.get(URLS, ()):
            check_url(url, what=f"the {what} url")
    return provider, options


def _several_urls(what: str, value: Any) -> list[str]:
    """A spec's `urls`: a non-empty list of texts (each checked as a url where urls are)."""
    if not isinstance(value, list) or not value or not all(isinstance(u, str) for u in value):
        raise InvalidRequest(f"{what} spec: {URLS} must be a non-empty list of urls, not {value!r}")
    return list(value)


def _check_type(what: str, key: str, value: Any, kind: type) -> None:
    if value is None:
        return
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif kind is bool:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, str if kind is Url else kind) and not isinstance(value, bool)
    if not ok:
        named = {float: "a number", Url: "str"}.get(kind, kind.__name__)
        raise InvalidRequest(f"{what} spec: {key} must be {named}, not {value!r}")
