"""snippet.snippet, word_matches and highlight_spans: the citation's few lines, the question's
words a result holds and what to highlight."""

from __future__ import annotations

import itertools
import json

import pytest
from conftest import words_only_base
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metis_lite.errors import InvalidRequest
from metis_lite.records import QuestionWords, WordMatch
from metis_lite.retrieval.snippet import (
    ELLIPSIS,
    SNIPPET_CHARS_MIN,
    held,
    highlight_spans,
    holds,
    sentences,
    snippet,
    word_matches,
)
from metis_lite.service.serialize import answer_to_json
from metis_lite.settings import COMMON_WORD_SHARE, SNIPPET_CHARS
from metis_lite.text.tokenizer import token_spans, tokens

PROPERTIES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HANDBOOK = (
    "Leave policy. Every employee gets 25 days of paid vacation per year. Vacation days must"
    " be requested through the portal at least two weeks in advance.\n\n"
    "The proxy settings are described in section 4. Configuração do proxy: use port 3128"
    " and never the old host. Error Xid 79 means the GPU fell off the bus and the node must"
    " be drained. Order PO-2231 was cancelled because the supplier never answered our"
    " questions about delivery dates, prices and the warranty terms for the replacement units."
)


def body(s: str) -> str:
    """The snippet without its "…" marks."""
    return s.removeprefix(ELLIPSIS).removesuffix(ELLIPSIS)


def flat(text: str) -> str:
    return " ".join(text.split())


# Examples


def test_a_short_text_is_returned_whole_on_one_line():
    assert (
        snippet("  Vacation:\n\n25   days\tper year. ", ["vacation"])
        == "Vacation: 25 days per year."
    )


def test_the_sentence_with_most_question_words_is_shown_and_accents_are_folded():
    s = snippet(HANDBOOK, tokens("configuracao do proxy porta 3128"))
    assert "Configuração do proxy: use port 3128 and never the old host." in s
    assert len(s) <= SNIPPET_CHARS
    assert s.startswith(ELLIPSIS) and s.endswith(ELLIPSIS)


def test_the_best_sentence_is_widened_with_the_text_after_it_then_before_it():
    s = snippet(HANDBOOK, tokens("Xid 79"))
    assert "Error Xid 79 means the GPU fell off the bus and the node must be drained." in s
    assert s.endswith("replacement units.")  # everything after it fits: no mark at the end
    assert s.startswith("…Error Xid 79")  # the sentence before it does not fit whole
    assert len(s) <= SNIPPET_CHARS


def test_whole_sentences_before_it_are_added_when_they_fit():
    text = "Filler sentence number x. " * 10 + "Short one. The answer is here."
    s = snippet(text, ["answer"], limit=50)
    assert s == "…Short one. The answer is here."  # one more filler sentence would not fit


def test_distinct_words_count_not_repeats_and_the_earliest_wins_a_tie():
    text = "Alpha alpha alpha alpha here. Alpha and beta here. Gamma and beta here. " * 4
    assert snippet(text, ["alpha", "beta"], limit=40).startswith("…Alpha and beta here.")
    tie = "Beta one. Gamma two. Beta three. " * 10
    assert snippet(tie, ["beta"], limit=20).startswith("Beta one.")


def test_no_matching_word_shows_the_beginning():
    s = snippet(HANDBOOK, tokens("kubernetes helm"))
    assert s.startswith("Leave policy. Every employee") and s.endswith(ELLIPSIS)
    assert len(s) <= SNIPPET_CHARS
    assert snippet(HANDBOOK, []).startswith("Leave policy.")


def test_a_sentence_longer_than_the_limit_gives_a_window_around_its_words():
    sentence = " ".join(["filler"] * 200 + ["the", "warranty", "terms", "apply"] + ["more"] * 200)
    s = snippet(sentence + ".", tokens("warranty terms"), limit=60)
    assert len(s) <= 60
    assert s.startswith(ELLIPSIS) and s.endswith(ELLIPSIS)
    assert "warranty terms" in s
    inner = body(s).split(" ")
    assert set(inner) <= {"filler", "the", "warranty", "terms", "apply", "more"}  # whole words


