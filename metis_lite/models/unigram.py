"""A SentencePiece Unigram tokenizer (XLM-RoBERTa's) built from its pieces, without sentencepiece.

The text is normalised as sentencepiece's `nmt_nfkc` rule does, then cut into pieces by the
`tokenizers` library's Unigram model (the same Viterbi search over the same scores), then framed
as `<s> … </s>`. The ids are Hugging Face's (fairseq's order: `<s>` 0, `<pad>` 1, `</s>` 2,
`<unk>` 3, then sentencepiece's own pieces one place up).

nmt_nfkc, as sentencepiece applies it (its precompiled map, longest match first, one pass):

- each character's NFKC form, and the NMT rules on top: control characters removed, tabs, line
  breaks, zero-width characters, bidirectional marks and U+2581 made spaces. That is one
  mapping per code point, which the model file carries and `str.translate` applies;
- a character written out in its NFKD form (say "e" + U+0301) is read as the character ("é").
  Only those sequences are composed, each where it stands, never marks reordered: so "á" +
  U+0323 stays as it is, where Python's NFC would make "ạ́" (the map's composition rules are
  made with ICU; here Python's `unicodedata` makes the same ones);
- runs of spaces become one, spaces at either end go, and each word gets its "▁".

The per-code-point rules are the model's own (XLM-RoBERTa's, 2019), not today's sentencepiece's:
they make U+200D a space and keep U+061C, and have none for Unicode 12+ characters. Where two
segmentations of a word score exactly alike (the same pieces in another order, as in "?????"),
`tokenizers` keeps the first found, summing in float64, as Hugging Face's XLM-RoBERTa tokenizer
does; sentencepiece sums in float32, whose rounding may pick the other (docs/models.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 1, 0, 2, 3
"""Hugging Face XLM-RoBERTa's special ids: pieces 0–3 are <s>, <pad>, </s>, <unk>."""

SPECIAL_PIECE = "\x01{}"
"""What the vocabulary holds for a special's text: its name behind a control character, which
normalisation always removes, so that "<s>" written in a text is read as ordinary characters
(as sentencepiece reads it) and never as the special."""

DECOMPOSED_MAX = 4
"""The longest NFKD form that composes back into one character (U+1F82: α + three marks)."""

COMBINING_FROM = 0x300
"""No character below U+0300 composes with the character before it."""

SURROGATES = range(0xD800, 0xE000)

_SPACES = re.compile(" {2,}")


class NmtNfkc:
    """sentencepiece's nmt_nfkc normalisation (module docstring), from the per-code-point map."""

    def __init__(self, mapping: Mapping[int, str]) -> None:
        # A lone surrogate (JSON may carry one) is malformed UTF-8 to sentencepiece, which reads
        # it as U+FFFD, a space to nmt_nfkc; `tokenizers` would refuse the text.
        self._table = {code: " " for code in range(SURROGATES.start, SURROGATES.stop)}
        self._table.update(mapping)

    def __call__(self, text: str) -> str:
        if not unicodedata.is_normalized("NFKC", text):  # else nothing in it composes
            text = compose_decomposed(text)
        text = text.translate(self._table)
        return _SPACES.sub(" ", text).strip(" ")


def compose_decomposed(text: str) -> str:
    """Each sequence that spells a character's NFKD form, as that NFKC composition; the longest
    first, left to right, as sentencepiece's map matches. A sequence spells it also through
    characters that are a stand-in for one (U+0340 for U+0301, "ａ" for "a": their NFKD is one
    character), as sentencepiece's map has those variants too."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if i + 1 == n or ord(text[i + 1]) < COMBINING_FROM or not _composes(text[i : i + 2]):
            out.append(text[i])
            i += 1
            continue
        for k in range(min(DECOMPOSED_MAX, n - i), 1, -1):
            spelt = _stand_ins_resolved(text[i : i + k])
            if spelt is None:
                continue
            composed = unicodedata.normalize("NFC", spelt)
            if len(composed) == 1 and unicodedata.normalize("NFKD", composed) == spelt:
                out.append(composed)
                i += k
                break
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _composes(pair: str) -> bool:
    """Whether two characters become something else together than apart (under NFKC): so
    does the first pair of every sequence that composes into one character."""
    together = unicodedata.normalize("NFKC", pair)
    return together != unicodedata.normalize("NFKC", pair[0]) + unicodedata.normalize(
        "NFKC", pair[1]
    )


def _stand_ins_resolved(piece: str) -> str | None:
    """`piece` with each character as its one-character NFKD form; None when one has a longer
    one (such a character is in no NFKD spelling)."""
    out = []
    for char in piece:
        decomposed = unicodedata.normalize("NFKD", char)
        if len(decomposed) != 1:
            return None
        out.append(decomposed)
    return "".join(out)


ORDINARY = UNK_ID + 1
"""The first ordinary piece's id (the last, <mask>, is no ordinary piece either)."""


