"""The in-process reranker: a BERT-family cross-encoder on disk, run in NumPy.

A sequence-classification model in Hugging Face layout (ms-marco-MiniLM-L-6-v2,
bge-reranker-base and the like): the encoder of `bert.py` reads the question and the passage
as one pair ([CLS] question [SEP] passage [SEP], token types 0 then 1; RoBERTa's
<s> question </s></s> passage </s> as its tokenizer.json builds it), truncated longest-first
to 512 tokens, and a head turns the first token's hidden state into logits:

    BERT       tanh(bert.pooler.dense(h)) → classifier              (BertForSequenceClassification)
    RoBERTa    tanh(classifier.dense(h)) → classifier.out_proj      (XLMRobertaForSequenceClassification)

The score is the logit of a one-label model (as sentence-transformers' CrossEncoder gives it),
the last label's logit ("relevant") of a model with more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from metis_lite.errors import ModelError
from metis_lite.models import bert
from metis_lite.models.batching import BatchRunner

MAX_LENGTH = 512
"""Tokens of question and passage read together, at most (the position table may allow fewer)."""

_HEADS = {
    "bert": ("{p}pooler.dense", "classifier"),
    "roberta": ("classifier.dense", "classifier.out_proj"),
}
"""Per family: (the dense + tanh layer, the projection to labels); {p} is the encoder's prefix."""


class CrossEncoderReranker:
    """A `Reranker` that scores (question, passage) pairs with a cross-encoder in this process.

    Loaded once, when made; `score` may be called from several threads (one runs at a time).
    """

    def __init__(
        self, path: str | Path, *, max_length: int = MAX_LENGTH, workers: int | None = None
    ) -> None:
        folder = Path(path).expanduser().resolve()
        if not folder.is_dir():
            raise ModelError(f"reranker model folder {path} does not exist")
        self.name = folder.name
        config = bert.load_config(folder)
        weights = bert.load_weights(folder)
        self._dense, self._out = _head(config, weights)
        self.num_labels = self._out[0].shape[1]
        self.max_length = min(max_length, config.max_positions)
        self._tokenizer = bert.load_tokenizer(folder, max_length=self.max_length)
        options = {} if workers is None else {"workers": workers}
        self._runner = BatchRunner(bert.BertEncoder(config, weights), **options)

    def score(self, question: str, passages: Sequence[str]) -> list[float]:
        """One logit per passage, in the passages' order (higher is more relevant)."""
        if isinstance(passages, str):
            raise TypeError("score takes a sequence of passages, not one string")
        if not passages:
            return []
        encodings = self._tokenizer.encode_batch([(question, passage) for passage in passages])
        logits = self._runner.run([(e.ids, e.type_ids) for e in encodings], self._logits)
        return [float(value) for value in logits[:, -1]]

    def token_counts(self, question: str, passages: Sequence[str]) -> list[int]:
        """How many tokens the model reads of each (question, passage) pair, truncated as
        `score` reads it: what a request costs (the model server bounds it)."""
        pairs = [(question, passage) for passage in passages]
        return [len(encoding.ids) for encoding in self._tokenizer.encode_batch(pairs)]

    def close(self) -> None:
        self._runner.close()

    def __repr__(self) -> str:
        return f"CrossEncoderReranker({self.name!r}, labels={self.num_labels})"

    def _logits(self, hidden: np.ndarray, starts: np.ndarray) -> np.ndarray:
        (dense_w, dense_b), (out_w, out_b) = self._dense, self._out
        pooled = np.tanh(hidden[starts] @ dense_w + dense_b)
        return pooled @ out_w + out_b


Linear = tuple[np.ndarray, np.ndarray]


def _head(config: bert.BertConfig, weights: Mapping[str, np.ndarray]) -> tuple[Linear, Linear]:
    """The classification head's two linear layers, as (in, out) matrices and biases."""
    family = "bert" if config.model_type == "bert" else "roberta"
    prefix = bert.weight_prefix(weights)
    dense_name, out_name = _HEADS[family]
    dense_name = dense_name.format(p=prefix)
    missing = [
        name + ".weight"
        for name in (dense_name, out_name)
        if name + ".weight" not in weights or name + ".bias" not in weights
    ]
    if missing:
        kinds = ", ".join(config.architectures) or config.model_type
        raise ModelError(
            f"not a sequence-classification model ({kinds}): model.safetensors lacks"
            f" {', '.join(missing)}"
        )
    hidden = config.hidden_size
    dense = _linear(weights, dense_name, hidden)
    out = _linear(weights, out_name, hidden)
    if dense[0].shape[1] != hidden:
        raise ModelError(f"{dense_name}.weight must be {hidden} × {hidden}")
    return dense, out


def _linear(weights: Mapping[str, np.ndarray], name: str, inputs: int) -> Linear:
    weight = np.asarray(weights[name + ".weight"], dtype=np.float32)
    bias = np.asarray(weights[name + ".bias"], dtype=np.float32)
    if weight.ndim != 2 or weight.shape[1] != inputs or bias.shape != (weight.shape[0],):
        raise ModelError(f"{name} has shapes {weight.shape} and {bias.shape}, not (n, {inputs})")
    return np.ascontiguousarray(weight.T), bias
