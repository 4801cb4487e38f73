"""A BERT-family encoder's forward pass in NumPy, float32, read from a Hugging Face layout folder.

    folder/config.json          hidden_size, num_hidden_layers, num_attention_heads, ... (model_type
                                "bert", or "roberta"/"xlm-roberta" whose positions start after
                                padding_idx + 1 and whose type ids are all 0)
    folder/model.safetensors    weights, read with `safetensors.numpy`; names with no prefix
                                (a `BertModel`) or "bert."/"roberta." (a model with a head)
    folder/tokenizer.json       read with `tokenizers`

The network is the one `transformers` runs at inference: embeddings (word + position + token
type) and LayerNorm, then per layer multi-head self-attention (each sequence over its own
tokens, which is what the attention mask does to padding), a residual and LayerNorm, a GELU
feed-forward, a residual and LayerNorm. GELU is the exact erf form (HF "gelu"), with erf
from Abramowitz & Stegun 7.1.28 (absolute error under 3e-7), since NumPy has no erf.

Matrix products are ~80 % of the time; the rest is about keeping temporaries small (a fresh
50 MB array costs ~100 ms in page faults) and element-wise work cheap: the query, key and value
projections are one matmul, the 1/sqrt(head size) scale is folded into the query weights,
attention scores are made a few heads at a time so that the softmax runs in cache, the
feed-forward runs in blocks of rows, and every element-wise step writes in place. Batching by
length and the use of both cores are `batching.py`'s business.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from metis_lite.errors import ModelError

MODEL_TYPES = {"bert": 0, "roberta": None, "xlm-roberta": None, "camembert": None}
"""Architectures this forward pass runs, with their position offset (None: padding_idx + 1)."""

GELU_ACTIVATIONS = ("gelu",)

ATTENTION_FLOATS = 1 << 17
"""Attention scores held at once (512 kB, so that the softmax runs in cache): several short
sequences of one length at a time, or a few heads of a long one."""

FFN_ROWS = 128
"""Tokens per feed-forward block: its (rows × intermediate) activations stay in cache."""

EXP_SAFE = 80.0
"""Attention scores below this cannot overflow float32's exp (e^88.7) even summed over 512."""

BLAS_SMALL_PRODUCT = 1_000_000
"""OpenBLAS multiplies a product of rows × columns × depth up to this with its small-matrix
kernel, which sums a long depth (the feed-forward's 1,536) in another order than its blocked
one: a question cut so fine that a part's output product falls below it (a few tokens) is run
whole, so that a part's columns are computed as the whole product computes them."""

SHIFT_FREE_LENGTH = 64
"""Sequences at least this long check whether the softmax may skip its max shift."""

_DTYPE = np.float32

# Abramowitz & Stegun 7.1.28, |error| ≤ 3e-7: erf(z) ≈ 1 - (1 + Σ aₖ zᵏ)⁻¹⁶, z ≥ 0; here
# for z = |x|/√2, so aₖ / √2ᵏ are the coefficients of |x|.
_ERF_COEFFS = tuple(
    np.float32(c / np.sqrt(2.0) ** k)
    for k, c in enumerate(
        (0.0705230784, 0.0422820123, 0.0092705272, 0.0001520143, 0.0002765672, 0.0000430638),
        start=1,
    )
)


@dataclass(frozen=True)
class BertConfig:
    """The shape of the network, from config.json."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    layer_norm_eps: float
    max_positions: int
    """Tokens a sequence may hold, [CLS] and [SEP] included (after RoBERTa's offset)."""
    position_offset: int
    num_labels: int
    architectures: tuple[str, ...]

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str = "config.json") -> BertConfig:
        model_type = str(data.get("model_type", "bert"))
        if model_type not in MODEL_TYPES:
            raise ModelError(
                f"{where}: model_type {model_type!r} is not supported by the embedded models"
                f" (supported: {', '.join(MODEL_TYPES)})"
            )
        activation = data.get("hidden_act", "gelu")
        if activation not in GELU_ACTIVATIONS:
            raise ModelError(f"{where}: hidden_act {activation!r} is not supported (only 'gelu')")
        if data.get("position_embedding_type", "absolute") != "absolute":
            raise ModelError(f"{where}: only absolute position embeddings are supported")
        try:
            hidden, heads = int(data["hidden_size"]), int(data["num_attention_heads"])
            offset = MODEL_TYPES[model_type]
            if offset is None:
                offset = int(data.get("pad_token_id", 1)) + 1
            labels = data.get("id2label")
            config = cls(
                model_type=model_type,
                hidden_size=hidden,
                num_layers=int(data["num_hidden_layers"]),
                num_heads=heads,
                intermediate_size=int(data["intermediate_size"]),
                layer_norm_eps=float(data.get("layer_norm_eps", 1e-12)),
                max_positions=int(data.get("max_position_embeddings", 512)) - offset,
                position_offset=offset,
                num_labels=int(data.get("num_labels", len(labels) if labels else 1)),
                architectures=tuple(data.get("architectures") or ()),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"{where}: not a usable BERT config ({exc!r})") from exc
        if hidden % heads:
            raise ModelError(f"{where}: hidden_size {hidden} is not a multiple of {heads} heads")
        return config


