"""The in-process cross-encoder against a plain float64 NumPy computation of the same network.

No real cross-encoder can be downloaded here, so each test writes a small random-weights
sequence-classification model in Hugging Face layout (config.json, model.safetensors and a
WordPiece tokenizer.json built from a tiny vocabulary) and computes its logits again below,
written out step by step without `metis_lite.models.bert`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

from metis_lite.errors import ModelError
from metis_lite.models.crossencoder import CrossEncoderReranker

HIDDEN, LAYERS, HEADS, INNER, POSITIONS = 32, 2, 4, 64, 40

WORDS = (
    "how many holidays do i get every employee gets days of paid vacation per year the gpu fell"
    " off bus with xid on node configuração relatório warranty supplier answered within hours"
).split()

QUESTION = "How many holidays do I get?"
PASSAGES = [
    "Every employee gets 25 days of paid vacation per year.",
    "The GPU fell off the bus with Xid 79 on node 17.",
    "Configuração do relatório",
    "warranty " * 60 + "the supplier answered within 48 hours",
    "",
]


def write_tokenizer(path: Path, *, roberta: bool) -> None:
    specials = (
        ["<pad>", "<s>", "</s>", "<unk>"] if roberta else ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    )
    pieces = sorted({*WORDS, *"0123456789abcdefghijklmnopqrstuvwxyzçã?.", "##s", "##5"})
    vocab = {token: n for n, token in enumerate(specials + pieces)}
    unk = "<unk>" if roberta else "[UNK]"
    tokenizer = Tokenizer(models.WordPiece(vocab, unk_token=unk))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if roberta:
        single, pair = "<s> $A </s>", "<s> $A </s> </s> $B </s>"
        special = [("<s>", vocab["<s>"]), ("</s>", vocab["</s>"])]
    else:
        single, pair = "[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1"
        special = [("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=special
    )
    tokenizer.save(str(path))


def write_model(folder: Path, *, labels: int = 1, roberta: bool = False, seed: int = 0) -> Path:
    """A random sequence-classification model in HF layout; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    write_tokenizer(folder / "tokenizer.json", roberta=roberta)
    vocab = len(json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"])
    rng = np.random.default_rng(seed)
    offset = 2 if roberta else 0  # RoBERTa: padding_idx 1, positions start at 2

    def normal(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def gain() -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(HIDDEN)).astype(np.float32)

    enc = "roberta." if roberta else "bert."
    tensors = {
        enc + "embeddings.word_embeddings.weight": normal(vocab, HIDDEN),
        enc + "embeddings.position_embeddings.weight": normal(POSITIONS + offset, HIDDEN),
        enc + "embeddings.token_type_embeddings.weight": normal(1 if roberta else 2, HIDDEN),
        enc + "embeddings.LayerNorm.weight": gain(),
        enc + "embeddings.LayerNorm.bias": normal(HIDDEN, scale=0.1),
    }
    if not roberta:
        tensors[enc + "embeddings.position_ids"] = np.arange(POSITIONS, dtype=np.int64)[None]
    for n in range(LAYERS):
        at = f"{enc}encoder.layer.{n}."
        for name, (rows, cols) in {
            "attention.self.query": (HIDDEN, HIDDEN),
            "attention.self.key": (HIDDEN, HIDDEN),
            "attention.self.value": (HIDDEN, HIDDEN),
            "attention.output.dense": (HIDDEN, HIDDEN),
            "intermediate.dense": (INNER, HIDDEN),
            "output.dense": (HIDDEN, INNER),
        }.items():
            tensors[at + name + ".weight"] = normal(rows, cols, scale=1 / math.sqrt(cols))
            tensors[at + name + ".bias"] = normal(rows, scale=0.1)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[at + norm + ".weight"] = gain()
            tensors[at + norm + ".bias"] = normal(HIDDEN, scale=0.1)
    dense, out = (
        ("classifier.dense", "classifier.out_proj")
        if roberta
        else (
            "bert.pooler.dense",
            "classifier",
        )
    )
    tensors[dense + ".weight"] = normal(HIDDEN, HIDDEN, scale=1 / math.sqrt(HIDDEN))
    tensors[dense + ".bias"] = normal(HIDDEN, scale=0.1)
    tensors[out + ".weight"] = normal(labels, HIDDEN)
    tensors[out + ".bias"] = normal(labels, scale=0.1)
    save_file(tensors, str(folder / "model.safetensors"))
    config = {
        "architectures": [
            "XLMRobertaForSequenceClassification" if roberta else "BertForSequenceClassification"
        ],
        "model_type": "xlm-roberta" if roberta else "bert",
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "intermediate_size": INNER,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-5 if roberta else 1e-12,
        "max_position_embeddings": POSITIONS + offset,
        "type_vocab_size": 1 if roberta else 2,
        "vocab_size": vocab,
        "pad_token_id": 1 if roberta else 0,
        "id2label": {str(n): f"LABEL_{n}" for n in range(labels)},
    }
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


# The reference: the network written out plainly, in float64, one sequence at a time.


def layer_norm(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gain + bias


def gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def reference_logits(folder: Path, question: str, passage: str) -> np.ndarray:
    config = json.loads((folder / "config.json").read_text())
    roberta = config["model_type"] != "bert"
    from safetensors.numpy import load_file

    w = {k: v.astype(np.float64) for k, v in load_file(str(folder / "model.safetensors")).items()}
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_truncation(POSITIONS)
    encoding = tokenizer.encode(question, passage)
    ids, types = np.array(encoding.ids), np.array(encoding.type_ids)
    enc, eps = ("roberta." if roberta else "bert."), config["layer_norm_eps"]
    positions = np.arange(len(ids)) + (config["pad_token_id"] + 1 if roberta else 0)
    x = (
        w[enc + "embeddings.word_embeddings.weight"][ids]
        + w[enc + "embeddings.position_embeddings.weight"][positions]
        + w[enc + "embeddings.token_type_embeddings.weight"][types]
    )
    x = layer_norm(
        x, w[enc + "embeddings.LayerNorm.weight"], w[enc + "embeddings.LayerNorm.bias"], eps
    )
    size = HIDDEN // HEADS

    def linear(name: str, inputs: np.ndarray) -> np.ndarray:
        return inputs @ w[name + ".weight"].T + w[name + ".bias"]

    for n in range(LAYERS):
        at = f"{enc}encoder.layer.{n}."
        q = linear(at + "attention.self.query", x)
        k = linear(at + "attention.self.key", x)
        v = linear(at + "attention.self.value", x)
        heads = []
        for h in range(HEADS):
            cols = slice(h * size, (h + 1) * size)
            scores = q[:, cols] @ k[:, cols].T / math.sqrt(size)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            heads.append((scores / scores.sum(axis=1, keepdims=True)) @ v[:, cols])
        attended = linear(at + "attention.output.dense", np.concatenate(heads, axis=1))
        x = layer_norm(
            x + attended,
            w[at + "attention.output.LayerNorm.weight"],
            w[at + "attention.output.LayerNorm.bias"],
            eps,
        )
        inner = gelu(linear(at + "intermediate.dense", x))
        x = layer_norm(
            x + linear(at + "output.dense", inner),
            w[at + "output.LayerNorm.weight"],
            w[at + "output.LayerNorm.bias"],
            eps,
        )
    if roberta:
        pooled = np.tanh(linear("classifier.dense", x[0]))
        return linear("classifier.out_proj", pooled)
    pooled = np.tanh(linear("bert.pooler.dense", x[0]))
    return linear("classifier", pooled)


@pytest.fixture(scope="module")
def bert_model(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("ce") / "tiny-ms-marco")


def test_scores_match_the_float64_reference(bert_model):
    reranker = CrossEncoderReranker(bert_model)
    try:
        scores = reranker.score(QUESTION, PASSAGES)
    finally:
        reranker.close()
    expected = [float(reference_logits(bert_model, QUESTION, p)[-1]) for p in PASSAGES]
    np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=1e-4)
    assert len(set(np.round(expected, 3))) == len(PASSAGES), "the network must tell them apart"


def test_long_pairs_are_truncated_to_the_position_table(bert_model):
    reranker = CrossEncoderReranker(bert_model, workers=1)
    try:
        assert reranker.max_length == POSITIONS
        long_question = "how many holidays " * 30
        [score] = reranker.score(long_question, [PASSAGES[3]])
        plain = Tokenizer.from_file(str(bert_model / "tokenizer.json"))
        untruncated = plain.encode(long_question, PASSAGES[3])
    finally:
        reranker.close()
    assert len(untruncated.ids) > 2 * POSITIONS
    expected = reference_logits(bert_model, long_question, PASSAGES[3])[-1]
    assert score == pytest.approx(float(expected), abs=1e-4)


def test_order_follows_the_passages_and_batches_do_not_change_scores(bert_model):
    reranker = CrossEncoderReranker(bert_model)
    try:
        many = [PASSAGES[n % len(PASSAGES)] + " paid" * (n % 7) for n in range(40)]
        together = reranker.score(QUESTION, many)
        assert reranker.score(QUESTION, many[::-1]) == pytest.approx(together[::-1], abs=1e-5)
        alone = [reranker.score(QUESTION, [p])[0] for p in many[:8]]
        assert alone == pytest.approx(together[:8], abs=1e-5)
        assert reranker.score(QUESTION, []) == []
        assert reranker.name == "tiny-ms-marco"
    finally:
        reranker.close()


def test_a_two_label_model_scores_with_its_last_label(tmp_path):
    folder = write_model(tmp_path / "two-labels", labels=2, seed=1)
    reranker = CrossEncoderReranker(folder, workers=1)
    try:
        scores = reranker.score(QUESTION, PASSAGES[:3])
    finally:
        reranker.close()
    expected = [float(reference_logits(folder, QUESTION, p)[1]) for p in PASSAGES[:3]]
    np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=1e-4)


def test_an_xlm_roberta_model_matches_its_reference(tmp_path):
    folder = write_model(tmp_path / "tiny-bge-reranker", roberta=True, seed=2)
    reranker = CrossEncoderReranker(folder)
    try:
        scores = reranker.score(QUESTION, PASSAGES)
    finally:
        reranker.close()
    expected = [float(reference_logits(folder, QUESTION, p)[-1]) for p in PASSAGES]
    np.testing.assert_allclose(scores, expected, atol=1e-4, rtol=1e-4)


def test_a_model_without_a_classification_head_is_refused(tmp_path):
    from safetensors.numpy import load_file

    folder = write_model(tmp_path / "encoder-only", seed=3)
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["classifier.weight"], tensors["classifier.bias"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match="not a sequence-classification model"):
        CrossEncoderReranker(folder)


def test_unsupported_architectures_and_missing_folders_are_model_errors(tmp_path):
    folder = write_model(tmp_path / "deberta", seed=4)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "deberta-v2"}))
    with pytest.raises(ModelError, match="not supported"):
        CrossEncoderReranker(folder)
    with pytest.raises(ModelError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "nowhere")
