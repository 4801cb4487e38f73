"""A BERT-family encoder's forward pass in NumPy, float32, read from a Hugging Face layout folder.

    folder/config.json          hidden_size, num_hidden_layers, num_attention_heads, ... (model_type
                                "bert", or "roberta"/"xlm-roberta" whose positions start after
                                padding_idx + 1 and whose type ids are all 0)
    folder/model.safetensors    weights, read with `safetensors.numpy`; names with no prefix
                                (a `BertModel`) or "bert."/"roberta." (a model with a head)
    folder/tokenizer.json       read with `tokenizers`

The network is the one `transformers` runs at inference: embeddings (word + position + token
type) and LayerNorm, then per layer masked multi-head self-attention, a residual and LayerNorm,
a GELU feed-forward, a residual and LayerNorm. GELU is the exact erf form (HF "gelu"), with erf
from Abramowitz & Stegun 7.1.26 (absolute error under 1.5e-7), since NumPy has no erf.

Speed on two cores is about keeping temporaries small (a fresh 50 MB array costs ~100 ms in page
faults) and element-wise work cheap: the query, key and value projections are one matmul, the
1/sqrt(head size) scale is folded into the query weights, attention runs a few sequences at a
time, the feed-forward runs in blocks of rows, and every element-wise step writes in place.
Batching by length and the use of both cores are `batching.py`'s business.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metis_lite.errors import ModelError

MODEL_TYPES = {"bert": 0, "roberta": None, "xlm-roberta": None, "camembert": None}
"""Architectures this forward pass runs, with their position offset (None: padding_idx + 1)."""

GELU_ACTIVATIONS = ("gelu",)

ATTENTION_FLOATS = 1 << 20
"""Attention scores held at once (4 MB): sequences per step = this // (heads × length²)."""

FFN_ROWS = 256
"""Tokens per feed-forward block: its (rows × intermediate) activations stay in cache."""

_DTYPE = np.float32

# Abramowitz & Stegun 7.1.26: erf(z) ≈ 1 - t·P(t)·exp(-z²), t = 1/(1 + p·z), z ≥ 0.
_AS_P = 0.3275911
_AS_COEFFS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


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


class BertEncoder:
    """The encoder's weights, laid out for the forward pass (matrices as (in, out), C order)."""

    def __init__(self, config: BertConfig, weights: Mapping[str, np.ndarray]) -> None:
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
        vocab = weights[prefix + "embeddings.word_embeddings.weight"].shape[0]
        positions = config.max_positions + config.position_offset
        types = weights.get(prefix + "embeddings.token_type_embeddings.weight")
        self.word = get("embeddings.word_embeddings.weight", (vocab, h))
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
                    ffn_out_w=np.ascontiguousarray(get(at + "output.dense.weight", (h, i)).T),
                    ffn_out_b=get(at + "output.dense.bias", (h,)),
                    ln2_g=get(at + "output.LayerNorm.weight", (h,)),
                    ln2_b=get(at + "output.LayerNorm.bias", (h,)),
                )
            )

    def forward(self, ids: np.ndarray, type_ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Last hidden states (batch, length, hidden) for right-padded `ids` (batch, length);
        `mask` is 1 on real tokens, 0 on padding (whose rows come out as garbage)."""
        cfg = self.config
        batch, length = ids.shape
        if length > cfg.max_positions:
            raise ModelError(f"{length} tokens exceed the model's {cfg.max_positions} positions")
        x = self.word[ids]
        x += self.position[cfg.position_offset : cfg.position_offset + length]
        if type_ids.any():
            x += self.token_type[type_ids]
        else:
            x += self.token_type[0]
        x = x.reshape(batch * length, cfg.hidden_size)
        layer_norm_(x, self.emb_ln_g, self.emb_ln_b, cfg.layer_norm_eps)
        bias = None
        if not mask.all():
            bias = np.where(mask[:, None, None, :] > 0, 0.0, -np.inf).astype(_DTYPE)
        for layer in self.layers:
            x = self._layer(x, layer, batch, length, bias)
        return x.reshape(batch, length, cfg.hidden_size)

    def _layer(
        self, x: np.ndarray, layer: _Layer, batch: int, length: int, bias: np.ndarray | None
    ) -> np.ndarray:
        cfg = self.config
        heads, size = cfg.num_heads, cfg.head_size
        qkv = x @ layer.qkv_w
        qkv += layer.qkv_b
        split = qkv.reshape(batch, length, 3, heads, size)
        q = split[:, :, 0].transpose(0, 2, 1, 3)
        k = split[:, :, 1].transpose(0, 2, 3, 1)
        v = split[:, :, 2].transpose(0, 2, 1, 3)
        context = np.empty((batch, length, heads, size), _DTYPE)
        step = max(1, ATTENTION_FLOATS // (heads * length * length))
        for start in range(0, batch, step):
            end = min(batch, start + step)
            scores = np.matmul(q[start:end], k[start:end])
            if bias is not None:
                scores += bias[start:end]
            softmax_(scores)
            np.matmul(scores, v[start:end], out=context[start:end].transpose(0, 2, 1, 3))
        attended = context.reshape(batch * length, cfg.hidden_size) @ layer.out_w
        attended += layer.out_b
        attended += x
        layer_norm_(attended, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
        out = np.empty_like(attended)
        for start in range(0, attended.shape[0], FFN_ROWS):
            rows = slice(start, start + FFN_ROWS)
            inner = attended[rows] @ layer.ffn_in_w
            inner += layer.ffn_in_b
            gelu_(inner)
            np.matmul(inner, layer.ffn_out_w, out=out[rows])
        out += layer.ffn_out_b
        out += attended
        layer_norm_(out, layer.ln2_g, layer.ln2_b, cfg.layer_norm_eps)
        return out


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


def softmax_(scores: np.ndarray) -> None:
    """Softmax over the last axis, in place (masked entries are -inf and become 0)."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)
    np.reciprocal(total, out=total)
    scores *= total


def gelu_(x: np.ndarray) -> None:
    """x · Φ(x), in place: relu(x) - |x|·(1 - erf(|x|/√2))/2 with erf from A&S 7.1.26."""
    a = np.abs(x)
    t = a * np.float32(_AS_P / np.sqrt(2.0))
    t += 1.0
    np.reciprocal(t, out=t)
    c1, c2, c3, c4, c5 = (np.float32(c / 2) for c in _AS_COEFFS)
    poly = t * c5
    for c in (c4, c3, c2, c1):
        poly += c
        poly *= t
    np.multiply(a, a, out=t)
    t *= np.float32(-0.5)
    np.exp(t, out=t)
    poly *= t
    poly *= a
    np.maximum(x, np.float32(0.0), out=x)
    x -= poly
