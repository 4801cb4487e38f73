"""A search: a question answered from one base or several, step by step.

search.py    the pipeline, one for one base or several: Step 1 (the question embedded),
             Steps 2-3 (the two lists), Step 4 (fused), Step 5 (reranked), Step 6
             (facts that hold first), Step 7 (cited); the one entry point of the package
dense.py     by meaning: exact cosine over every vector, the vectors held in memory
keyword.py   by words: BM25 over FTS5, and the question's words
bm25.py      the base's words held in memory, scored as FTS5 scores them
fusion.py    the two lists fused (relative, or reciprocal rank), read deeper while the
             places asked for could still change
memory.py    a memory base's order: facts that still hold first
snippet.py   a citation's snippet and the question's words found in a passage

Its face: search (the pipeline), keyword, bm25, dense and memory (what a Base holds or reads
of it).
"""
