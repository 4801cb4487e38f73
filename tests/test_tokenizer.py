"""The word rules (docs/how-search-works.md, "Words"), hostile questions, and the FTS5 tokenizer
inside SQLite."""

from __future__ import annotations

import sys
import time
import unicodedata
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metis_lite.text import tokenizer, unicode_tables
from metis_lite.text.tokenizer import TOKENIZE, fold, fts_query, token_spans, tokens


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


def test_chinese_japanese_and_korean_become_overlapping_bigrams():
    assert tokens("東京都の天気") == ["東京", "京都", "都の", "の天", "天気"]
    assert tokens("한국어 텍스트") == ["한국", "국어", "텍스", "스트"]
    assert tokens("データベース") == ["デー", "ータ", "タベ", "ベー", "ース"]  # ー is a letter


def test_a_cjk_run_of_one_character_is_one_word_and_digits_or_latin_beside_it_are_words():
    assert tokens("東京2024年") == ["東京", "2024", "年"]
    assert tokens("Tokyo東京 COVID-19疫苗 第3回") == [
        "tokyo",
        "東京",
        "covid",
        "19",
        "疫苗",
        "第",
        "3",
        "回",
    ]
    assert tokens("「東」・「京」") == ["東", "京"]  # brackets and ・ end a run
    assert tokens("Москва2024 Pythonпрограмма") == ["москва2024", "pythonпрограмма"]  # not CJK


def test_cjk_compatibility_and_width_forms_fold_to_what_they_stand_for():
    assert (
        tokens("ｶﾀｶﾅ ｶﾞｯｺｳ")
        == tokens("カタカナ ガッコウ")
        == ["カタ", "タカ", "カナ", "ガッ", "ッコ", "コウ"]
    )
    assert tokens("\uf900\u4e00") == tokens("\u8c48\u4e00")  # a compatibility ideograph
    assert tokens("𠀋𠀋") == ["𠀋𠀋"]  # extension B, outside the BMP
    assert tokens("ㇷ゚ㇷ゚") == [
        "ㇷ゚ㇷ゚"
    ]  # a kana and its mark, with no precomposed form: one character


def test_marks_do_not_break_words():
    assert tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # Devanagari vowel signs and virama
    assert tokens("สวัสดี") == ["สวั", "วัส", "สดี"]  # Thai vowels and tone marks stay on letters
    assert tokens("தமிழ் மொழி") == ["தமிழ்", "மொழி"]


def test_japanese_voiced_marks_and_hangul_jamo_recompose():
    decomposed = "か\u3099っこう"  # が as か + the combining voiced mark
    assert tokens(decomposed) == tokens("がっこう") == ["がっ", "っこ", "こう"]
    jamo = "\u1112\u1161\u11ab\u1100\u116e\u11a8"  # 한국 as six conjoining jamo (NFD)
    assert tokens(jamo) == tokens("한국") == ["한국"]


def test_arabic_harakat_tatweel_and_letter_forms_fold():
    assert tokens("الْعَرَبِيَّةُ") == tokens("العربية") == ["العربيه"]
    assert tokens("كـتـاب") == ["كتاب"]  # tatweel
    assert tokens("أحمد إسلام آمن") == ["احمد", "اسلام", "امن"]  # hamza and madda on alef
    assert tokens("على مدرسة") == ["علي", "مدرسه"]  # alef maksura, teh marbuta


def test_hebrew_points_fold_and_maqaf_separates():
    assert tokens("שָׁלוֹם עוֹלָם") == tokens("שלום עולם") == ["שלום", "עולם"]
    assert tokens("בית\u05beספר") == ["בית", "ספר"]


def test_direction_marks_end_words_and_joiners_stay_inside():
    assert tokens("abc\u200fdef \u202eghi\u202c") == ["abc", "def", "ghi"]
    assert tokens("می\u200cخواهم") == ["میخواهم"]  # Persian ZWNJ inside a word
    assert tokens("Config\u00aduration zero\u200dwidth") == ["configuration", "zerowidth"]
    text = "\u200fشالوم\u200f x"
    spans = list(token_spans(text))
    assert [text[s:e] for s, e, _ in spans] == ["شالوم"]