def load_config(folder: Path) -> BertConfig:
    path = folder / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelError(f"{folder} is not a model folder: it has no config.json") from exc
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc
    return BertConfig.from_json(data, where=str(path))


def load_weights(folder: Path) -> dict[str, np.ndarray]:
    """Every tensor of folder/model.safetensors as a float32 (or integer) NumPy array."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = folder / "model.safetensors"
    if not path.is_file():
        raise ModelError(
            f"{folder} has no model.safetensors (weights in pytorch_model.bin are not read:"
            " convert them to safetensors)"
        )
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError, TypeError) as exc:
        raise ModelError(f"cannot read {path}: {exc} (bfloat16 weights are not supported)") from exc
    return {
        name: value.astype(_DTYPE) if value.dtype.kind == "f" else value
        for name, value in tensors.items()
    }


def load_tokenizer(folder: Path, *, max_length: int) -> Any:
    """folder/tokenizer.json, with no padding and truncation at `max_length` tokens."""
    from tokenizers import Tokenizer

    path = folder / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"{folder} has no tokenizer.json")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
        raise ModelError(f"cannot read {path}: {exc}") from exc
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length)
    return tokenizer


def weight_prefix(weights: Mapping[str, np.ndarray]) -> str:
    """ "" for a bare encoder, "bert." or "roberta." (and so on) for one inside a model with a head."""
    suffix = "embeddings.word_embeddings.weight"
    found = sorted((name[: -len(suffix)] for name in weights if name.endswith(suffix)), key=len)
    if not found:
        raise ModelError("model.safetensors holds no BERT encoder (no embeddings.word_embeddings)")
    return found[0]


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    ffn_in_w: np.ndarray
    ffn_in_b: np.ndarray
    ffn_out_w: np.ndarray
    ffn_out_b: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


class Rows(Protocol):
    """An embedding table: `rows(ids)` answers a fresh float32 (len(ids), width) array."""

    shape: tuple[int, ...]

    def rows(self, ids: np.ndarray) -> np.ndarray: ...


class DenseRows:
    """A float32 embedding table held whole."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.shape = table.shape

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return self.table[ids]


