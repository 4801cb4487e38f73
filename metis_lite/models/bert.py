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
from dataclasses import dataclass, fields
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

SHORT_PRODUCT = 1_000_000
"""Rows × columns × depth of one block of a short sequence's products (forward_short): OpenBLAS
multiplies products up to about this in its small-matrix kernel, straight from the weights, and
larger ones by first packing (copying) both operands, which for a question's few rows costs more
than the product (a question of 16 tokens: ~1.4× the time whole, benchmarks/README.md)."""

SHORT_ROWS_MIN = 8
"""Rows of the weights in a block at least: thinner blocks cost more in calls than they save."""

SHORT_GROUPS = 4
"""Groups a short sequence's product is summed in, in a fixed order: up to four threads take
whole groups, and the sum is the same whichever ran them."""

SHIFT_FREE_LENGTH = 64
"""Sequences at least this long check whether the softmax may skip its max shift."""

_DTYPE = np.float32

Pause = Callable[[], None]
"""Called between a forward pass's steps; it may wait there (batching.py), never alter a value."""


def _go_on() -> None:
    """The pause that does not wait."""


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

    def arrays(self) -> dict[str, np.ndarray]:
        """Its arrays as the forward pass reads them, by name (the word table aside): `laid_out`
        makes the same encoder of them, copying nothing (the embedded model's cache keeps them,
        weights_cache.py, so that a fresh process does not lay them out again)."""
        out = {
            "position": self.position,
            "token_type": self.token_type,
            "emb_ln_g": self.emb_ln_g,
            "emb_ln_b": self.emb_ln_b,
        }
        for n, layer in enumerate(self.layers):
            for field in fields(_Layer):
                out[f"layer{n}.{field.name}"] = getattr(layer, field.name)
        return out

    @classmethod
    def laid_out(
        cls, config: BertConfig, word: Rows, arrays: Mapping[str, np.ndarray]
    ) -> BertEncoder:
        """The encoder whose `arrays()` these are, with `word` as its word table."""
        encoder = cls.__new__(cls)
        encoder.config = config
        encoder.word = word
        encoder.position = arrays["position"]
        encoder.token_type = arrays["token_type"]
        encoder.emb_ln_g = arrays["emb_ln_g"]
        encoder.emb_ln_b = arrays["emb_ln_b"]
        encoder.layers = [
            _Layer(**{f.name: arrays[f"layer{n}.{f.name}"] for f in fields(_Layer)})
            for n in range(config.num_layers)
        ]
        return encoder

    def forward(
        self, ids: np.ndarray, type_ids: np.ndarray, lengths: Sequence[int], pause: Pause = _go_on
    ) -> np.ndarray:
        """Last hidden states (tokens, hidden) of sequences packed end to end, no padding:
        `ids` and `type_ids` hold each sequence's tokens after the previous one's, `lengths`
        how many each has. Every step but attention works row by row, and attention runs
        each sequence over its own tokens, so no sequence sees another (nor needs a mask).
        `pause` is called between steps, a few ms apart: batching.py makes a batch wait there
        while a question runs (it changes no value)."""
        cfg = self.config
        if max(lengths) > cfg.max_positions:
            raise ModelError(f"{max(lengths)} tokens exceed the model's {cfg.max_positions}")
        x = self._embedded(ids, type_ids, np.concatenate([np.arange(n) for n in lengths]))
        runs = _runs(lengths, cfg.num_heads)
        for layer in self.layers:
            x = self._layer(x, layer, runs, pause)
        return x

    def forward_short(
        self,
        ids: np.ndarray,
        type_ids: np.ndarray,
        *,
        parts: int = 1,
        pool: Executor | None = None,
    ) -> np.ndarray:
        """`forward` of one short sequence (a question), its products cut for few rows.

        A question's products have a few rows against a layer's weights: BLAS's blocked
        product first copies (packs) the weights, which then costs more than the arithmetic.
        Here each product is the sum of ShortProduct's row blocks of the weights, each small
        enough for OpenBLAS's small-matrix kernel, which reads them where they lie. The blocks
        fall in SHORT_GROUPS groups summed in a fixed order; `parts` (1, 2 or 4) of them run
        at once, the caller's thread and `pool`'s: every value is summed in the same order
        however many parts ran, so a question gets one vector, bit for bit, alone or in parts.
        The same values as `forward` to float32 rounding (it sums in another order)."""
        cfg = self.config
        n = len(ids)
        if n > cfg.max_positions:
            raise ModelError(f"{n} tokens exceed the model's {cfg.max_positions}")
        hidden = cfg.hidden_size
        x = self._embedded(ids, type_ids, np.arange(n))
        qkv = ShortProduct(n, hidden, 3 * hidden)
        out = ShortProduct(n, hidden, hidden)
        inner = ShortProduct(n, hidden, cfg.intermediate_size)
        back = ShortProduct(n, cfg.intermediate_size, hidden)
        runs = [(0, 1, n)]
        for layer in self.layers:
            context = self._context(qkv.run(x, layer.qkv_w, parts, pool), layer, runs)
            attended = out.run(context, layer.out_w, parts, pool)
            attended += layer.out_b
            attended += x
            layer_norm_(attended, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
            middle = inner.run(attended, layer.ffn_in_w, parts, pool)
            middle += layer.ffn_in_b
            gelu2_(middle)  # 2·GELU: ffn_out_w holds half the weights
            x = back.run(middle, layer.ffn_out_w, parts, pool)
            x += layer.ffn_out_b
            x += attended
            layer_norm_(x, layer.ln2_g, layer.ln2_b, cfg.layer_norm_eps)
        return x

    def _layer(self, x: np.ndarray, layer: _Layer, runs: list[_Run], pause: Pause) -> np.ndarray:
        cfg = self.config
        pause()
        context = self._context(x @ layer.qkv_w, layer, runs, pause)
        pause()
        attended = context @ layer.out_w
        attended += layer.out_b
        attended += x
        layer_norm_(attended, layer.ln1_g, layer.ln1_b, cfg.layer_norm_eps)
        out = np.empty_like(attended)
        for start in range(0, attended.shape[0], FFN_ROWS):
            pause()
            rows = slice(start, start + FFN_ROWS)
            inner = attended[rows] @ layer.ffn_in_w
            inner += layer.ffn_in_b
            gelu2_(inner)  # 2·GELU: ffn_out_w holds half the weights
            np.matmul(inner, layer.ffn_out_w, out=out[rows])
        out += layer.ffn_out_b
        out += attended
        layer_norm_(out, layer.ln2_g, layer.ln2_b, cfg.layer_norm_eps)
        return out

    def _embedded(self, ids: np.ndarray, type_ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The embeddings' sum (word, position, token type) after their LayerNorm."""
        cfg = self.config
        x = self.word.rows(ids)
        x += self.position[positions + cfg.position_offset]
        if type_ids.any():
            x += self.token_type[type_ids]
        else:
            x += self.token_type[0]
        layer_norm_(x, self.emb_ln_g, self.emb_ln_b, cfg.layer_norm_eps)
        return x

    def _context(
        self, qkv: np.ndarray, layer: _Layer, runs: list[_Run], pause: Pause = _go_on
    ) -> np.ndarray:
        """Multi-head self-attention's context, (tokens, hidden), from the query, key and value
        projections `qkv` (their bias added in place): each run of equal-length sequences at
        once, a long sequence a few heads at a time; `pause` before each run (forward's)."""
        cfg = self.config
        longest = max(n for _, _, n in runs)
        heads, size = cfg.num_heads, cfg.head_size
        qkv += layer.qkv_b
        shift = longest < SHIFT_FREE_LENGTH or not _exp_cannot_overflow(qkv, heads, size)
        context = np.empty((qkv.shape[0], heads, size), _DTYPE)
        for start, count, n in runs:
            pause()
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
        return context.reshape(qkv.shape[0], cfg.hidden_size)


class ShortProduct:
    """x @ w for an x of a few rows (a question's tokens), as the sum of row blocks of w.

    w's rows are cut in SHORT_GROUPS groups, each group in blocks of at most `rows` rows
    (x's rows × w's columns × rows ≤ SHORT_PRODUCT): each block's product runs in OpenBLAS's
    small-matrix kernel, on a view of w (no copy). A group is its blocks' sum, in order; the
    product is the groups' sum, in order: the same values whichever thread ran which group."""

    def __init__(self, tokens: int, depth: int, width: int) -> None:
        group = -(-depth // SHORT_GROUPS)
        rows = max(SHORT_ROWS_MIN, min(group, SHORT_PRODUCT // max(1, tokens * width)))
        self.groups = [
            [(a, min(a + rows, g + group, depth)) for a in range(g, min(g + group, depth), rows)]
            for g in range(0, depth, group)
        ]
        self.sums = [np.empty((tokens, width), _DTYPE) for _ in self.groups]
        self.spare = [np.empty((tokens, width), _DTYPE) for _ in self.groups]
        self.result = np.empty((tokens, width), _DTYPE)

    def run(self, x: np.ndarray, w: np.ndarray, parts: int, pool: Executor | None) -> np.ndarray:
        """x @ w into this product's own result array (overwritten by the next run)."""
        count = len(self.groups)
        if parts < 2 or pool is None or count < 2:
            for g in range(count):
                self._group(x, w, g)
        else:
            parts = min(parts, count)
            shares = [range(p * count // parts, (p + 1) * count // parts) for p in range(parts)]
            _each(pool, shares, lambda share: self._groups(x, w, share))
        out = self.result
        if count == 1:
            np.copyto(out, self.sums[0])
            return out
        np.add(self.sums[0], self.sums[1], out=out)
        for g in range(2, count):
            out += self.sums[g]
        return out

    def _groups(self, x: np.ndarray, w: np.ndarray, share: range) -> None:
        for g in share:
            self._group(x, w, g)

    def _group(self, x: np.ndarray, w: np.ndarray, g: int) -> None:
        blocks, total, spare = self.groups[g], self.sums[g], self.spare[g]
        a, b = blocks[0]
        np.matmul(x[:, a:b], w[a:b], out=total)
        for a, b in blocks[1:]:
            np.matmul(x[:, a:b], w[a:b], out=spare)
            total += spare


def _each(pool: Executor, shares: Sequence[range], work: Callable[[range], None]) -> None:
    """work(share) for each share, the first in the caller's thread, the rest in `pool`; one no
    worker has begun once the caller's is done (its core is busy with another process) is
    taken back and done in the caller's thread."""
    others = [pool.submit(work, share) for share in shares[1:]]
    work(shares[0])
    for f, other in zip(shares[1:], others, strict=True):
        if other.cancel():
            work(f)
        else:
            other.result()


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