def test_the_window_holds_the_densest_group_of_question_words():
    text = "alpha " + "x " * 100 + "beta gamma alpha " + "y " * 100
    s = snippet(text, ["alpha", "beta", "gamma"], limit=40)
    assert "beta gamma alpha" in s


def test_a_word_longer_than_the_window_is_cut_inside():
    text = "a" * 1000 + "needle" + "b" * 1000
    s = snippet(text, ["needle"], limit=40)  # one 2006-letter word: "needle" is not a word of it
    assert 30 < len(s) <= 40 and s.startswith("aaa") and s.endswith("a" + ELLIPSIS)


def test_cjk_text_is_widened_at_its_sentence_ends():
    text = "前文です。" * 20 + "日本語のテキスト。" + "後文です。" * 20
    s = snippet(text, tokens("日本語のテキスト"), limit=40)
    # 2 marks + 9 characters leave 29: five more sentences of 5 fit, a sixth does not.
    assert s == "…日本語のテキスト。" + "後文です。" * 5 + "…"


def test_the_marks_count_towards_the_limit():
    text = "word " * 100
    for limit in range(SNIPPET_CHARS_MIN, 60):
        s = snippet(text, ["word"], limit=limit)
        assert len(s) <= limit and s.endswith(ELLIPSIS)
    exact = "x" * 50
    assert snippet(exact, [], limit=50) == exact


def test_every_limit_is_kept_to_the_character():
    text = "Lead in. The answer is here. And then a tail of words to widen it with. " * 3
    for limit in range(SNIPPET_CHARS_MIN, len(text) + 5):
        for terms in (["answer"], ["tail", "widen"], []):
            s = snippet(text, terms, limit=limit)
            assert len(s) <= limit, (limit, terms, s)
            assert body(s) in flat(text)


def test_a_window_cut_inside_words_on_both_sides_fills_the_limit():
    text = "x" * 300 + "-proxy-" + "y" * 300  # three words, no space to cut at
    s = snippet(text, ["proxy"], limit=40)
    assert len(s) == 40 and s.startswith("…x") and s.endswith("y…") and "-proxy-" in s


@pytest.mark.parametrize("limit", [SNIPPET_CHARS_MIN - 1, 0, -1, True, 240.0])
def test_a_limit_too_small_is_refused(limit):
    with pytest.raises(InvalidRequest):
        snippet("text", ["text"], limit=limit)


def test_raw_question_words_are_folded_too():
    assert snippet(HANDBOOK, ["Configuração"]) == snippet(HANDBOOK, ["configuracao"])


def test_sentences_cover_the_text():
    text = flat("One. Two! Three? 「引用。」四つ目。 Five… six")
    assert [text[a:b] for a, b in sentences(text)] == [
        "One.",
        "Two!",
        "Three?",
        "「引用。」",
        "四つ目。",
        "Five…",
        "six",
    ]


def test_highlight_spans_are_the_question_words_in_the_text():
    text = "Configuração do Proxy, proxy! ProxyServer. Xid 79; x-ray."
    spans = highlight_spans(text, tokens("configuracao proxy xid 79 ray x"))
    assert [text[a:b] for a, b in spans] == ["Configuração", "Proxy", "proxy", "Xid", "79", "ray"]
    assert highlight_spans(text, []) == []


# Properties

WORDS = ["proxy", "Configuração", "Xid", "79", "vacation", "日本語", "po", "2231", "a", "é"]
TEXT = st.lists(
    st.one_of(
        st.sampled_from(WORDS),
        st.text(alphabet="abcxyzÉé日本", min_size=1, max_size=30),
        st.sampled_from([" ", "  ", "\n", "\n\n", ". ", "! ", "? ", "。", "」", ".\n", "\t", "-"]),
    ),
    max_size=120,
).map("".join)
TERMS = st.lists(
    st.sampled_from(["proxy", "configuracao", "xid", "79", "vacation", "日本語"]), max_size=4
)


