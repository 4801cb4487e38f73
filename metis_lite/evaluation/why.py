"""Why a passage came up, in words: the one set of rules the `eval` report and the console's
Compare view say it by. console/why.js is this module written in JavaScript, rule for rule;
tests/test_eval.py runs both over one table of cases and checks they agree.

A passage's ranks by meaning and by words are those of the lists before fusion (a search of
several bases: their lists merged); the words are the question's words it holds (Result.words).

- "both agree" only when both lists placed it near the top: among their first NEAR_THE_TOP;
- "it names a term of the question exactly" only when a word it holds itself (`exact`) is not
  common in its base (`common`: held by a quarter of its chunks or more); when every word it
  holds is common, it says so;
- close in meaning but far by words: "it says the same thing in other words";
- neither list near the top: both ranks, and that neither placed it among its first
  NEAR_THE_TOP.
"""

from __future__ import annotations

from collections.abc import Sequence

from metis_lite.records import WordMatch

NEAR_THE_TOP = 10
"""A list placed a passage near the top when it ranked it among its first 10: the results a
search shows unless asked for more. Lower, a list agreed only weakly."""


def why_it_came_up(
    dense_rank: int | None,
    keyword_rank: int | None,
    words: Sequence[WordMatch] = (),
    *,
    meaning_searched: bool = True,
    rerank: float | None = None,
) -> str:
    """Why a passage came up (see the module); `meaning_searched`: False when the search by
    meaning could not run (its model did not answer), `rerank`: the reranker's score."""
    m, w = dense_rank, keyword_rank
    held = [x for x in words if x.exact]
    terms = [x.word for x in held if not x.common]
    common = [x.word for x in held if x.common]
    close = None if m is None else f"close in meaning (#{m})"
    ranked = None if w is None else f"shares words (#{w})"
    listed = ranked
    if ranked is not None and held:
        listed = f"shares words (#{w}: {_quoted(terms or common)})"
    if _near(m) and _near(w):
        text = f"{close} and {ranked} — both agree"
    elif _near(w):
        apart = "not among the closest in meaning" if m is None else f"further in meaning (#{m})"
        if not meaning_searched and m is None:
            text = f"{listed}; meaning could not be searched — the embedding model did not answer"
        elif terms:
            text = f"{listed}; {apart} — it names a term of the question exactly"
        else:
            text = f"{listed}; {apart} — the words it shares are common in the base"
    elif _near(m):
        words_part = f"{listed}, further down" if ranked else "its words do not match"
        text = f"{close}; {words_part} — it says the same thing in other words"
    elif close or ranked:
        found = " and ".join(part for part in (close, listed) if part)
        text = f"{found}; neither list placed it among its first {NEAR_THE_TOP}"
    else:
        text = "found by the fused ranking"
    if rerank is not None:
        text += f"; the reranker scored it {rerank:.3f}"
    return text


def _near(rank: int | None) -> bool:
    return rank is not None and rank <= NEAR_THE_TOP


def _quoted(words: Sequence[str]) -> str:
    return ", ".join(f"“{w}”" for w in words)
