"""How fast the embedded models run: the NumPy all-MiniLM-L6-v2 (or a folder) beside the torch
reference, and the in-process cross-encoder (multilingual-e5-small, the default: bench_e5.py).

    python benchmarks/bench_embedder.py [--passages 256] [--rounds 3] [--reranker PATH]
                                        [--model PATH] [--workers N] [--no-reference]

(after pip install . or with PYTHONPATH=.; the reference needs pip install torch transformers)

Prints, for the NumPy model and for torch + transformers running the same weights (when they
are importable; else "reference not installed"): chunks/s embedding ~250-token passages, and
the p50 latency of embedding one short question; then their ratios. The two run in alternating
rounds in the same process and each side keeps its best round, so that other work on a shared
machine burdens both alike. Then a question's p50/p95 alone and while another thread of the
process embeds passage batches (as `serve` searches during an index run), and their ratio. Then the p50 latency of reranking 30 candidates with the NumPy
cross-encoder: a real one with --reranker, else a random-weights MiniLM-sized model written
to a temporary folder (the same arithmetic, meaningless scores). Figures vary with the machine.

The functions are importable (`passages`, `bench_numpy`, `bench_torch`, `bench_rerank`,
`question_beside_batches`, `random_cross_encoder`) so that one benchmark script can call them all.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from metis_lite.models.crossencoder import CrossEncoderReranker
from metis_lite.models.embedded import EmbeddedEmbedder, shipped_model_folder
from metis_lite.settings import MINILM_MODEL

WORDS = (
    "the leave policy gives every employee twenty five days of paid vacation per year configuração"
    " do proxy relatório server node drained Xid 79 PO-2231 warranty supplier answered portal"
    " cluster memory errors were reported after the firmware update and the team restarted it"
).split()

PASSAGE_WORDS = 190
"""Words per generated passage: ~250 tokens with the MiniLM tokenizer."""

QUESTIONS = 50
RERANK_CANDIDATES = 30
BATCH = 32
"""Passages per call, as indexing sends them (settings.EMBED_BATCH) and sentence-transformers batches."""


@dataclass(frozen=True)
class Figures:
    chunks_per_s: float
    query_p50_ms: float
    tokens_per_passage: float


def passages(count: int = 256, *, seed: int = 3) -> list[str]:
    """`count` passages of ~250 tokens of handbook-like text."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(PASSAGE_WORDS)) for _ in range(count)]


def questions(count: int = QUESTIONS, *, seed: int = 5) -> list[str]:
    rng = random.Random(seed)
    return [
        "how many " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) + "?"
        for _ in range(count)
    ]


def bench_numpy(embedder: EmbeddedEmbedder, texts: Sequence[str], asks: Sequence[str]) -> Figures:
    """One round: chunks/s over `texts` in batches of BATCH, p50 ms of one question."""
    embedder.embed(texts[:BATCH])
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        embedder.embed(texts[start : start + BATCH])
    seconds = time.perf_counter() - started
    latencies = []
    for ask in asks:
        started = time.perf_counter()
        embedder.embed([ask])
        latencies.append(time.perf_counter() - started)
    tokens = np.mean([len(e.ids) for e in embedder._tokenizer.encode_batch(list(texts[:64]))])
    return Figures(len(texts) / seconds, 1e3 * statistics.median(latencies), float(tokens))


class TorchReference:
    """The same weights in transformers' BertModel on torch's CPU threads, pooled and batched
    as sentence-transformers does (sorted by length, batches of BATCH, padded per batch)."""

    def __init__(self, folder: Path, max_length: int = 256) -> None:
        import torch
        from tokenizers import Tokenizer
        from transformers import BertModel

        self.torch = torch
        self.model = BertModel.from_pretrained(str(folder)).eval()
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.enable_padding()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self.torch
        order = sorted(range(len(texts)), key=lambda n: len(texts[n]))
        out = np.empty((len(texts), self.model.config.hidden_size), np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), BATCH):
                picked = order[start : start + BATCH]
                encodings = self.tokenizer.encode_batch([texts[n] for n in picked])
                ids = torch.tensor([e.ids for e in encodings])
                mask = torch.tensor([e.attention_mask for e in encodings])
                hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
                out[picked] = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out


