"""By words, in memory: FTS5's bm25() over every chunk's words held in NumPy arrays.

FTS5 scores a match row by row: for each row a question's words match it decodes their
positions and reads the row's size from its own table, ~0.75 µs a row, so a natural question
whose words are in a third of 100,000 chunks costs ~25 ms however few results it keeps.
Here each word's postings (the chunks that hold it, with how often: a word of the text counts
1, of the title and headings 0.5, keyword.py's column weights) are two arrays, and a question
is a gather, a few vector operations and one `np.bincount` over the chunks: ~1 ms.

The scores are FTS5's own, to the last bit: the same formula in float64, each operation in the
order fts5_aux.c does it (idf by `math.log`, the C library's), a chunk's terms summed in the
question's order from 0.0, from the same counts (chunks, their tokens, each word's chunks),
and ties broken by chunk id as keyword.py's query breaks them. So a search answered here and
one answered by FTS5 give the same list.

Kept in step with the base as dense.py keeps the vectors, from the chunks table (text, and
title and headings as context, tokenized by the base's word rules as the FTS5 table was), by
one background thread with its own connection: new chunks (ids above the last one seen) are
appended as a new segment, removed ones masked, the segments merged when there are many and
compacted when a quarter of the chunks are dead. A search uses the index only when it holds
exactly what the search's snapshot holds — the same word rules, chunk count and last chunk id
given (ids are never reused, so the pair changes with every addition or removal); otherwise
FTS5 answers that search and the thread is woken to catch up. A base searched once (a
command-line search) is answered by FTS5 alone and never starts the thread, whose reading of
every chunk would take the one search's CPU and make closing wait for its batch (~0.1-0.3 s at
12,000 chunks): a Base hands this index to its searches from the second on (base/core.py), and
`warm` reads it at once. The thread stops when the base closes. Until the thread first reads,
the index holds nothing and has not imported NumPy (a command-line search by words needs none).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metis_lite.records import Hit
from metis_lite.settings import CONTEXT_WEIGHT, MIN_IDF, TEXT_WEIGHT
from metis_lite.store import Store
from metis_lite.text.tokenizer import TEXT_END, words_of

if TYPE_CHECKING:  # imported by what computes with it, all after the thread's first read
    import numpy as np

K1 = 1.2
B = 0.75
"""FTS5's bm25() constants (fts5_aux.c)."""

BATCH_CHUNKS = 2_000
"""Chunks read and tokenized at a time while building (~50 ms): how long closing the base may
wait for the thread to notice."""

FEW_ALLOWED = 64
"""Allowed chunks fewer than one in this many of the base are each looked up in the question's
postings (a fused list's chunks, a narrow filter); more, and every posting is read."""

WAIT_POLL_S = 0.01
"""How often `wait` looks whether the index has caught up."""

MAX_SEGMENTS = 8
"""Segments (one per catch-up) before they are merged into one."""

COMPACT_DEAD_FRACTION = 0.25
"""Drop removed chunks' postings when this share of the chunks held is dead."""

UNREAD = (0, -1, -1)
"""The key of an index that has read nothing yet: no base state has it (chunks count from 0)."""

_NEW_CHUNKS = "SELECT id, text, title, headings FROM chunks WHERE id > ? ORDER BY id LIMIT ?"
_CHUNK_IDS = "SELECT id FROM chunks WHERE id <= ? ORDER BY id"


@dataclass(frozen=True)
class _Segment:
    """Postings of some chunks, by term: term ids sorted, each term's run of rows (slots,
    ascending) and weighted counts (float32: sums of 1 and 0.5 are exact)."""

    terms: np.ndarray  # int32, sorted, unique
    starts: np.ndarray  # int64, len(terms) + 1
    rows: np.ndarray  # int32
    counts: np.ndarray  # float32

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray] | None:
        import numpy as np

        at = int(np.searchsorted(self.terms, term))
        if at == len(self.terms) or self.terms[at] != term:
            return None
        a, b = self.starts[at], self.starts[at + 1]
        return self.rows[a:b], self.counts[a:b]