def test_spans_of_bigrams_and_folded_forms_point_into_the_original_text():
    text = "東京の天気2024年"
    spans = list(token_spans(text))
    assert [(text[s:e], w) for s, e, w in spans] == [
        ("東京", "東京"),
        ("京の", "京の"),
        ("の天", "の天"),
        ("天気", "天気"),
        ("2024", "2024"),
        ("年", "年"),
    ]
    text = "ｶﾞｯｺｳ, か\u3099っこう, Cafe\u0301!"
    spans = list(token_spans(text))
    assert [(text[s:e], w) for s, e, w in spans] == [
        ("ｶﾞｯ", "ガッ"),
        ("ｯｺ", "ッコ"),
        ("ｺｳ", "コウ"),
        ("か\u3099っ", "がっ"),
        ("っこ", "っこ"),
        ("こう", "こう"),
        ("Cafe\u0301", "cafe"),
    ]


def test_thai_and_other_scripts_without_spaces_become_bigrams_of_letters_with_their_marks():
    # No dictionary: as for Chinese, bigrams let a question's word find it inside a longer run.
    assert tokens("โรงพยาบาล") == ["โร", "รง", "งพ", "พย", "ยา", "าบ", "บา", "าล"]
    run = tokens("ผมไปโรงพยาบาลเมื่อวานนี้")
    assert set(tokens("โรงพยาบาล")) <= set(run)
    assert "เมื่" in run and "นนี้" in run  # a letter keeps its vowel signs and tone marks
    assert tokens("ສະບາຍດີ") == ["ສະ", "ະບ", "ບາ", "າຍ", "ຍດີ"]  # Lao
    assert tokens("ខ្មែរ")[0].startswith("ខ្")  # Khmer: the coeng stays on its letter
    assert "မြ" in "".join(tokens("မြန်မာ"))  # Myanmar


def test_a_thai_word_finds_the_sentences_that_hold_it(tmp_path):
    from conftest import add_passages

    from metis_lite.retrieval import keyword
    from metis_lite.store import Store

    passages = [
        "ผมไปโรงพยาบาลเมื่อวานนี้ เพราะปวดหัวมาก",
        "คุณหมอที่โรงพยาบาล ใจดีมาก",
        "นักเรียนทุกคนต้องมาโรงเรียนก่อนแปดโมงเช้า",
        "รถไฟขบวนนี้ไปเชียงใหม่ ออกจากกรุงเทพตอนสองทุ่ม",
        "อาหารไทยมักมีรสเผ็ด เปรี้ยว และหวาน",
    ]
    with Store(tmp_path / "th.db", create=True) as store:
        store.add_source("docs", str(tmp_path))
        add_passages(store, passages)
        found = [hit.chunk_id for hit in keyword.search(store, "โรงพยาบาล", 5)]
        assert sorted(found[:2]) == [1, 2]
        assert keyword.search(store, "เชียงใหม่", 5)[0].chunk_id == 4


def test_version_1_rules_are_kept_for_indexes_built_by_them():
    assert tokens("東京都の天気", version=1) == ["東京都の天気"]
    assert tokens("हिन्दी भाषा", version=1) == []  # vowel signs cut it into single letters
    assert [w for *_, w in token_spans("Olá x-ray 東京", version=1)] == ["ola", "ray", "東京"]
    assert fts_query("東京の天気", version=1) == '"東京の天気"'
    assert tokens("على مدرسة", version=1) == ["على", "مدرسة"]


def test_symbols_that_fold_to_letters_make_no_words():
    # ™ folds to "tm" and ㈱ to "(株)": not words as written, so not words at all (a text
    # holding one is read run by run, and its spans and tokens still agree).
    assert tokens("™ ㈱会社 ℃") == ["会社"]
    assert [w for *_, w in token_spans("™ ㈱会社 ℃")] == ["会社"]


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
    connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{TOKENIZE}')")
    connection.execute("INSERT INTO t VALUES ('an x-ray of the NOT gate near the AND')")
    match = fts_query(question)
    if match is None:
        assert tokens(question) == []
    else:
        connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()


def test_query_finds_accented_text_in_fts5():
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{TOKENIZE}')")
    connection.execute("INSERT INTO t VALUES ('Configuração do proxy'), ('Other text')")
    rows = connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query("configuracao"),))
    assert [r[0] for r in rows] == [1]