@PROPERTIES
@given(TEXT, TERMS, st.integers(SNIPPET_CHARS_MIN, 300))
def test_a_snippet_is_short_and_made_of_the_text(text, terms, limit):
    s = snippet(text, terms, limit=limit)
    assert len(s) <= limit
    inner = body(s)
    whole = flat(text)
    assert inner in whole
    assert inner == inner.strip()
    if not s.startswith(ELLIPSIS):
        assert whole.startswith(inner)
    if not s.endswith(ELLIPSIS):
        assert whole.endswith(inner)
    if len(whole) <= limit:
        assert s == whole


@PROPERTIES
@given(TEXT, TERMS, st.integers(40, 300))
def test_a_snippet_holds_a_question_word_when_the_text_does(text, terms, limit):
    s = snippet(text, terms, limit=limit)
    if held(frozenset(terms), tokens(text)):
        assert held(frozenset(terms), tokens(body(s))), s


def test_a_word_that_begins_with_a_question_word_counts_for_the_snippet():
    # The handbook's own question: the index does not stem, but the snippet should show the
    # sentence that answers it ("gets 25 days"), not the one that repeats "get" exactly.
    text = (
        "Every full-time employee gets 25 days of paid vacation per calendar year. "
        "Part-time employees get the same entitlement pro rata: someone who works three "
        "days a week gets 15 days. The year runs from 1 January to 31 December and the days "
        "accrue monthly, so a person who joins on 1 July has 12.5 days for their first year."
    )
    s = snippet(text, tokens("how many holidays do I get"), limit=120)
    assert s.startswith("Every full-time employee gets 25 days")
    assert held(frozenset({"holidays"}), ["holiday"]) == 1
    assert held(frozenset({"do"}), ["doctor"]) == 0  # two letters: only the word itself
    assert held(frozenset({"get"}), ["getting", "gets"]) == 1  # one question word, once


@PROPERTIES
@given(TEXT, TERMS)
def test_highlight_spans_are_ordered_words_that_fold_to_question_words(text, terms):
    spans = highlight_spans(text, terms)
    asked = {word for term in terms for word in tokens(term)}
    assert spans == sorted(spans)
    assert all(a < b <= c for (a, b), (c, _) in itertools.pairwise(spans))
    assert all(set(tokens(text[a:b])) & asked for a, b in spans)
    # Each matched word lies in one span; a span is matched words joined where they overlap
    # (the bigrams of a CJK run), so it starts where one starts and ends where one ends.
    matched = [(a, b) for a, b, word in token_spans(text) if word in asked]
    assert all(any(a <= s and e <= b for a, b in spans) for s, e in matched)
    assert all(
        any(s == a for s, _ in matched) and any(e == b for _, e in matched) for a, b in spans
    )
    assert len(spans) <= len(matched)


def test_highlight_spans_join_the_bigrams_of_a_cjk_run():
    text = "東京都の天気、京都は晴れ。Tokyo東京"
    spans = highlight_spans(text, tokens("東京都 京都 tokyo"))
    assert [text[a:b] for a, b in spans] == ["東京都", "京都", "Tokyo", "東京"]


# Holding a question word: the word, or the word with an ending


@pytest.mark.parametrize(
    ("word", "term", "holds_it"),
    [
        ("get", "get", True),
        ("gets", "get", True),
        ("get", "gets", True),
        ("holiday", "holidays", True),
        ("vacations", "vacation", True),
        ("tested", "test", True),
        ("getting", "get", False),  # a long ending on a short word: another word as often
        ("career", "car", False),
        ("doing", "do", False),  # two letters: only the word itself
        ("do", "do", True),
        ("policy", "policies", False),
    ],
)
def test_a_word_holds_a_question_word_it_is_with_an_ending(word, term, holds_it):
    assert holds(word, term) is holds_it


def asked_of(words: dict[str, tuple[int, bool]], chunks: int = 100) -> QuestionWords:
    return QuestionWords(
        tuple(words),
        chunks,
        tuple(n for n, _ in words.values()),
        tuple(common for _, common in words.values()),
    )


