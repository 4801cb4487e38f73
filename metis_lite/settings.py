"""Named defaults, each with its unit and the spec's reason (spec: how-search-works.md)."""

from __future__ import annotations

CHUNK_CHARS = 1200
"""A chunk holds at most this many characters by default ("What is searched")."""

TOP_K = 10
"""Results a search returns unless asked otherwise."""

TOP_K_MAX = 100
"""The most results one search may ask for."""

CANDIDATES_MIN = 50
"""Each retriever keeps its best 50, or CANDIDATES_PER_RESULT × top_k when more ("By meaning")."""

CANDIDATES_PER_RESULT = 4

RRF_K = 60
"""Reciprocal-rank fusion constant: Σ 1/(RRF_K + rank) ("Fusion")."""

RERANK_PER_RESULT = 3
"""The reranker reads 3 × top_k fused candidates, clamped to RERANK_MIN..RERANK_MAX ("Reranking")."""

RERANK_MIN = 20
RERANK_MAX = 50

MODEL_DEADLINE_S = 10.0
"""A model that does not answer within 10 s is treated as down ("When a model does not answer")."""

SNIPPET_CHARS = 240
"""A citation's snippet: up to 240 characters around the best sentence ("What a result holds")."""

MAX_FILE_BYTES = 50 * 1024 * 1024
"""Files larger than this are skipped with a reason (per base, `spec.max_file_bytes`)."""

EMBED_BATCH = 32
"""Chunks sent to the embedding model in one call while indexing."""

EMBEDDED_MODEL = "all-MiniLM-L6-v2"
"""The embedded default model (DESIGN.md, "Models")."""

MODES = ("hybrid", "dense", "keyword")
"""The three modes ("The three modes"); hybrid is the default."""

KINDS = ("md", "txt", "html", "pdf", "docx")
"""Document kinds a base reads ("Filters")."""

BASE_KINDS = ("documents", "memory")
