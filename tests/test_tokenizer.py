"""The spec's "By words" rules, hostile questions, and the FTS5 tokenizer inside SQLite."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metis_lite import tokenizer
from metis_lite.tokenizer import fold, fts_query, token_spans, tokens


def test_lower_case_and_accents_folded():
    assert tokens("Configuração do Proxy") == ["configuracao", "do", "proxy"]
    assert fold("ÉCOLE Ação") == "ecole acao"


def test_one_letter_alone_left_out_one_digit_kept():
    assert tokens("step 2 of a plan") == ["step", "2", "of", "plan"]


def test_a_word_is_a_run_of_letters_and_digits():
    assert tokens("Xid 79, nvidia-smi, PO-2231") == ["xid", "79", "nvidia", "smi", "po", "2231"]
    assert tokens("don't 3.14") == ["don", "3", "14"]


def test_no_stemming_no_stop_words():
    assert tokens("the travelling traveller") == ["the", "travelling", "traveller"]


def test_scripts_without_spaces_stay_one_run():
    assert tokens("東京都の天気") == ["東京都の天気"]


def test_spans_point_into_the_original_text():
    text = "Olá, Configuração x-ray"
    spans = list(token_spans(text))
    assert [text[s:e] for s, e, _ in spans] == ["Olá", "Configuração", "ray"]
    assert [w for *_, w in spans] == ["ola", "configuracao", "ray"]


@pytest.mark.parametrize(
    "question",
    [
        "x-ray",
        "don't",
        "AND NOT",
        "NEAR(",
        '"unbalanced',
        "a:b",
        "*",
        "(",
        ")",
        "-",
        "^",
        "",
        "   ",
        "OR OR OR",
        "col:term",
        '"" ""',
        "NOT",
        "\x00",
        "🙂🙂",
    ],
)
def test_hostile_questions_never_raise(question):
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='metis')")
    connection.execute("INSERT INTO t VALUES ('an x-ray of the NOT gate near the AND')")
    match = fts_query(question)
    if match is None:
        assert tokens(question) == []
    else:
        connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()


def test_query_finds_accented_text_in_fts5():
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='metis')")
    connection.execute("INSERT INTO t VALUES ('Configuração do proxy'), ('Other text')")
    rows = connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query("configuracao"),))
    assert [r[0] for r in rows] == [1]


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_gives_a_safe_query(text):
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(text, tokenize='metis')")
    connection.execute("INSERT INTO t VALUES (?)", (text,))
    match = fts_query(text)
    if match is not None:
        # The text must find itself: the query and the index see the same words.
        assert (
            connection.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,)).fetchone()[0]
            == 1
        )


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_tokens_are_folded_and_idempotent(text):
    words = tokens(text)
    for word in words:
        assert tokens(word) == [word]
        assert len(word) > 1 or word.isdigit()