@dataclass(frozen=True)
class Beside:
    """A question's latency alone and while another thread of the process embeds passages."""

    idle_p50_ms: float
    idle_p95_ms: float
    busy_p50_ms: float
    busy_p95_ms: float
    batches: int
    """Passage batches the other thread embedded meanwhile."""

    @property
    def ratio_p95(self) -> float:
        return self.busy_p95_ms / self.idle_p95_ms


def question_beside_batches(
    embedder: EmbeddedEmbedder, texts: Sequence[str], asks: Sequence[str]
) -> Beside:
    """p50/p95 ms of one question alone, then while another thread embeds `texts` in batches
    of BATCH without pause (as `serve` does when a search comes during an index run): a
    question should not wait for a batch (aim: p95 beside batches ≤ 2 × p95 alone)."""

    def timed() -> list[float]:
        latencies = []
        for ask in asks:
            started = time.perf_counter()
            embedder.embed([ask])
            latencies.append(1e3 * (time.perf_counter() - started))
        return latencies

    embedder.embed(list(asks[:2]) + list(texts[:2]))
    idle = timed()
    stop, begun = threading.Event(), threading.Event()
    batches = 0

    def indexing() -> None:
        nonlocal batches
        while not stop.is_set():
            start = batches * BATCH % max(1, len(texts) - BATCH + 1)
            begun.set()
            embedder.embed(texts[start : start + BATCH])
            batches += 1

    thread = threading.Thread(target=indexing)
    thread.start()
    try:
        begun.wait()
        busy = timed()
    finally:
        stop.set()
        thread.join()
    return Beside(
        float(np.percentile(idle, 50)),
        float(np.percentile(idle, 95)),
        float(np.percentile(busy, 50)),
        float(np.percentile(busy, 95)),
        batches,
    )


def torch_reference(folder: Path) -> TorchReference | None:
    try:
        return TorchReference(folder)
    except ImportError:
        return None


def bench_torch(reference: TorchReference, texts: Sequence[str], asks: Sequence[str]) -> Figures:
    reference.embed(texts[:BATCH])
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        reference.embed(texts[start : start + BATCH])
    seconds = time.perf_counter() - started
    latencies = []
    for ask in asks:
        started = time.perf_counter()
        reference.embed([ask])
        latencies.append(time.perf_counter() - started)
    return Figures(len(texts) / seconds, 1e3 * statistics.median(latencies), float("nan"))