@dataclass(frozen=True)
class _State:
    """What the index holds at one state of the base; never changed once published."""

    key: tuple[int, int, int]  # (word rules, chunks, last chunk id given)
    vocab: dict[str, int]  # shared by the states of one word rules; only ever grows
    segments: tuple[_Segment, ...]
    ids: np.ndarray  # chunk id of each slot
    lengths: np.ndarray  # tokens of each slot
    contexts: np.ndarray  # of them, in its context
    alive: np.ndarray
    norm: np.ndarray  # K1 (1 - B + B D / avgdl)
    live: int = 0
    tokens: int = 0  # tokens of the live slots
    usable: bool = True  # False when its counts are not the FTS5 table's (FTS5 answers)

    @property
    def dead(self) -> int:
        return len(self.ids) - self.live


class WordIndex:
    """The base's words in memory, and FTS5's BM25 top-n over them (see the module's doc).

    `connect` opens the connection the background thread reads with (closed with the index).
    """

    def __init__(self, connect: Callable[[], Store]) -> None:
        self._connect = connect
        self._state: _State | None = None  # None: the thread has read nothing yet
        self._wanted = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._recent = threading.local()  # this thread's last question's scores, by state
        self.failure: BaseException | None = None
        """What stopped the thread, when something did (FTS5 answers from then on)."""

    @property
    def key(self) -> tuple[int, int, int]:
        """(word rules, chunks, last chunk id given) of the base state the index holds."""
        state = self._state
        return UNREAD if state is None else state.key

    def current(self, store: Store) -> bool:
        """Whether the index holds exactly what `store`'s snapshot holds; wakes the thread
        to catch up when it does not."""
        if self.key == _key_of(store):
            return True
        self.wake()
        return False

    def wake(self) -> None:
        """Ask the thread to bring the index up to date (starting it the first time)."""
        if self._stop.is_set() or self.failure is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bm25", daemon=True)
                self._thread.start()
        self._wanted.set()

    def wait(self, store: Store, timeout: float = 60.0) -> bool:
        """Wake the thread and wait until the index holds what `store` sees now (tests,
        benchmarks); False on timeout or when the thread stopped."""
        deadline = time.monotonic() + timeout
        while not self.current(store):
            if self.failure is not None or self._stop.is_set() or time.monotonic() > deadline:
                return False
            self._stop.wait(WAIT_POLL_S)
        return True

    def close(self) -> None:
        self._stop.set()
        self._wanted.set()
        if self._thread is not None:
            self._thread.join()

    def search(
        self, store: Store, words: Sequence[str], n: int, *, allowed: np.ndarray | None = None
    ) -> list[Hit] | None:
        """The n chunks that best match `words` by FTS5's bm25() with keyword.py's column
        weights, best first, ties by chunk id, among the `allowed` chunk ids if given; None
        when the index does not hold what `store`'s snapshot holds (FTS5 must answer)."""
        import numpy as np

        state = self._state
        if state is None or state.key != _key_of(store):
            self.wake()
            return None
        if not state.usable:
            return None
        if state.live == 0 or state.tokens == 0 or n <= 0:
            return []
        among = None if allowed is None else _slots_of(state, allowed)
        recent = getattr(self._recent, "scored", None)
        if recent is not None and recent[0] is state and recent[1] == tuple(words):
            slots, scores = recent[2]  # the same question again (a deeper list, its scores_of)
        elif among is not None and len(among) * FEW_ALLOWED < state.live:
            slots, scores = _scores_among(state, words, among)
            among = None
        else:
            slots, scores = _scores(state, words)
            self._recent.scored = (state, tuple(words), (slots, scores))
        if among is not None:
            keep = np.isin(slots, among, assume_unique=True)
            slots, scores = slots[keep], scores[keep]
        best = _best(slots, scores, n)
        order = np.searchsorted(slots, best)
        return [
            Hit(chunk_id=int(state.ids[slot]), score=float(score), rank=rank)
            for rank, (slot, score) in enumerate(
                zip(best.tolist(), scores[order].tolist(), strict=True), start=1
            )
        ]

    # -- the thread -------------------------------------------------------------------------

    def _run(self) -> None:
        store = None
        try:
            if self._stop.is_set():
                return
            store = self._connect()
            while not self._stop.is_set():
                self._wanted.wait()
                self._wanted.clear()
                if not self._stop.is_set():
                    self._catch_up(store)
        except BaseException as exc:  # noqa: BLE001 - the thread's end: FTS5 answers from now on
            self.failure = exc
        finally:
            if store is not None:
                store.close()

    def _catch_up(self, store: Store) -> None:
        import numpy as np

        with store.db:  # one read transaction: every read below sees one state of the base
            key = _key_of(store)
            held = self._state
            if held is not None and held.key == key:
                return
            version, count, last_id = key
            if held is None or held.key[0] != version:  # nothing read yet, or other word rules
                held = _empty((version, 0, 0))
            state = held
            old_last = state.key[2]
            ids, lengths, contexts, alive = state.ids, state.lengths, state.contexts, state.alive
            if state.live + _added(store, old_last) != count:  # some were removed
                present = np.fromiter(
                    (row[0] for row in store.db.execute(_CHUNK_IDS, (old_last,))), np.int64
                )
                alive = alive & np.isin(ids, present, assume_unique=True)
            segments = list(state.segments)
            new_ids: list[int] = []
            new_lengths: list[np.ndarray] = []
            new_contexts: list[np.ndarray] = []
            after = old_last
            while True:
                if self._stop.is_set():
                    return
                batch = list(store.db.execute(_NEW_CHUNKS, (after, BATCH_CHUNKS)))
                if not batch:
                    break
                first_slot = len(ids) + len(new_ids)
                segment, texts, context = _segment(batch, first_slot, state.vocab, version)
                if segment is not None:
                    segments.append(segment)
                new_ids += [row[0] for row in batch]
                new_lengths.append(texts + context)
                new_contexts.append(context)
                after = batch[-1][0]
            fts_totals = _fts5_totals(store)
        if self._stop.is_set():
            return
        ids = np.concatenate([ids, np.array(new_ids, np.int64)])
        lengths = np.concatenate([lengths, *new_lengths]).astype(np.int64)
        contexts = np.concatenate([contexts, *new_contexts]).astype(np.int64)
        alive = np.concatenate([alive, np.ones(len(new_ids), bool)])
        if len(ids) and (len(ids) - int(alive.sum())) / len(ids) > COMPACT_DEAD_FRACTION:
            segments, kept = _compacted(segments, alive)
            ids, lengths, contexts = ids[kept], lengths[kept], contexts[kept]
            alive = np.ones(len(ids), bool)
        if len(segments) > MAX_SEGMENTS:
            segments = [_merged(segments)]
        live = int(alive.sum())
        tokens = int(lengths[alive].sum())
        in_context = int(contexts[alive].sum())
        self._state = _State(
            key=key,
            vocab=state.vocab,
            segments=tuple(segments),
            ids=ids,
            lengths=lengths,
            contexts=contexts,
            alive=alive,
            live=live,
            tokens=tokens,
            norm=_norm(lengths, tokens / live if live else 1.0),
            usable=fts_totals == (live, tokens - in_context, in_context),
        )