def test_word_matches_name_each_question_word_a_chunk_holds_and_its_forms():
    asked = asked_of({"get": (3, False), "do": (40, True), "leave": (9, False), "xid": (2, False)})
    text = "Employees get leave; each gets 25 days. Getting there: do it."
    found = word_matches(asked, text, "Handbook Leave policy")
    assert found == (
        WordMatch("get", 3, False, exact=True, forms=("get", "gets")),
        WordMatch("do", 40, True, exact=True, forms=("do",)),
        WordMatch("leave", 9, False, exact=True, forms=("leave",)),
    )
    only_forms = word_matches(asked_of({"holidays": (0, False)}), "Public holiday list")
    assert only_forms == (WordMatch("holidays", 0, False, exact=False, forms=("holiday",)),)
    in_context = word_matches(asked, "nothing here", "Xid errors")
    assert in_context == (WordMatch("xid", 2, False, exact=True, forms=()),)
    assert word_matches(QuestionWords(), text) == ()


@PROPERTIES
@given(TEXT, TERMS)
def test_word_matches_agree_with_a_word_by_word_reading(text, terms):
    """Oracle: each word of the text compared with each question word, one by one."""
    words = tuple(dict.fromkeys(w for term in terms for w in tokens(term)))
    asked = QuestionWords(words, 10, (1,) * len(words), (False,) * len(words))
    found = {m.word: m for m in word_matches(asked, text)}
    present = tokens(text)
    for word in words:
        forms = sorted({w for w in present if holds(w, word)})
        if forms:
            assert found[word].forms == tuple(forms)
            assert found[word].exact is (word in present)
        else:
            assert word not in found


# Through a search: the words each result holds, and the snippet chosen by the telling ones


def chunk_words(store, chunk_id: int) -> set[str]:
    text, title, headings = store.db.execute(
        "SELECT text, title, headings FROM chunks WHERE id = ?", (chunk_id,)
    ).fetchone()
    return set(tokens(" ".join([text, title, *json.loads(headings)])))


def test_each_result_says_which_question_words_it_holds_and_how_common_they_are(example_base):
    question = "how many holidays do I get"
    answer = example_base.search(question, mode="hybrid", top_k=10, rerank=False)
    store = example_base.store
    ids = [row[0] for row in store.db.execute("SELECT id FROM chunks")]
    held_by = {w: sum(w in chunk_words(store, i) for i in ids) for w in tokens(question)}
    assert held_by["do"] >= COMMON_WORD_SHARE * len(ids) > held_by["get"] > 0  # the oracle's view
    for result in answer.results:
        holds_words = chunk_words(store, result.chunk_id)
        for match in result.words:
            assert match.chunks == held_by[match.word]
            assert match.common is (held_by[match.word] >= COMMON_WORD_SHARE * len(ids))
            assert match.exact is (match.word in holds_words)
            assert set(match.forms) <= set(tokens(result.text))
        exact = {m.word for m in result.words if m.exact}
        assert exact == holds_words & set(tokens(question))
    vacation = answer.results[0]
    assert vacation.citation.line == 23  # "Every full-time employee gets 25 days…"
    assert vacation.words == (WordMatch("get", held_by["get"], False, True, ("get", "gets")),)
    as_json = answer_to_json(answer)["results"][0]["words"]
    assert as_json == [
        {
            "word": "get",
            "chunks": held_by["get"],
            "common": False,
            "exact": True,
            "forms": ["get", "gets"],
        }
    ]


def test_a_snippet_is_chosen_by_the_words_that_are_not_common(tmp_path):
    """ "the" is in every chunk: the snippet is the sentence with "budget", not the first one,
    which holds "the" three times (a tie of one word each, without the rule)."""
    long = (
        "The plan for the year is the one we wrote. "
        + "Filler words go on here for a while. " * 6
        + "Ask before any budget is spent."
    )
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "plan.txt").write_text(long)
    for n in range(11):
        (folder / f"note-{n}.txt").write_text(f"The note {n} says nothing else.")
    with words_only_base(tmp_path / "b.db", folder) as base:
        base.index()
        answer = base.search("the budget", mode="keyword", top_k=1, rerank=False)
    (result,) = answer.results
    assert [(m.word, m.common) for m in result.words] == [("the", True), ("budget", False)]
    assert "Ask before any budget is spent." in result.citation.snippet
    assert not result.citation.snippet.startswith("The plan")
