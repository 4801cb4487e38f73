"""A citation's snippet and the spans of a text to highlight for a question.

docs/how-search-works.md ("What a result holds"): the snippet is "up to 240 characters around
the sentence holding most of the question's words". The chunk's whitespace is collapsed to single spaces
(a snippet is one line to read), its sentences are scored by how many distinct question words
each holds (folded by the index's own tokenizer, so `configuracao` matches `Configuração`;
a word also holds a question word that it is with an ending, or that is it with an ending:
`gets` for `get`, `holiday` for `holidays`; see `holds`), and the best one wins: the earliest
on a tie, the first when none holds a question word.

A best sentence that fits is widened up to the limit with the words after it, then with the
whole sentences before it (so the snippet starts where a sentence does); one that does not fit
is cut to the window holding most of its question words. Cuts fall between words, and inside a
word only when it is longer than the window. A cut end is marked with "…", and the marks count
towards the limit.

`word_matches` says which of the question's words a result holds, and in which forms: what a
result tells of its words, and what the console marks.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable

from metis_lite.errors import InvalidRequest
from metis_lite.records import QuestionWords, WordMatch
from metis_lite.settings import SNIPPET_CHARS
from metis_lite.text.tokenizer import VERSION, token_spans, tokens

ELLIPSIS = "…"
"""Marks each end of a snippet where the text goes on."""

SNIPPET_CHARS_MIN = 10
"""The smallest snippet limit accepted: room for both marks and a word or two."""

PREFIX_CHARS = 3
"""A question word and a word of the text match for the snippet when one begins with the other
and the shorter has at least this many characters ("get" and "gets"; "do" only as itself)."""

ENDING_SHARE = 0.5
"""…and the longer adds at most this share of the shorter's characters, at least one: an
ending, not another word ("gets" for "get", "vacations" for "vacation"; not "career" for
"car" nor "getting" for "get", which would mark half a text for a short question word)."""

_CLOSE, _CJK_END, _CJK_CLOSE = "\"'”’»)\\]", "。！？｡", "」』”’）)"
_SENTENCE_END = re.compile(
    # . ! ? … followed by a space or the end; 。！？ anywhere, since Chinese and Japanese put no
    # space between sentences.
    rf"[.!?…]+[{_CLOSE}]*(?= |$)|[{_CJK_END}]+[{_CJK_CLOSE}]*"
)
_WORD_BREAK = re.compile(
    # Where a snippet may start or end: at a space, or after a sentence of a script written
    # without spaces.
    rf" |(?<=[{_CJK_END}])(?![{_CJK_CLOSE}])|(?<=[{_CJK_END}][{_CJK_CLOSE}])"
)


def snippet(
    text: str, question_terms: Iterable[str], *, limit: int = SNIPPET_CHARS, version: int = VERSION
) -> str:
    """At most `limit` characters of `text` around its sentence holding most question words.

    `question_terms` are the question's words as `tokenizer.tokens` gives them (they are
    folded again here, so raw words work too); `version`: the word rules of the base's words
    index. Raises InvalidRequest for a limit below SNIPPET_CHARS_MIN.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < SNIPPET_CHARS_MIN:
        raise InvalidRequest(
            f"a snippet limit is a whole number of at least {SNIPPET_CHARS_MIN}, not {limit!r}"
        )
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    terms = _fold_terms(question_terms, version)
    start, end = _best_sentence(flat, terms, version)
    if (end - start) + (start > 0) + (end < len(flat)) <= limit:
        start, end = _widen(flat, start, end, limit)
    else:
        start, end = _window(flat, start, end, terms, limit, version)
    lead = ELLIPSIS if start > 0 else ""
    trail = ELLIPSIS if end < len(flat) else ""
    return lead + flat[start:end] + trail


def highlight_spans(text: str, question_terms: Iterable[str]) -> list[tuple[int, int]]:
    """(start, end) in `text` of each word whose folded form is one of the question's words;
    overlapping ones (the bigrams of a CJK run, 東京 and 京都) joined into one: 東京都."""
    terms = _fold_terms(question_terms)
    spans: list[tuple[int, int]] = []
    for start, end, word in token_spans(text):
        if word in terms:
            if spans and start < spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((start, end))
    return spans