def _empty(key: tuple[int, int, int]) -> _State:
    """A state of no chunk, with a new vocabulary: where the index starts for a word rules."""
    import numpy as np

    none = np.empty(0, np.int64)
    return _State(key, _vocabulary(), (), none, none, none, np.empty(0, bool), np.empty(0))


def _vocabulary() -> dict[str, int]:
    """Term ids by word; a new word gets the next id (`vocab[word]` adds it); TEXT_END is 0."""
    vocab: defaultdict[str, int] = defaultdict()
    vocab.default_factory = vocab.__len__
    vocab[TEXT_END] = 0
    return vocab


def _key_of(store: Store) -> tuple[int, int, int]:
    count, last_id = store.chunks_generation()
    return (store.words_version, int(count), int(last_id))


def _fts5_totals(store: Store) -> tuple[int, ...]:
    """(rows, tokens of the text column, tokens of the context column) as the FTS5 table
    counts them: its averages record (rowid 1 of chunks_fts_data), SQLite varints. An index
    whose counts differ (a base whose words were written by other rules) is not used."""
    row = store.db.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    block, values, at = bytes(row[0]) if row else b"", [], 0
    while at < len(block):
        value = 0
        for i in range(9):
            byte = block[at + i]
            if i == 8:
                value = value << 8 | byte
                break
            value = value << 7 | byte & 0x7F
            if byte < 0x80:
                break
        values.append(value)
        at += i + 1
    return tuple(values) if values else (0, 0, 0)


