"""One result per text: passages whose words are nearly the same are one result.

A folder holds the same text in several places: a documentation site's page and its source
file (`library/subprocess.html` and `_sources/library/subprocess.rst.txt`, `git-add.html` and
`git-add.txt`), the same option described on every command's page that includes it, a notice
repeated on 40 pages, a note saved twice. Ranked one by one they fill the places of a search
with one answer. So, in the final order, a passage nearly the same as one ranked before it is
not a result of its own: it becomes a place of that result (`Result.also_in`), and `top_k`
counts distinct results.

"Nearly the same" is measured on the passages' words as the base's words index reads them
(the word rules, so it works in every script: bigrams where words are not spaced): the Jaccard
similarity of their sets of SHINGLE_WORDS-word shingles, at least SAME_TEXT_JACCARD.
Measured on git-doc as installed (60 everyday questions, top 30 of each, 26,100 pairs of
passages ranked together, docs/eval.md "One result per text"): of 1,231 pairs of different
passages of one page, 1 reaches 0.5 (two signature examples, 0.57) and none 0.6; of pairs in
two different documents, 1 % reach it, nearly all at 0.9 and more (an option's text included
in git-diff, git-diff-files and git-diff-tree; index.html and git.html), and the HTML page and
its AsciiDoc source of one command pass it whenever the two chunks cover the same text, their
cuts shifted by up to half a chunk.

Passages of two different documents of about one length are one text too when half the
shingles of the shorter are in the other (SAME_TEXT_SHARE, LENGTHS_RATIO): a Sphinx page is
cut by its sections and its `_sources` copy by its paragraphs, its roles (`:func:`) breaking a
shingle each, so their passages overlap by a part and Jaccard, which counts both cut-off ends,
stays under 0.5. Measured on Python's documentation as installed (48 questions, top 30 of each,
hybrid; docs/eval.md "A fourth tree"): pairs of a page's passage and its source's joined 238 →
409 of 2,985, pairs of one document 6 → 6 of 2,879 (this rule is not for them), pairs of two
other documents 3 → 7 of 15,016, each the same text in two places.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from metis_lite.records import Result
from metis_lite.text.tokenizer import tokens

SHINGLE_WORDS = 3
"""Words per shingle: 3 tells a passage from another of the same page that shares its
vocabulary (a command's page repeats its words everywhere), where single words do not
(pairs of one page: 0.20 mean Jaccard of words, 0.02 of 3-word shingles)."""

SAME_TEXT_JACCARD = 0.5
"""Two passages at this Jaccard similarity of their shingles or above are one text (measured:
the module docstring)."""

SAME_TEXT_SHARE = 0.5
"""Passages of two documents are one text too when half the shingles of the shorter are in the
other: the same text cut at other places (a page and its source file, chunked by their own
markup), where Jaccard counts the cut-off ends twice. Not within one document: its passages are
cut from one text without overlap, so what they share is phrasing (measured: the module
docstring)."""

LENGTHS_RATIO = 0.5
"""SAME_TEXT_SHARE holds between passages of about one length only (the shorter at least half
the longer): passages cut from one text at other places are, whereas a command's one-line
summary is wholly inside the list of every command (git-bisect.html in cmds-mainporcelain.txt)
and is not that list."""

SHINGLES_MIN = 10
"""Passages of fewer shingles (under 12 words) are one text only when their words are the
same: in a short text one word changes half its shingles and none of its sense the other way
round ("Ana's role is backend engineer." and "… frontend engineer." share half of theirs),
so a fact and the one that replaced it stay two results."""


Shingles = frozenset[int]
"""A passage's shingles, each as the hash of its words (64 bits: two shingles of one search
that collide are as likely as not at all)."""


def shingles(text: str, version: int) -> Shingles:
    """The passage's runs of SHINGLE_WORDS words, by the word rules of `version`; a passage
    of fewer words is one shingle of all of them."""
    words = tokens(text, version=version)
    if len(words) <= SHINGLE_WORDS:
        return frozenset((hash(tuple(words)),))
    return frozenset(map(hash, zip(*(words[at:] for at in range(SHINGLE_WORDS)), strict=False)))


def same_text(a: Shingles, b: Shingles, *, one_document: bool = True) -> bool:
    """Whether two passages' shingles make them one text (SAME_TEXT_JACCARD, SHINGLES_MIN);
    `one_document` False: passages of two documents (SAME_TEXT_SHARE)."""
    return _same(a, b, len(a & b), one_document)


def _same(a: Shingles, b: Shingles, shared: int, one_document: bool) -> bool:
    if min(len(a), len(b)) < SHINGLES_MIN:
        return a == b
    shorter, longer = sorted((len(a), len(b)))
    if (
        not one_document
        and shorter >= LENGTHS_RATIO * longer
        and shared >= SAME_TEXT_SHARE * shorter
    ):
        return True
    return shared >= SAME_TEXT_JACCARD * (len(a) + len(b) - shared)


Document = tuple[str | None, str, str]
"""A passage's document: its base (None: the one searched), source and path."""


def of_document(result: Result) -> Document:
    return (result.base, result.citation.source, result.citation.document)


@dataclass
class _Kept:
    result: Result
    shingles: Shingles
    others: list[Result] = field(default_factory=list)


class Distinct:
    """Results taken in rank order, each kept or made a place of a kept one it repeats. The
    kept results' shingles are indexed, so a passage is compared with those it shares a
    shingle with only, by one look-up per shingle."""

    def __init__(self) -> None:
        self.kept: list[_Kept] = []
        self._holders: dict[int, list[int]] = {}  # shingle → the kept results holding it

    def same_as(
        self, text: str, version: int, document: Document | None = None
    ) -> tuple[int | None, Shingles]:
        """The first kept result `text`, a passage of `document`, is nearly the same as (None:
        none), and its shingles; `document` None: of any document but theirs (the looser
        measure, so a place not yet cited is read if it may repeat one)."""
        own = shingles(text, version)
        shared: dict[int, int] = {}
        for shingle in own & self._holders.keys():  # in C: most passages share none
            for k in self._holders[shingle]:
                shared[k] = shared.get(k, 0) + 1
        for k in sorted(shared):
            kept = self.kept[k]
            if _same(own, kept.shingles, shared[k], document == of_document(kept.result)):
                return k, own
        return None, own

    def add(self, result: Result, version: int, *, new: bool = True) -> None:
        """Take `result`, next in rank order, its words read by the rules `version`; `new`
        False: only as a place of a result kept (the places read past the last one)."""
        k, own = self.same_as(result.text, version, of_document(result))
        if k is not None:
            self.kept[k].others.append(result)
        elif new:
            for shingle in own:
                self._holders.setdefault(shingle, []).append(len(self.kept))
            self.kept.append(_Kept(result, own))

    def __len__(self) -> int:
        return len(self.kept)

    def results(self, top_k: int) -> tuple[Result, ...]:
        """The first top_k distinct results, each with the places of the passages it stands
        for, in their rank order (each followed by the copies of its file, steps.cite)."""
        return tuple(
            replace(
                k.result,
                also_in=(
                    *k.result.also_in,
                    *(p for other in k.others for p in (other.place, *other.also_in)),
                ),
            )
            for k in self.kept[:top_k]
        )