SCRIPTS = st.text(
    # Any character, and more often the ones the rules are about: CJK and their width and
    # compatibility forms, kana voiced marks, conjoining jamo, Devanagari, Thai, Arabic, Hebrew,
    # accents, joiners, direction marks, symbols that fold to letters (™ ㈱), "_".
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Cs",)),
        st.sampled_from(
            "東京の天気年2ｶﾞｯｺかが\u3099\u309aー한국\u1100\u1161\u11a8ㄱㅏ𠀋\uf900"
            "हिन्दीภาษาไทยالْعَرَبِيَّةـأىةשָׁלוֹם\u05beCafé\u0301Aß"
            "\u200c\u200d\u00ad\u200f\u202e\u2066 _-.™㈱½\u0345"
        ),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), SCRIPTS))
def test_any_text_gives_a_safe_query_and_finds_itself(text):
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{TOKENIZE}')")
    connection.execute("INSERT INTO t VALUES (?)", (text,))
    match = fts_query(text)
    if match is not None:
        # The text must find itself: the query and the index see the same words.
        assert (
            connection.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,)).fetchone()[0]
            == 1
        )
    connection.execute("INSERT INTO t(t) VALUES ('integrity-check')")


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), SCRIPTS))
def test_tokens_are_folded_and_idempotent(text):
    for word in tokens(text):
        assert tokens(word) == [word]
        assert fold(word) == word
        assert len(word) > 1 or word.isdigit() or _is_cjk(word)


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(), SCRIPTS))
def test_spans_hold_the_same_words_as_tokens_at_offsets_into_the_text(text):
    spans = list(token_spans(text))
    assert [word for *_, word in spans] == tokens(text)
    assert [start for start, *_ in spans] == sorted(start for start, *_ in spans)
    for start, end, _ in spans:
        assert 0 <= start < end <= len(text)
        # A word starts with a letter or digit (or U+0345, a mark that folds to ι), not a mark.
        assert text[start].isalnum() or fold(text[start]).isalnum()
        assert not set(text[start:end]) & set(DIRECTION_MARKS)


DIRECTION_MARKS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _is_cjk(word: str) -> bool:
    """A letter of a script read in bigrams, by its Unicode name (Hentaigana, halfwidth Kana and
    Hangul, ideographic numbers and marks are Kana, Hangul and Han too)."""
    scripts = ("CJK", "HIRAGANA", "KATAKANA", "HANGUL", "THAI", "LAO", "KHMER", "MYANMAR")
    kin = ("HENTAIGANA", "HALFWIDTH KATAKANA", "HALFWIDTH HANGUL", "IDEOGRAPHIC", "HANGZHOU")
    kin += ("VERTICAL KANA", "VERTICAL IDEOGRAPHIC", "MASU MARK")
    return unicodedata.name(word, "").startswith(scripts + kin)


def test_a_long_run_of_one_cjk_character_is_indexed_and_searched_in_time():
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{TOKENIZE}')")
    started = time.perf_counter()
    connection.execute("INSERT INTO t VALUES (?)", ("東" * 100_000,))
    connection.execute("INSERT INTO t VALUES ('京都')")
    hits = connection.execute("SELECT rowid FROM t WHERE t MATCH ?", (fts_query("東東東"),))
    assert [r[0] for r in hits] == [1]
    spans = list(token_spans("東" * 100_000))
    assert len(spans) == 99_999 and spans[-1] == (99_998, 100_000, "東東")
    assert time.perf_counter() - started < 10.0  # ~0.3 s here


UCD = Path(__file__).resolve().parent / "fixtures" / "unicode"


def _categories(version: str) -> dict[int, str]:
    """Each assigned code point's general category in that Unicode version, from the fixture
    scripts/make_unicode_fixture.py wrote (so the check runs on any Python's Unicode)."""
    path = UCD / f"categories-{version}.txt"
    assert path.is_file(), (
        f"no {path.name}: run scripts/make_unicode_fixture.py on Unicode {version}"
    )
    out = {}
    for line in path.read_text(encoding="ascii").splitlines()[1:]:
        first, last, category = line.split()
        out.update(dict.fromkeys(range(int(first, 16), int(last, 16) + 1), category))
    return out


def test_the_unicode_tables_are_the_unicode_version_they_name():
    categories = _categories(unicode_tables.UNICODE_VERSION)
    marks = {p for a, b in unicode_tables.MARKS for p in range(a, b + 1)}
    assert marks == {p for p, category in categories.items() if category[0] == "M"}
    cjk = {p for a, b in unicode_tables.CJK_LETTERS for p in range(a, b + 1)}
    in_blocks = {p for a, b in tokenizer.CJK_RANGES for p in range(a, b + 1)}
    assert cjk == {p for p in in_blocks if categories.get(p, "Cn")[0] in "LN"}
    assert {0x6771, 0x3042, 0x30A2, 0x30FC, 0xAC00, 0xFF76, 0x2000B} <= cjk
    assert not {0x30FB, 0x3001, 0x300C} & cjk  # ・、「