def _added(store: Store, after: int) -> int:
    row = store.db.execute("SELECT count(*) FROM chunks WHERE id > ?", (after,)).fetchone()
    return int(row[0]) if row else 0


def _norm(lengths: np.ndarray, avgdl: float) -> np.ndarray:
    """K1 · (1 - B + B · D / avgdl) for each slot, as fts5_aux.c orders the operations."""
    import numpy as np

    return K1 * ((1 - B) + (B * lengths.astype(np.float64)) / avgdl)


def _postings(state: _State, term: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A term's (slots, weighted counts) over every segment, live slots only; None if none."""
    import numpy as np

    parts = [p for p in (s.postings(term) for s in state.segments) if p is not None]
    if not parts:
        return None
    slots = parts[0][0] if len(parts) == 1 else np.concatenate([p[0] for p in parts])
    counts = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
    if state.dead:
        keep = state.alive[slots]
        slots, counts = slots[keep], counts[keep]
    return (slots, counts) if len(slots) else None


def _terms(state: _State, words: Sequence[str]) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(idf, slots, counts) of each word that some live chunk holds, in the question's order;
    the idf as fts5_aux.c computes it."""
    out = []
    for word in words:
        term = state.vocab.get(word)
        found = _postings(state, term) if term is not None else None
        if found is None:
            continue
        held = len(found[0])
        idf = math.log((state.live - held + 0.5) / (held + 0.5))
        out.append((idf if idf > 0.0 else MIN_IDF, *found))
    return out


def _weights(state: _State, idf: float, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """A word's share of each of `slots`' scores, each operation in fts5_aux.c's order."""
    import numpy as np

    frequency = counts.astype(np.float64)
    return idf * ((frequency * (K1 + 1.0)) / (frequency + state.norm[slots]))


def _scores(state: _State, words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(slots that match, their scores), slots ascending: every word's postings at once, each
    slot's shares summed in the question's order from 0.0 (np.bincount adds in input order)."""
    import numpy as np

    terms = _terms(state, words)
    if not terms:
        return np.empty(0, np.int64), np.empty(0)
    rows = np.concatenate([slots for _, slots, _ in terms])
    shares = np.concatenate([_weights(state, *term) for term in terms])
    scores = np.bincount(rows, weights=shares)
    matched = np.flatnonzero(scores)
    return matched, scores[matched]


def _scores_among(
    state: _State, words: Sequence[str], among: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`_scores` for a few allowed slots: each looked up in each word's postings (sorted by
    slot) rather than every posting read; the same sums in the same order."""
    import numpy as np

    scores = np.zeros(len(among))
    for idf, slots, counts in _terms(state, words):
        at = np.minimum(np.searchsorted(slots, among), len(slots) - 1)
        held = slots[at] == among
        scores[held] += _weights(state, idf, among[held], counts[at[held]])
    matched = scores > 0.0
    return among[matched], scores[matched]


def _slots_of(state: _State, allowed: np.ndarray) -> np.ndarray:
    """The live slots holding one of the `allowed` chunk ids, ascending (slots hold ids in
    ascending order)."""
    import numpy as np

    allowed = np.asarray(allowed, np.int64)
    at = np.minimum(np.searchsorted(state.ids, allowed), len(state.ids) - 1)
    slots = np.unique(at[state.ids[at] == allowed])
    return slots[state.alive[slots]] if state.dead else slots


def _best(slots: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """The n slots of highest score, highest first, ties by slot (= by chunk id)."""
    import numpy as np

    if len(slots) > n:
        cut = np.partition(scores, len(scores) - n)[len(scores) - n]
        keep = scores >= cut  # every tie at the cut, so that the lowest ids win it
        slots, scores = slots[keep], scores[keep]
    order = np.lexsort((slots, -scores))[:n]
    return slots[order]


def _segment(
    batch: Sequence[tuple[int, str, str, str]], first_slot: int, vocab: dict[str, int], version: int
) -> tuple[_Segment | None, np.ndarray, np.ndarray]:
    """The postings of chunks read from the base (slots from `first_slot` on), and each one's
    tokens in its text and in its context, as the FTS5 table holds them."""
    import numpy as np

    texts: list[str] = []
    for _id, text, title, headings in batch:
        texts += (text, " ".join((title, *json.loads(headings))))
    terms = np.array(list(map(vocab.__getitem__, words_of(texts, version=version))), np.int32)
    ends = np.flatnonzero(terms == 0)  # TEXT_END after each text
    per_text = np.diff(ends, prepend=-1) - 1
    if len(terms) == len(texts):
        return None, per_text[0::2], per_text[1::2]
    text_of = np.cumsum(terms == 0) - (terms == 0)  # the text each word belongs to
    words = terms != 0
    slots = first_slot + text_of[words] // 2
    weights = np.where(text_of[words] % 2 == 0, TEXT_WEIGHT, CONTEXT_WEIGHT)
    keys = terms[words].astype(np.int64) << 32 | slots.astype(np.int64)
    unique, inverse = np.unique(keys, return_inverse=True)
    counts = np.bincount(inverse, weights=weights).astype(np.float32)
    segment = _from_postings(unique >> 32, unique & 0xFFFFFFFF, counts)
    return segment, per_text[0::2], per_text[1::2]


def _from_postings(terms: np.ndarray, rows: np.ndarray, counts: np.ndarray) -> _Segment:
    """A segment from postings sorted by term (and by slot within a term)."""
    import numpy as np

    change = np.flatnonzero(np.diff(terms)) + 1
    starts = np.concatenate([[0], change, [len(terms)]]).astype(np.int64)
    return _Segment(
        terms=terms[starts[:-1]].astype(np.int32),
        starts=starts,
        rows=rows.astype(np.int32),
        counts=counts.astype(np.float32),
    )


def _flat(segment: _Segment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    import numpy as np

    return np.repeat(segment.terms, np.diff(segment.starts)), segment.rows, segment.counts


def _merged(segments: Sequence[_Segment]) -> _Segment:
    """One segment of them all (their slots are disjoint and in order): each term's postings
    counted over every segment, then each segment's copied to where its terms' runs go, in
    segment order (so slots stay ascending within a term). No sort, and no temporary larger
    than one segment."""
    import numpy as np

    vocabulary = 1 + max((int(seg.terms[-1]) for seg in segments if len(seg.terms)), default=0)
    per_term = np.zeros(vocabulary, np.int64)
    for seg in segments:
        per_term[seg.terms] += np.diff(seg.starts)
    starts = np.concatenate([[0], np.cumsum(per_term)])
    rows = np.empty(int(starts[-1]), np.int32)
    counts = np.empty(int(starts[-1]), np.float32)
    cursor = starts[:-1].copy()
    for seg in segments:
        runs = np.diff(seg.starts)
        to = np.repeat(cursor[seg.terms] - seg.starts[:-1], runs) + np.arange(len(seg.rows))
        rows[to], counts[to] = seg.rows, seg.counts
        cursor[seg.terms] += runs
    held = np.flatnonzero(per_term)
    return _Segment(
        terms=held.astype(np.int32),
        starts=np.concatenate([starts[held], [starts[-1]]]),
        rows=rows,
        counts=counts,
    )


def _compacted(
    segments: Sequence[_Segment], alive: np.ndarray
) -> tuple[list[_Segment], np.ndarray]:
    """The postings of the live slots only, renumbered in order, in one segment; and the
    mask of the slots kept."""
    import numpy as np

    renumber = np.cumsum(alive) - 1
    merged = _merged(segments) if segments else None
    kept: list[_Segment] = []
    if merged is not None:
        terms, rows, counts = _flat(merged)
        keep = alive[rows]
        if keep.any():
            kept = [_from_postings(terms[keep], renumber[rows[keep]], counts[keep])]
    return kept, alive
