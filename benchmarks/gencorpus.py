"""A generated corpus for benchmarks: Markdown files of ~800-character chunks, with Zipf-distributed words.

    from gencorpus import Vocabulary, write_corpus, questions
    vocab = Vocabulary(seed=7)
    write_corpus(folder, chunks=10_000, vocab=vocab)        # 100 files of 100 sections
    asks = questions(vocab, 200)                              # 3–10 words each

Words follow a Zipf law (the r-th commonest word is drawn ∝ 1 / r^ZIPF_S), as words of real text
do: the commonest are English function words, the rest made-up words built from syllables, so
that BM25 meets the mix it meets in practice — a few words in nearly every chunk, most in few.
Each file has a title and one `##` heading per chunk; each section is one chunk of about
CHUNK_CHARS characters (below the default chunk size, so the chunker keeps it whole).
Deterministic for a seed.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

ZIPF_S = 1.07
"""Zipf exponent: about what English text shows."""

WORDS = 20_000
CHUNK_CHARS = 800
CHUNKS_PER_FILE = 100

FUNCTION_WORDS = (
    "the of and to in is that for it as with was on be by at this are from or an which have not"
    " but they his can all their has one were more we there been if when will would who so no"
    " its into than other some what time only also may about any these two then do most such"
    " over new after where how many first under each between both every because before"
).split()

_SYLLABLES = (
    "ka ri to mu se la no vi pe da lo ren tor sil mar ven qua dor lin bas fe go hu ja ne po sa"
    " te zu bri cla dre fro gla pri sta tro ul om ex in ar es"
).split()


class Vocabulary:
    """The word list and its Zipf weights; draws words for chunks, titles and questions."""

    def __init__(self, size: int = WORDS, *, seed: int = 7) -> None:
        rng = random.Random(seed)
        words = list(FUNCTION_WORDS)
        seen = set(words)
        while len(words) < size:
            word = "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4)))
            if word not in seen:
                seen.add(word)
                words.append(word)
        self.words = np.array(words)
        ranks = np.arange(1, size + 1, dtype=np.float64)
        weights = 1.0 / ranks**ZIPF_S
        self.p = weights / weights.sum()
        self.rng = np.random.default_rng(seed + 1)

    def draw(self, n: int) -> list[str]:
        return self.words[self.rng.choice(len(self.words), size=n, p=self.p)].tolist()


def chunk_text(vocab: Vocabulary, words: list[str]) -> str:
    """Sentences of 6–18 words from `words` until about CHUNK_CHARS characters."""
    sentences, length, at = [], 0, 0
    while length < CHUNK_CHARS - 60 and at < len(words):
        n = int(vocab.rng.integers(6, 19))
        sentence = " ".join(words[at : at + n])
        at += n
        sentence = sentence[:1].upper() + sentence[1:] + "."
        sentences.append(sentence)
        length += len(sentence) + 1
    return " ".join(sentences)


def write_corpus(folder: Path, *, chunks: int, vocab: Vocabulary) -> int:
    """Write `chunks` chunks as Markdown files of CHUNKS_PER_FILE sections; returns files written."""
    folder.mkdir(parents=True, exist_ok=True)
    files = (chunks + CHUNKS_PER_FILE - 1) // CHUNKS_PER_FILE
    per_chunk = 150  # words drawn per chunk: more than ~800 characters need
    for f in range(files):
        count = min(CHUNKS_PER_FILE, chunks - f * CHUNKS_PER_FILE)
        pool = vocab.draw(per_chunk * count + 6 * count + 5)
        title = " ".join(pool[:4]).capitalize()
        parts = [f"# {title}\n"]
        at = 5
        for c in range(count):
            heading = " ".join(pool[at : at + 3]).capitalize()
            at += 6
            text = chunk_text(vocab, pool[at : at + per_chunk])
            at += per_chunk
            parts.append(f"## {heading} {c + 1}\n\n{text}\n")
        sub = folder / f"part{f // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"doc{f:05d}.md").write_text("\n".join(parts), encoding="utf-8")
    return files


def questions(vocab: Vocabulary, count: int, *, seed: int = 11) -> list[str]:
    """Natural-length questions: 3–10 words drawn from the same vocabulary and law."""
    rng = np.random.default_rng(seed)
    return [" ".join(vocab.draw(int(rng.integers(3, 11)))) for _ in range(count)]