def test_the_unicode_fixture_is_what_python_knows_of_that_version():
    """On a Python of the tables' version the fixture must be its unicodedata exactly; on a
    newer one, every code point it assigns is still assigned (Unicode never takes one back), and
    letters and digits are still letters and digits (str.isalnum, as the tables were made)."""
    version = unicode_tables.UNICODE_VERSION
    categories = _categories(version)
    for point in range(sys.maxunicode + 1):
        here = unicodedata.category(chr(point))
        if unicodedata.unidata_version == version:
            assert categories.get(point, "Cn") == here, hex(point)
        elif point in categories:
            assert here != "Cn", hex(point)
        if categories.get(point, "Cn")[0] in "LN":
            assert chr(point).isalnum(), hex(point)


@pytest.mark.parametrize(
    ("declaration", "version"),
    [("tokenize='metis'", 1), ("tokenize = 'metis 2'", 2), ('tokenize="metis 2"', 2), ("", 1)],
)
def test_an_index_declaration_names_its_word_rules(declaration, version):
    sql = f"CREATE VIRTUAL TABLE chunks_fts USING fts5(text, context, {declaration})"
    assert tokenizer.declared_version(sql) == version


def test_each_index_is_read_by_the_rules_it_declares():
    connection = apsw.Connection(":memory:")
    tokenizer.register(connection)
    connection.execute("CREATE VIRTUAL TABLE old USING fts5(text, tokenize='metis')")
    connection.execute(f"CREATE VIRTUAL TABLE new USING fts5(text, tokenize='{TOKENIZE}')")
    for table in ("old", "new"):
        connection.execute(f"INSERT INTO {table} VALUES ('東京都の天気 हिन्दी')")
    vocabulary = {}
    for table in ("old", "new"):
        connection.execute(f"CREATE VIRTUAL TABLE {table}_v USING fts5vocab({table}, row)")
        vocabulary[table] = [r[0] for r in connection.execute(f"SELECT term FROM {table}_v")]
    assert vocabulary["old"] == ["東京都の天気"]
    assert set(vocabulary["new"]) == {"東京", "京都", "都の", "の天", "天気", "हिन्दी"}
    with pytest.raises(ValueError, match="word rules"):
        connection.execute("CREATE VIRTUAL TABLE newer USING fts5(text, tokenize='metis 3')")


ASCII_RUNS = st.text(alphabet="aZ09 _-.,\x00\t" + tokenizer.SEPARATORS[::3], max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(ASCII_RUNS, st.text(max_size=20), SCRIPTS), max_size=12))
def test_words_of_many_texts_are_each_texts_tokens_in_turn(texts):
    for version in tokenizer.VERSIONS:
        expected = []
        for text in texts:
            expected += [*tokens(text, version=version), tokenizer.TEXT_END]
        assert tokenizer.words_of(texts, version=version) == expected


@given(ASCII_RUNS)
def test_ascii_words_are_runs_of_two_or_more_or_a_lone_digit(text):
    runs = [w for w in "".join(c if c.isalnum() else " " for c in text.lower()).split()]
    assert tokens(text) == [w for w in runs if len(w) > 1 or w.isdigit()]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="aZé09 _-.,ß" + tokenizer.SEPARATORS, max_size=60))
def test_separators_read_as_the_full_rules_read_them(text):
    assert tokens(text) == tokenizer._unicode_tokens(text)


def test_each_separator_is_no_letter_digit_or_mark_folded_or_not():
    tables = (unicode_tables.MARKS, unicode_tables.CJK_LETTERS, unicode_tables.UNSAFE)
    for c in tokenizer.SEPARATORS:
        assert not any(a <= ord(c) <= b for table in tables for a, b in table), c
        for form in (c, fold(c), unicodedata.normalize("NFKD", c)):
            assert not any(x.isalnum() or unicodedata.category(x)[0] == "M" for x in form), c
        assert tokens(f"ab{c}cd") == tokenizer._unicode_tokens(f"ab{c}cd") == ["ab", "cd"]