def random_cross_encoder(folder: Path, *, seed: int = 0) -> Path:
    """A MiniLM-sized (6 × 384) BERT sequence-classification model with random weights and
    the shipped MiniLM tokenizer, written in Hugging Face layout into `folder`."""
    from safetensors.numpy import save_file

    hidden, layers, inner, vocab = 384, 6, 1536, 30522
    config = {
        "architectures": ["BertForSequenceClassification"],
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 12,
        "intermediate_size": inner,
        "hidden_act": "gelu",
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512,
        "type_vocab_size": 2,
        "vocab_size": vocab,
        "num_labels": 1,
    }
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (0.02 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {
        "bert.embeddings.word_embeddings.weight": normal(vocab, hidden),
        "bert.embeddings.position_embeddings.weight": normal(512, hidden),
        "bert.embeddings.token_type_embeddings.weight": normal(2, hidden),
        "bert.embeddings.LayerNorm.weight": np.ones(hidden, np.float32),
        "bert.embeddings.LayerNorm.bias": np.zeros(hidden, np.float32),
        "bert.pooler.dense.weight": normal(hidden, hidden),
        "bert.pooler.dense.bias": normal(hidden),
        "classifier.weight": normal(1, hidden),
        "classifier.bias": normal(1),
    }
    shapes = {
        "attention.self.query": (hidden, hidden),
        "attention.self.key": (hidden, hidden),
        "attention.self.value": (hidden, hidden),
        "attention.output.dense": (hidden, hidden),
        "intermediate.dense": (inner, hidden),
        "output.dense": (hidden, inner),
    }
    for n in range(layers):
        at = f"bert.encoder.layer.{n}."
        for name, shape in shapes.items():
            tensors[at + name + ".weight"] = normal(*shape)
            tensors[at + name + ".bias"] = normal(shape[0])
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[at + norm + ".weight"] = np.ones(hidden, np.float32)
            tensors[at + norm + ".bias"] = np.zeros(hidden, np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    save_file(tensors, str(folder / "model.safetensors"))
    shutil.copy(shipped_model_folder() / "tokenizer.json", folder / "tokenizer.json")
    return folder


def bench_rerank(reranker: CrossEncoderReranker, *, rounds: int = 7) -> float:
    """p50 ms of scoring RERANK_CANDIDATES ~250-token passages against one question."""
    candidates = passages(RERANK_CANDIDATES, seed=11)
    ask = questions(1)[0]
    reranker.score(ask, candidates)
    latencies = []
    for _ in range(rounds):
        started = time.perf_counter()
        reranker.score(ask, candidates)
        latencies.append(time.perf_counter() - started)
    return 1e3 * statistics.median(latencies)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--model", help="a local sentence-transformers folder (default: the shipped MiniLM)"
    )
    parser.add_argument("--reranker", help="a cross-encoder folder (default: random weights)")
    parser.add_argument("--workers", type=int, help="threads for the NumPy models (default: 2)")
    parser.add_argument("--no-reference", action="store_true", help="skip the torch reference")
    args = parser.parse_args(argv)
    texts, asks = passages(args.passages), questions()
    folder = Path(args.model) if args.model else shipped_model_folder()
    model = None if args.model else MINILM_MODEL  # e5, the default, has bench_e5.py
    embedder = EmbeddedEmbedder(args.model, model=model, workers=args.workers)
    reference = None if args.no_reference else torch_reference(folder)
    ours: list[Figures] = []
    theirs: list[Figures] = []
    for n in range(args.rounds):
        ours.append(bench_numpy(embedder, texts, asks))
        line = f"round {n + 1}: numpy {ours[-1].chunks_per_s:5.1f} chunks/s"
        if reference is not None:
            theirs.append(bench_torch(reference, texts, asks))
            line += f", torch {theirs[-1].chunks_per_s:5.1f} chunks/s"
        print(line, flush=True)
    best = max(ours, key=lambda f: f.chunks_per_s)
    query = min(f.query_p50_ms for f in ours)
    print(
        f"\n{embedder.name}, {len(texts)} passages of ~{best.tokens_per_passage:.0f} tokens,"
        f" batches of {BATCH}, best of {args.rounds} rounds"
    )
    print(f"  numpy  {best.chunks_per_s:6.1f} chunks/s   query p50 {query:6.2f} ms")
    if reference is None:
        print("  torch  reference not installed (pip install torch transformers)")
    else:
        their_best = max(f.chunks_per_s for f in theirs)
        their_query = min(f.query_p50_ms for f in theirs)
        print(f"  torch  {their_best:6.1f} chunks/s   query p50 {their_query:6.2f} ms")
        print(
            f"  numpy/torch: throughput {best.chunks_per_s / their_best:.2f}×,"
            f" query latency {query / their_query:.2f}×"
        )
    beside = question_beside_batches(embedder, texts, asks)
    print(
        f"  question beside passage batches (another thread, same process): p50 / p95"
        f" {beside.busy_p50_ms:.1f} / {beside.busy_p95_ms:.1f} ms, alone"
        f" {beside.idle_p50_ms:.1f} / {beside.idle_p95_ms:.1f} ms: p95 {beside.ratio_p95:.2f}×"
        f" (aim ≤ 2×; {beside.batches} batches done meanwhile)"
    )
    embedder.close()
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(args.reranker) if args.reranker else random_cross_encoder(Path(scratch) / "ce")
        reranker = CrossEncoderReranker(path, workers=args.workers)
        latency = bench_rerank(reranker)
        reranker.close()
    what = path.name if args.reranker else "random-weights MiniLM-sized cross-encoder"
    print(f"\nrerank {RERANK_CANDIDATES} candidates ({what}): p50 {latency:.0f} ms")


if __name__ == "__main__":
    main()