def sentences(flat: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of a whitespace-collapsed text, in order, covering it all."""
    out = []
    start = 0
    for match in _SENTENCE_END.finditer(flat):
        end = match.end()
        if end > start:
            out.append((start, end))
        start = end + 1 if flat[end : end + 1] == " " else end
    if start < len(flat):
        out.append((start, len(flat)))
    return out


def word_matches(
    asked: QuestionWords, text: str, context: str = "", *, version: int = VERSION
) -> tuple[WordMatch, ...]:
    """The question's words that a chunk holds, in the question's order: each with whether the
    chunk holds the word itself (in `text` or in `context`, its title and headings, as the words
    index has them) and the words of `text` that hold it (see `holds`), with how many of the
    base's chunks hold it and whether it is common there."""
    found = set(tokens(text, version=version))
    around = set(tokens(context, version=version)) if context else set()
    ordered = sorted(found)
    out = []
    for word, chunks, common in zip(asked.words, asked.held, asked.common, strict=True):
        forms = tuple(sorted(w for w in _candidates(word, found, ordered) if holds(w, word)))
        exact = word in found or word in around
        if exact or forms:
            out.append(WordMatch(word, chunks, common, exact, forms))
    return tuple(out)


def _candidates(word: str, found: set[str], ordered: list[str]) -> list[str]:
    """The words of `found` that may hold `word`: itself, the words it begins, those it ends."""
    out = [word] if word in found else []
    if len(word) >= PREFIX_CHARS:
        out += [word[:n] for n in range(PREFIX_CHARS, len(word)) if word[:n] in found]
        at = bisect.bisect_right(ordered, word)
        while at < len(ordered) and ordered[at].startswith(word):
            out.append(ordered[at])
            at += 1
    return out


def holds(word: str, term: str) -> bool:
    """Whether a word of a text holds a question word: it is the word, or one of the two is the
    other with an ending — it begins with the other, which has at least PREFIX_CHARS characters,
    and adds at most ENDING_SHARE of them (get → gets, holidays → holiday; not car → career)."""
    if word == term:
        return True
    short, long = (word, term) if len(word) < len(term) else (term, word)
    return (
        len(short) >= PREFIX_CHARS
        and long.startswith(short)
        and len(long) - len(short) <= max(1, int(ENDING_SHARE * len(short)))
    )


def _fold_terms(question_terms: Iterable[str], version: int = VERSION) -> frozenset[str]:
    return frozenset(word for term in question_terms for word in tokens(term, version=version))


def _best_sentence(flat: str, terms: frozenset[str], version: int) -> tuple[int, int]:
    """The sentence holding most distinct question words; the earliest of equals."""
    spans = sentences(flat)
    best, best_count = spans[0], 0
    if terms:
        for start, end in spans:
            count = held(terms, tokens(flat[start:end], version=version))
            if count > best_count:
                best, best_count = (start, end), count
                if count == len(terms):
                    break
    return best


def held(terms: frozenset[str], words: Iterable[str]) -> int:
    """How many of the question's words a sentence's words hold: the word itself, or the word
    with an ending (see `holds`: get → gets, holidays → holiday). A snippet is for reading, not
    ranking: this finds the sentence that says "Every employee gets 25 days" for "how many days
    do I get" where the words' index, which does not stem, matches only "get" elsewhere."""
    found = {_term_of(word, terms) for word in set(words)}
    found.discard(None)
    return len(found)


def _term_of(word: str, terms: frozenset[str]) -> str | None:
    """The question word `word` holds (see `held`), or None."""
    if word in terms:
        return word
    if len(word) >= PREFIX_CHARS:
        for term in terms:
            if holds(word, term):
                return term
    return None


def _widen(flat: str, start: int, end: int, limit: int) -> tuple[int, int]:
    """Extend a sentence that fits with whole words after it, then whole sentences before it.

    `room` is what the snippet may still grow by, its marks counted: taking the text up to
    an end of `flat` drops that end's mark, which frees one character.
    """
    n = len(flat)
    room = limit - (end - start) - (start > 0) - (end < n)
    if end < n:
        if n - end <= room + 1:
            room -= n - end - 1
            end = n
        else:
            cuts = [m.start() for m in _WORD_BREAK.finditer(flat, end, end + room + 1)]
            cut = max((c for c in cuts if c <= end + room), default=end)
            room -= cut - end
            end = cut
    if start > 0 and room > 0:
        if start <= room + 1:
            start = 0
        else:
            earliest = start - room
            starts = (
                match.end() + (flat[match.end() : match.end() + 1] == " ")
                for match in _SENTENCE_END.finditer(flat, max(0, earliest - 8), start)
            )
            start = min((s for s in starts if earliest <= s < start), default=start)
    return start, end


def _window(
    flat: str, start: int, end: int, terms: frozenset[str], limit: int, version: int
) -> tuple[int, int]:
    """The part of a too-long sentence that holds most of its question words, cut at words."""
    width = limit - 2 * len(ELLIPSIS)
    matches = [
        (start + s, start + e, term)
        for s, e, word in token_spans(flat[start:end], version=version)
        if (term := _term_of(word, terms)) is not None
    ]
    low, high = _densest(matches, width) if matches else (start, start)
    high = min(high, low + width)  # a matched word wider than the window is cut
    left = max(start, low - (width - (high - low)) // 2)
    right = min(end, left + width)
    left = max(start, right - width)
    if left > start and flat[left - 1] != " ":
        space = flat.find(" ", left, low)
        if space != -1:
            left = space + 1
    if right < end and flat[right] != " ":
        space = flat.rfind(" ", high, right)
        if space != -1:
            right = space
    while left < right and flat[left] == " ":
        left += 1
    while right > left and flat[right - 1] == " ":
        right -= 1
    return left, right


def _densest(matches: list[tuple[int, int, str]], width: int) -> tuple[int, int]:
    """(start, end) of the run of matches, at most `width` wide, with most distinct words.

    A sliding window over the matches in text order; the earliest of equal runs wins. When
    every match alone is wider than `width`, the first one.
    """
    best, best_count = (matches[0][0], matches[0][1]), 0
    held: Counter[str] = Counter()
    first = 0
    for last, (_, last_end, word) in enumerate(matches):
        held[word] += 1
        while first <= last and last_end - matches[first][0] > width:
            gone = matches[first][2]
            held[gone] -= 1
            if not held[gone]:
                del held[gone]
            first += 1
        if len(held) > best_count:
            best, best_count = (matches[first][0], last_end), len(held)
    return best
