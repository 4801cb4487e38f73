"""Providers as plugins (metis_lite.models.registry): a provider registered by code, or by a
distribution's entry point in the group `metis_lite.providers`, is found by name as a built-in
is; its options are checked as theirs are; its vectors are named by its spec's model, else its
name; a plugin that fails to load is an error naming it, only where its provider is asked for.

The plugins here are path-based distributions: a folder holding a module and its
`<name>.dist-info` (METADATA, entry_points.txt), put on the path of a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from word_models import WordsEmbedder, serving

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, ModelError
from metis_lite.models import registry
from metis_lite.models.base import Provider, Url

PLUGIN = textwrap.dedent(
    '''
    """An embedding provider for metis-lite: a text's words hashed into `dimension` buckets."""

    import hashlib
    import re

    import numpy as np

    from metis_lite.models.base import Provider


    class HashedWords:
        def __init__(self, name, dimension):
            self.name, self.dimension = name, dimension

        def embed(self, texts):
            out = np.zeros((len(texts), self.dimension), dtype=np.float32)
            for row, text in enumerate(texts):
                for word in re.findall(r"\\w+", text.lower()):
                    digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                    out[row, int.from_bytes(digest, "little") % self.dimension] += 1.0
                out[row, 0] += 1e-3  # never the zero vector
            return out / np.linalg.norm(out, axis=1, keepdims=True)

        def close(self):
            pass


    PROVIDER = Provider(
        "hashed-words",
        "embedding",
        lambda options, making: HashedWords(
            options.get("model", "hashed-words"), options.get("dimension", 256)
        ),
        options={"model": str, "dimension": int},
    )
    '''
)
"""A whole plugin: the module an entry point names."""

DOCUMENTS = {
    "holidays.md": "# Holidays\n\nEvery employee gets 25 days of paid holidays a year.\n",
    "expenses.md": "# Expenses\n\nYour manager approves travel expenses and hotel bills.\n",
    "security.md": "# Security\n\nReport a security incident to the security team at once.\n",
}


def install(site: Path, module: str, source: str, *, entry: str = "") -> Path:
    """A distribution of one module in `site`, as pip would leave it: the module, and a
    dist-info whose entry_points.txt names `entry` (default: `hashed-words = module:PROVIDER`)
    in the group metis_lite.providers."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    entry = entry or f"hashed-words = {module}:PROVIDER"
    (info / "entry_points.txt").write_text(f"[metis_lite.providers]\n{entry}\n")
    return site


def metis(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m metis_lite ARGS` in a fresh process whose path holds the plugin's folder."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(site), str(ROOT)))}
    return subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in DOCUMENTS.items():
        (docs / name).write_text(text, encoding="utf-8")
    return docs


def test_an_installed_plugin_indexes_and_searches_by_meaning(tmp_path, folder) -> None:
    site = install(tmp_path / "site", "hashed_words_plugin", PLUGIN)
    base = str(tmp_path / "kb.db")
    flags = ("--embedding", "hashed-words", "--embedding-model", "hashed-words-256")
    indexed = metis(site, "index", base, str(folder), *flags, "--json", cwd=tmp_path)
    assert indexed.returncode == 0, indexed.stderr

    question = "who approves my travel expenses"
    found = metis(site, "search", base, question, "--mode", "dense", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    assert answer["results"][0]["citation"]["document"] == "expenses.md"
    assert answer["warnings"] == []

    status = json.loads(metis(site, "status", base, "--json", cwd=tmp_path).stdout)
    assert status["embedding"] == "hashed-words-256"  # its vectors: named by its spec's model
    assert status["chunks_without_vector"] == 0 and status["chunks"] == 3

    # Without the plugin, the base is refused by name, not misread.
    alone = metis(tmp_path / "nothing", "status", base, "--json", cwd=tmp_path)
    assert alone.returncode == 2, alone.stderr
    assert "unknown model provider 'hashed-words'" in json.loads(alone.stdout)["error"]["message"]


def test_a_broken_plugin_is_said_by_name_and_its_base_keeps_answering(tmp_path, folder) -> None:
    site = install(tmp_path / "site", "hashed_words_plugin", PLUGIN)
    base = str(tmp_path / "kb.db")
    flags = ("--embedding", "hashed-words")
    assert metis(site, "index", base, str(folder), *flags, cwd=tmp_path).returncode == 0
    # An upgrade breaks it: its import raises.
    (site / "hashed_words_plugin.py").write_text("raise ImportError('numpy 3 is not supported')")

    found = metis(site, "search", base, "travel expenses", "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    answer = json.loads(found.stdout)
    assert answer["results"][0]["citation"]["document"] == "expenses.md"  # by words
    said = " ".join(w["message"] for w in answer["warnings"])
    assert "plugin 'hashed-words'" in said and "hashed_words_plugin 0.1" in said
    assert "numpy 3 is not supported" in said

    # An index run meanwhile keeps the vectors the plugin made (their name needs no plugin).
    again = metis(site, "index", base, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    status = json.loads(metis(site, "status", base, "--json", cwd=tmp_path).stdout)
    assert status["embedding"] == "hashed-words" and status["chunks_without_vector"] == 0

    # A new base cannot be given it: refused, naming it, and no base is left.
    refused = metis(site, "index", "new.db", str(folder), *flags, "--json", cwd=tmp_path)
    assert refused.returncode == 3, refused.stderr
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "MODEL_ERROR"
    assert error["message"].startswith("the model provider plugin 'hashed-words' (")
    assert "failed to load: ImportError: numpy 3 is not supported" in error["message"]
    assert "Traceback" not in refused.stderr and not (tmp_path / "new.db").exists()


def test_a_broken_plugin_troubles_no_other_provider(tmp_path, monkeypatch) -> None:
    site = install(
        tmp_path / "site",
        "broken_plugin_x",
        "raise RuntimeError('no licence server')",
        entry="broken-x = broken_plugin_x:PROVIDER",
    )
    monkeypatch.syspath_prepend(str(site))
    assert registry.model_label({"provider": "broken-x", "model": "m1"}) == "m1"  # not loaded
    with pytest.raises(ModelError, match=r"^the model provider plugin 'broken-x' \(broken_plugin"):
        registry.embedder_from_spec({"provider": "broken-x"})
    with pytest.raises(ModelError, match="RuntimeError: no licence server"):
        registry.check_embedder({"provider": "broken-x"})  # said again, at each lookup
    spec = {"provider": "tei", "url": "http://127.0.0.1:9"}
    registry.embedder_from_spec(spec).close()  # another provider: untouched
    assert "broken-x" not in registry.provider_names("embedding")
    with pytest.raises(InvalidRequest, match="plugins that failed to load: broken-x"):
        registry.embedder_from_spec({"provider": "nowhere"})


def test_a_plugin_that_points_at_something_else_is_said(tmp_path, monkeypatch) -> None:
    cases = {
        "odd-a": "PROVIDER = 'hashed words'",
        "odd-b": "from metis_lite.models.base import Provider\n"
        "PROVIDER = Provider('another-name', 'embedding', lambda o, m: None)",
        "odd-c": "from metis_lite.models.base import Provider\n"
        "PROVIDER = Provider('odd-c', 'embedding', lambda o, m: None, label=lambda s: 'x')",
    }
    said = {
        "odd-a": "points at str, not a Provider",
        "odd-b": "its provider is named 'another-name', not 'odd-b'",
        "odd-c": "leaves label to the registry",
    }
    for name, source in cases.items():
        module = f"plugin_{name[-1]}"
        site = install(tmp_path / name, module, source, entry=f"{name} = {module}:PROVIDER")
        monkeypatch.syspath_prepend(str(site))
        with pytest.raises(ModelError, match=said[name]):
            registry.check_embedding_spec({"provider": name})


class Echo:
    """A reranker that scores a passage by its length (a test's stand-in)."""

    name = "echo"

    def score(self, question, passages):
        return [float(len(p)) for p in passages]

    def close(self) -> None:
        pass


ECHO = Provider(
    "echo",
    "reranker",
    lambda options, making: Echo(),
    options={"url": Url, "depth": int, "strict": bool},
    required=("url",),
)


def test_a_registered_providers_options_are_checked_as_a_built_ins(tmp_path) -> None:
    good = {"provider": "echo", "url": "http://127.0.0.1:9", "depth": 3}
    with pytest.raises(InvalidRequest, match="unknown reranker provider 'echo'"):
        registry.check_reranker_spec(good)
    with registry.registered(ECHO):
        registry.check_reranker_spec(good)
        assert isinstance(registry.reranker_from_spec(good), Echo)
        assert registry.model_label(good) == "echo"  # no model named: the provider's name
        assert registry.model_label({**good, "model": "echo-v2"}) == "echo-v2"
        refused = [
            (
                {**good, "deep": 3},
                "unknown key 'deep' .* for provider 'echo'; known: depth, strict",
            ),
            ({**good, "depth": "3"}, "depth must be int"),
            ({**good, "strict": 1}, "strict must be bool"),
            ({"provider": "echo"}, "needs url"),
            ({**good, "url": "localhost:9"}, "must start with http:// or https://"),
            ({**good, "api_key": "k"}, "must not hold an API key"),
        ]
        for spec, message in refused:
            with pytest.raises(InvalidRequest, match=message):
                registry.check_reranker_spec(spec)
        with pytest.raises(InvalidRequest, match="unknown embedding provider 'echo'"):
            registry.check_embedding_spec(good)  # a reranker only
        with Base(tmp_path / "b.db", create=True) as base:
            base.configure(reranker=good)
            assert base.status().reranker == "echo"
            assert isinstance(base.reranker(), Echo)
    with pytest.raises(InvalidRequest, match="unknown reranker provider 'echo'"):
        registry.check_reranker_spec(good)  # gone with its block


def test_register_refuses_a_taken_name_and_a_provider_that_cannot_work() -> None:
    with pytest.raises(InvalidRequest, match="the embedding provider 'tei' is registered already"):
        registry.register(Provider("tei", "embedding", lambda o, m: None))
    with pytest.raises(InvalidRequest, match="kind must be embedding or reranker"):
        Provider("x", "vectors", lambda o, m: None)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="option 'size' must be of type"):
        Provider("x", "embedding", lambda o, m: None, options={"size": list})
    with pytest.raises(InvalidRequest, match="required url not among its options"):
        Provider("x", "embedding", lambda o, m: None, required=("url",))


def test_a_stand_in_replaces_a_provider_for_its_block_only() -> None:
    class Fixed:
        name = "fixed"

        def embed(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32) / 2

        def close(self) -> None:
            pass

    fixed = Fixed()
    spec = {"provider": "tei", "url": "http://127.0.0.1:9"}
    stand_in = Provider("tei", "embedding", lambda o, m: fixed, options={"url": Url})
    with registry.registered(stand_in):
        assert registry.embedder_from_spec(spec) is fixed
    made = registry.embedder_from_spec(spec)
    try:
        assert made is not fixed and type(made).__name__ == "TEIEmbedder"
    finally:
        made.close()
    broken = Provider("bad", "embedding", lambda o, m: object())
    with registry.registered(broken), pytest.raises(ModelError, match="has no embed"):
        registry.embedder_from_spec({"provider": "bad"})


def test_a_provider_that_cannot_make_its_model_leaves_its_base_answering_by_words(tmp_path):
    def make(options, making):
        raise FileNotFoundError("/models/acme.onnx")

    path = tmp_path / "b.db"
    with registry.registered(serving(WordsEmbedder(), name="acme")):
        with Base(path, create=True) as base:
            base.configure(embedding={"provider": "acme"})
            base.remember("Ana leads the billing team")  # embedded: the base has vectors
        with registry.registered(Provider("acme", "embedding", make)), Base(path) as base:
            answer = base.search("billing")
    assert [r.text for r in answer.results] == ["Ana leads the billing team"]
    said = " ".join(f"{w.code}: {w.message}" for w in answer.warnings)
    assert "EMBEDDING_MODEL_UNAVAILABLE" in said
    assert "provider 'acme' could not make its model: FileNotFoundError" in said