class PieceTable:
    """The ordinary pieces sorted, as one NumPy string array, with their ids: a word's pieces
    are found by a binary search of its substrings, with no 250,000-entry dict to build in each
    process (~0.15 s); made once and memory-mapped from the cache folder (weights_cache.py)."""

    def __init__(self, pieces: np.ndarray, ids: np.ndarray) -> None:
        self.pieces = pieces  # str_, sorted
        self.ids = ids
        self.longest = pieces.dtype.itemsize // 4  # str_ holds 4 bytes a character

    @classmethod
    def of(cls, pieces: Sequence[str]) -> PieceTable:
        """The table of every piece by id (the ordinary ones are kept)."""
        ordinary = np.array(pieces[ORDINARY : len(pieces) - 1])
        order = np.argsort(ordinary, kind="stable")
        ordered = ordinary[order]
        last = np.append(ordered[1:] != ordered[:-1], True)  # a piece twice: its last id, as a dict
        return cls(ordered[last], (order[last] + ORDINARY).astype(np.int32))

    def found_in(self, word: str) -> dict[str, int]:
        """The pieces that occur in `word`, with their ids, in the order UnigramTokenizer
        finds them (by start, then length). A NumPy string ends at its first NUL, and no piece
        holds one: a substring that does is never a piece."""
        n, longest = len(word), self.longest
        candidates = [word[i:j] for i in range(n) for j in range(i + 1, min(n, i + longest) + 1)]
        candidates = [c for c in candidates if "\x00" not in c]
        if not candidates:
            return {}
        at = np.minimum(np.searchsorted(self.pieces, candidates), len(self.pieces) - 1)
        hits = self.pieces[at] == np.array(candidates)
        found: dict[str, int] = {}
        for piece, hit, where in zip(candidates, hits.tolist(), at.tolist(), strict=True):
            if hit and piece not in found:
                found[piece] = int(self.ids[where])
        return found


@dataclass(frozen=True)
class Encoding:
    """One text's ids, <s> and </s> included, and its token type ids (all 0)."""

    ids: list[int]
    type_ids: list[int]


class UnigramTokenizer:
    """Normalise, cut into Unigram pieces, frame with <s> and </s>, truncate to `max_length`.

    The cutting is `tokenizers`' Unigram model, made for each call from only the pieces that
    occur inside that call's words: Viterbi looks at nothing else (a word is cut on its own, and
    a piece that is not a substring of it never matches), so the ids are those of the whole
    vocabulary, while the whole 250,002-piece model would cost ~230 MB and ~0.7 s to build (its
    trie allocates per node, holding the GIL). Scores are used as they are; the lowest score,
    from which the unknown piece's is made, is kept by a piece that never matches.
    """

    def __init__(
        self,
        pieces: Sequence[str],
        scores: Sequence[float] | np.ndarray,
        normalizer: NmtNfkc,
        *,
        max_length: int,
        table: PieceTable | None = None,
    ) -> None:
        """`pieces`: every piece by id, or only the specials (ids below ORDINARY) when `table`
        holds the ordinary ones; `scores`: every piece's."""
        self.normalize = normalizer
        self.max_length = max_length
        first, last = ORDINARY, len(scores) - 1  # ordinary pieces: after <unk>, before <mask>
        self._specials = [
            (SPECIAL_PIECE.format(p), float(s))
            for p, s in zip(pieces[:first], scores[:first], strict=True)
        ]
        self._table = table
        self._ids = (
            {piece: n for n, piece in enumerate(pieces[first:last], start=first)}
            if table is None
            else {}
        )
        self._scores = scores
        # NumPy's min, not the builtin's Python loop over 250,000 scores (~25 ms): the same one
        self._lowest = (SPECIAL_PIECE.format("lowest"), float(np.min(scores[first:last])))
        self._longest = max(map(len, self._ids)) if table is None else table.longest

    def encode_batch(self, texts: Sequence[str]) -> list[Encoding]:
        from tokenizers import Tokenizer, models, pre_tokenizers, processors

        normalized = [self.normalize(text) for text in texts]
        found: dict[str, int] = {}
        for word in {word for text in normalized for word in text.split(" ") if word}:
            found.update(self._pieces_in("▁" + word))
        scores = self._scores
        vocab = [*self._specials, *((p, float(scores[n])) for p, n in found.items()), self._lowest]
        to_global = np.array([*range(len(self._specials)), *found.values(), UNK_ID], np.int64)
        tokenizer = Tokenizer(models.Unigram(vocab, unk_id=UNK_ID, byte_fallback=False))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
            replacement="▁", prepend_scheme="always", split=True
        )
        tokenizer.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", BOS_ID), ("</s>", EOS_ID)]
        )
        tokenizer.enable_truncation(self.max_length)
        return [
            Encoding(to_global[e.ids].tolist(), e.type_ids)
            for e in tokenizer.encode_batch(normalized)
        ]

    def encode(self, text: str) -> Encoding:
        return self.encode_batch([text])[0]

    def _pieces_in(self, word: str) -> dict[str, int]:
        """The vocabulary's pieces that occur in `word`, with their ids."""
        if self._table is not None:
            return self._table.found_in(word)
        ids, longest, n = self._ids, self._longest, len(word)
        found = {}
        for i in range(n):
            for j in range(i + 1, min(n, i + longest) + 1):
                piece = word[i:j]
                if piece in ids:
                    found[piece] = ids[piece]
        return found