class BertEncoder:
    """The encoder's weights, laid out for the forward pass (matrices as (in, out), C order).

    `weights` holds float32 arrays under transformers' BertModel names; the word embeddings may
    be any `Rows` instead (a quantized table that makes only the rows a batch reads)."""

    def __init__(self, config: BertConfig, weights: Mapping[str, Any]) -> None:
        self.config = config
        prefix = weight_prefix(weights)

        def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
            key = prefix + name
            if key not in weights:
                raise ModelError(f"model.safetensors lacks {key}")
            value = np.asarray(weights[key], dtype=_DTYPE)
            if value.shape != shape:
                raise ModelError(f"{key} has shape {value.shape}, config.json implies {shape}")
            return value

        h, i = config.hidden_size, config.intermediate_size
        word = weights[prefix + "embeddings.word_embeddings.weight"]
        positions = config.max_positions + config.position_offset
        types = weights.get(prefix + "embeddings.token_type_embeddings.weight")
        self.word: Rows = (
            word
            if hasattr(word, "rows")
            else DenseRows(get("embeddings.word_embeddings.weight", (word.shape[0], h)))
        )
        if self.word.shape[1] != h:
            raise ModelError(f"word embeddings of width {self.word.shape[1]}, not {h}")
        self.position = get("embeddings.position_embeddings.weight", (positions, h))
        self.token_type = (
            np.zeros((1, h), _DTYPE) if types is None else np.asarray(types, dtype=_DTYPE)
        )
        self.emb_ln_g = get("embeddings.LayerNorm.weight", (h,))
        self.emb_ln_b = get("embeddings.LayerNorm.bias", (h,))
        scale = np.float32(1.0 / np.sqrt(config.head_size))
        self.layers: list[_Layer] = []
        for n in range(config.num_layers):
            at = f"encoder.layer.{n}."
            q_w = get(at + "attention.self.query.weight", (h, h)).T * scale
            q_b = get(at + "attention.self.query.bias", (h,)) * scale
            k_w = get(at + "attention.self.key.weight", (h, h)).T
            v_w = get(at + "attention.self.value.weight", (h, h)).T
            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(np.concatenate([q_w, k_w, v_w], axis=1)),
                    qkv_b=np.concatenate(
                        [
                            q_b,
                            get(at + "attention.self.key.bias", (h,)),
                            get(at + "attention.self.value.bias", (h,)),
                        ]
                    ),
                    out_w=np.ascontiguousarray(get(at + "attention.output.dense.weight", (h, h)).T),
                    out_b=get(at + "attention.output.dense.bias", (h,)),
                    ln1_g=get(at + "attention.output.LayerNorm.weight", (h,)),
                    ln1_b=get(at + "attention.output.LayerNorm.bias", (h,)),
                    ffn_in_w=np.ascontiguousarray(get(at + "intermediate.dense.weight", (i, h)).T),
                    ffn_in_b=get(at + "intermediate.dense.bias", (i,)),
                    ffn_out_w=np.ascontiguousarray(get(at + "output.dense.weight", (h, i)).T * 0.5),
                    ffn_out_b=get(at + "output.dense.bias", (h,)),
                    ln2_g=get(at + "output.LayerNorm.weight", (h,)),
                    ln2_b=get(at + "output.LayerNorm.bias", (h,)),
                )
            )

    def forward(self, ids: np.ndarray, type_ids: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
        """Last hidden states (tokens, hidden) of sequences packed end to end, no padding:
        `ids` and `type_ids` hold each sequence's tokens after the previous one's, `lengths`
        how many each has. Every step but attention works row by row, and attention runs
        each sequence over its own tokens, so no sequence sees another (nor needs a mask)."""
        cfg = self.config
        if max(lengths) > cfg.max_positions:
            raise ModelError(f"{max(lengths)} tokens exceed the model's {cfg.max_positions}")
        positions = np.concatenate([np.arange(n) for n in lengths])
        x = self.word.rows(ids)
        x += self.position[positions + cfg.position_offset]
        if type_ids.any():
            x += self.token_type[type_ids]
        else:
            x += self.token_type[0]
        layer_norm_(x, self.emb_ln_g, self.emb_ln_b, cfg.layer_norm_eps)
        runs = _runs(lengths, cfg.num_heads)
        for layer in self.layers:
            x = self._layer(x, layer, runs, max(lengths))
        return x

    def forward_parted(
        self, ids: np.ndarray, type_ids: np.ndarray, parts: int, pool: Executor
    ) -> np.ndarray:
        """`forward` of one short sequence (a question, under SHIFT_FREE_LENGTH tokens), each
        layer's products cut in `parts` run at once (the caller's thread and `pool`'s): the
        heads (their query, key and value columns and their attention), then the columns of
        each product after it. A question's products have too few rows for BLAS to run near
        its peak, and reading the weights once per question is most of its cost: each part
        reads `1/parts` of them. Only output columns are cut, never a sum, so every value is
        computed as `forward` computes it: the same hidden states, bit for bit."""
        cfg = self.config
        n, hidden, inner_size = len(ids), cfg.hidden_size, cfg.intermediate_size
        if (
            parts < 2
            or cfg.num_heads % parts
            or inner_size % parts
            or n >= SHIFT_FREE_LENGTH
            or n * (hidden // parts) * inner_size <= BLAS_SMALL_PRODUCT
        ):
            return self.forward(ids, type_ids, [n])
        x = self.word.rows(ids)
        x += self.position[np.arange(n) + cfg.position_offset]
        x += self.token_type[type_ids] if type_ids.any() else self.token_type[0]
        layer_norm_(x, self.emb_ln_g, self.emb_ln_b, cfg.layer_norm_eps)
        context, attended = np.empty((n, hidden), _DTYPE), np.empty((n, hidden), _DTYPE)
        inner, out = np.empty((n, inner_size), _DTYPE), np.empty((n, hidden), _DTYPE)
        for layer in self.layers:
            _each(pool, parts, partial(self._heads, x, layer, context, parts=parts))
            _each(pool, parts, partial(_columns, context, layer.out_w, attended, parts=parts))
            attended += layer.out_b
            attended += x
            layer_norm_(attended, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
            _each(pool, parts, partial(self._inner, attended, layer, inner, parts=parts))
            _each(pool, parts, partial(_columns, inner, layer.ffn_out_w, out, parts=parts))
            out += layer.ffn_out_b
            out += attended
            layer_norm_(out, layer.ln2_g, layer.ln2_b, cfg.layer_norm_eps)
            x, out = out, x
        return x

    def _heads(
        self, x: np.ndarray, layer: _Layer, context: np.ndarray, part: int, *, parts: int
    ) -> None:
        """Part `part` of self-attention: its heads' context, into their columns of `context`."""
        cfg = self.config
        hidden, heads = cfg.hidden_size, cfg.num_heads // parts
        n, width = x.shape[0], hidden // parts
        q, k, v = (
            slice(at + part * width, at + (part + 1) * width) for at in (0, hidden, 2 * hidden)
        )
        query, key, value = (x @ layer.qkv_w[:, cols] for cols in (q, k, v))
        query += layer.qkv_b[q]
        key += layer.qkv_b[k]
        value += layer.qkv_b[v]
        scores = np.matmul(
            query.reshape(n, heads, -1).transpose(1, 0, 2),
            key.reshape(n, heads, -1).transpose(1, 2, 0),
        )
        softmax_(scores)
        own = np.matmul(scores, value.reshape(n, heads, -1).transpose(1, 0, 2))
        context[:, q] = own.transpose(1, 0, 2).reshape(n, width)

    def _inner(
        self, attended: np.ndarray, layer: _Layer, inner: np.ndarray, part: int, *, parts: int
    ) -> None:
        """Part `part` of the feed-forward's inner layer (2·GELU), into its columns of `inner`."""
        width = self.config.intermediate_size // parts
        cols = slice(part * width, (part + 1) * width)
        mine = attended @ layer.ffn_in_w[:, cols]
        mine += layer.ffn_in_b[cols]
        gelu2_(mine)
        inner[:, cols] = mine

    def _layer(self, x: np.ndarray, layer: _Layer, runs: list[_Run], longest: int) -> np.ndarray:
        cfg = self.config
        attended = self._attention(x @ layer.qkv_w, layer, runs, longest)
        attended += x
        layer_norm_(attended, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
        out = np.empty_like(attended)
        for start in range(0, attended.shape[0], FFN_ROWS):
            rows = slice(start, start + FFN_ROWS)
            inner = attended[rows] @ layer.ffn_in_w
            inner += layer.ffn_in_b
            gelu2_(inner)  # 2·GELU: ffn_out_w holds half the weights
            np.matmul(inner, layer.ffn_out_w, out=out[rows])
        out += layer.ffn_out_b
        out += attended
        layer_norm_(out, layer.ln2_g, layer.ln2_b, cfg.layer_norm_eps)
        return out

    def _attention(
        self, qkv: np.ndarray, layer: _Layer, runs: list[_Run], longest: int
    ) -> np.ndarray:
        """Multi-head self-attention and its output projection, (tokens, hidden): each run of
        equal-length sequences at once, a long sequence a few heads at a time."""
        cfg = self.config
        heads, size = cfg.num_heads, cfg.head_size
        qkv += layer.qkv_b
        shift = longest < SHIFT_FREE_LENGTH or not _exp_cannot_overflow(qkv, heads, size)
        context = np.empty((qkv.shape[0], heads, size), _DTYPE)
        for start, count, n in runs:
            rows = slice(start, start + count * n)
            block = qkv[rows].reshape(count, n, 3, heads, size)
            q = block[:, :, 0].transpose(0, 2, 1, 3)
            k = block[:, :, 1].transpose(0, 2, 3, 1)
            v = block[:, :, 2].transpose(0, 2, 1, 3)
            out = context[rows].reshape(count, n, heads, size).transpose(0, 2, 1, 3)
            group = heads if count > 1 else max(1, ATTENTION_FLOATS // (n * n))
            for h in range(0, heads, group):
                hs = slice(h, h + group)
                scores = np.matmul(q[:, hs], k[:, hs])
                softmax_(scores, shift=shift)
                np.matmul(scores, v[:, hs], out=out[:, hs])
        attended = context.reshape(qkv.shape[0], cfg.hidden_size) @ layer.out_w
        attended += layer.out_b
        return attended


def _each(pool: Executor, parts: int, work: Callable[[int], None]) -> None:
    """work(0) … work(parts - 1), part 0 in the caller's thread, the rest in `pool`; a part no
    worker has begun once the caller's is done (its core is busy with another process) is
    taken back and done in the caller's thread."""
    others = [pool.submit(work, j) for j in range(1, parts)]
    work(0)
    for j, other in enumerate(others, start=1):
        if other.cancel():
            work(j)
        else:
            other.result()


def _columns(a: np.ndarray, b: np.ndarray, out: np.ndarray, part: int, *, parts: int) -> None:
    """Part `part` of out = a @ b: its share of the columns (each the whole sum, as a @ b)."""
    width = b.shape[1] // parts
    cols = slice(part * width, (part + 1) * width)
    out[:, cols] = a @ b[:, cols]


_Run = tuple[int, int, int]
"""(first row, sequences, length): consecutive packed sequences of one length."""


def _runs(lengths: Sequence[int], heads: int) -> list[_Run]:
    """Group consecutive sequences of equal length whose scores fit ATTENTION_FLOATS together."""
    runs: list[_Run] = []
    start = 0
    for n in lengths:
        if runs and runs[-1][2] == n and (runs[-1][1] + 1) * heads * n * n <= ATTENTION_FLOATS:
            first, count, _ = runs[-1]
            runs[-1] = (first, count + 1, n)
        else:
            runs.append((start, 1, n))
        start += n
    return runs


def _exp_cannot_overflow(qkv: np.ndarray, heads: int, size: int) -> bool:
    """Whether no attention score can pass EXP_SAFE, as |q·k| ≤ max‖q‖ · max‖k‖ in each head:
    then the softmax may skip subtracting each row's maximum (two passes over the scores). Only
    worth its pass over q and k when the scores (length² per head) outnumber them."""
    q_and_k = qkv.reshape(qkv.shape[0], 3, heads, size)[:, :2]
    squares = np.einsum("tknd,tknd->tkn", q_and_k, q_and_k).max(axis=0)
    return bool(np.sqrt(squares[0] * squares[1]).max() < EXP_SAFE)


def layer_norm_(x: np.ndarray, gain: np.ndarray, bias: np.ndarray, eps: float) -> None:
    """LayerNorm over the last axis of a 2-D array, in place."""
    x -= x.mean(axis=1, keepdims=True)
    variance = np.einsum("ij,ij->i", x, x)
    variance /= x.shape[1]
    variance += eps
    np.sqrt(variance, out=variance)
    np.reciprocal(variance, out=variance)
    x *= variance[:, None]
    x *= gain
    x += bias


def softmax_(scores: np.ndarray, *, shift: bool = True) -> None:
    """Softmax over the last axis, in place; `shift=False` when no score can overflow exp."""
    if shift:
        scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)
    np.reciprocal(total, out=total)
    scores *= total


def gelu2_(x: np.ndarray) -> None:
    """2·GELU(x) = 2x·Φ(x), in place, as x + |x|·erf(|x|/√2) with erf from A&S 7.1.28:
    1 - erf(z) = (1 + a₁z + … + a₆z⁶)⁻¹⁶, six multiply-adds and four squarings and no exp
    (NumPy's exp costs ten of them). The factor 2 is taken back by halved weights after it."""
    a = np.abs(x)
    poly = a * _ERF_COEFFS[-1]
    for c in _ERF_COEFFS[-2::-1]:
        poly += c
        poly *= a
    poly += 1.0
    with np.errstate(over="ignore"):  # |x| > ~18: poly¹⁶ is inf, 1 - erf is 0, as it should be
        for _ in range(4):
            poly *= poly
    np.reciprocal(poly, out=poly)
    poly -= 1.0
    poly *= a
    x -= poly
