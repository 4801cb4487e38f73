"""chunking.chunk: cuts inside sections, at the best break, with each chunk's citation."""

from __future__ import annotations

import itertools
import re

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.parsing import parse
from metis_lite.records import Document, Section
from metis_lite.settings import CHUNK_CHARS
from metis_lite.text.chunking import (
    BREAKS,
    CHUNK_CHARS_MAX,
    CHUNK_CHARS_MIN,
    FRAGMENT_PARTS,
    LONE_FRAGMENT_CHARS,
    chunk,
    spans,
)

PROPERTIES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def doc(*sections: Section, title: str = "Handbook") -> Document:
    return Document(title=title, kind="md", sections=sections)


def offsets(text: str, chunks) -> list[int]:
    """Where each chunk starts in `text`, found in order; asserts only whitespace lies between."""
    found, pos = [], 0
    for c in chunks:
        start = text.find(c.text, pos)
        assert start >= 0, c.text
        assert text[pos:start].strip() == "", "text lost between chunks"
        found.append(start)
        pos = start + len(c.text)
    assert text[pos:].strip() == "", "text lost after the last chunk"
    return found


def paragraph(n: int, words: int = 12) -> str:
    return " ".join(f"p{n}w{i}" for i in range(words)) + "."


# Examples


def test_a_section_that_fits_is_one_chunk_stripped_and_unchanged_inside():
    text = "\n\n  Vacation:   25 days\tper year.\n\nAsk your  manager.  \n"
    [only] = chunk(doc(Section(text=text, headings=("Leave",), start_line=3)))
    assert only.text == "Vacation:   25 days\tper year.\n\nAsk your  manager."
    assert (only.title, only.headings, only.page, only.line) == ("Handbook", ("Leave",), None, 5)


def test_paragraphs_are_packed_greedily_while_they_fit():
    paras = [f"P{n:02d}" + " lorem" * 47 + "." for n in range(10)]  # 286 characters each
    text = "\n\n".join(paras)
    chunks = chunk(doc(Section(text=text)), chunk_size=1000)
    assert 3 * 286 + 2 * 2 <= 1000 < 4 * 286 + 3 * 2  # three paragraphs fit, four do not
    assert [c.text for c in chunks] == ["\n\n".join(paras[i : i + 3]) for i in range(0, 10, 3)]


def test_a_long_markdown_section_is_cut_at_paragraphs_then_sentences_then_words():
    long_paragraph = " ".join(f"Sentence {i} says something about the proxy." for i in range(60))
    words = [f"word{i}" for i in range(400)]  # a paragraph with no sentence end at all
    text = "\n\n".join(["Short intro.", long_paragraph, "Between.", " ".join(words), "The end."])
    chunks = chunk(doc(Section(text=text, headings=("Guide", "Proxy"))), chunk_size=300)
    texts = [c.text for c in chunks]
    offsets(text, chunks)
    assert all(
        len(t) <= 300 and c.headings == ("Guide", "Proxy")
        for t, c in zip(texts, chunks, strict=True)
    )
    # The next paragraph does not fit, and the intro alone would be a fragment: it is joined to
    # the paragraph's first sentences.
    assert texts[0].startswith("Short intro.\n\nSentence 0 says") and texts[0].endswith("proxy.")
    between = next(i for i, t in enumerate(texts) if "Between." in t)
    assert between > 2
    assert all(t.endswith("proxy.") for t in texts[:between])  # cut at sentence ends
    assert texts[between].endswith("proxy.\n\nBetween.")  # packed with what follows
    in_words = [w for t in texts[between + 1 :] for w in t.split()]
    assert in_words == [*words, "The", "end."]  # cut between words, none split
    assert texts[-1].endswith("\n\nThe end.")


MARKER = "[[Page 115 STAT. 301]]"


def statute_paragraph(n: int, words: int) -> str:
    """A paragraph of a statute as a <pre> holds it: hard-wrapped lines, one sentence per
    clause."""
    clauses = [
        f"({chr(97 + i % 26)}) the Secretary shall report on item {n}-{i}." for i in range(words)
    ]
    text, line = [], ""
    for word in " ".join(clauses).split():
        if len(line) + len(word) > 68:
            text.append(line)
            line = ""
        line = f"{line} {word}".strip()
    return "\n".join([*text, line])


def test_a_page_marker_before_a_long_paragraph_is_joined_to_it_not_a_chunk_alone():
    # The shape that made `[[Page 115 STAT. 301]]` a chunk of its own: a paragraph that ends
    # just before the window does, the marker, then a paragraph too long to join whole.
    first = statute_paragraph(1, 30)[:1195].rsplit(" ", 1)[0] + "."
    long = statute_paragraph(2, 60)
    assert 1200 - len(MARKER) < len(first) < 1200 < len(long)
    text = "\n\n".join([first, MARKER, long, "SEC. 302. REPORTS.", statute_paragraph(3, 40)])
    chunks = chunk(doc(Section(text=text)))
    offsets(text, chunks)
    assert chunks[0].text == first
    assert chunks[1].text.startswith(MARKER + "\n\n(a) the Secretary")
    assert chunks[1].text.endswith(".")  # joined to the paragraph's first sentences
    assert all(len(c.text) >= CHUNK_CHARS // FRAGMENT_PARTS for c in chunks)


def test_the_last_line_of_a_section_is_not_left_alone_after_its_last_cut():
    body = statute_paragraph(4, 30)[:1190].rsplit(" ", 1)[0] + "."
    text = f"{body}\n\n{MARKER}"
    assert 1200 - len(MARKER) < len(body) < 1200 < len(text)
    chunks = chunk(doc(Section(text=text)))
    offsets(text, chunks)
    assert chunks[-1].text.endswith(MARKER) and chunks[-1].text != MARKER
    assert all(len(c.text) >= CHUNK_CHARS // FRAGMENT_PARTS for c in chunks)


def test_a_lone_fragment_section_joins_the_next_passage_with_its_own_heading():
    # `<h3>Parte 1</h3><p>Página 3</p>` and a Markdown section saying only "Ver abajo." were
    # chunks of their own: their vectors mostly their headings, they came first by meaning.
    html = chunk(parse(FIXTURES / "fragments" / "page.html"))
    assert len(html) == 1
    assert html[0].text.startswith("Parte 1\nPágina 3\n\nLa dirección asistida del vehículo")
    assert html[0].headings == ("Manual", "Sección A", "Parte 2")
    markdown = chunk(parse(FIXTURES / "fragments" / "guide.md"))
    assert [c.text.split("\n\n")[0] for c in markdown] == ["Capítulo 2\nVer abajo."]
    assert markdown[0].headings[-1] == "Normas de circulación"
    assert markdown[0].line == 7  # where "Ver abajo." is, the chunk's first line of text
    assert all(len(c.text) >= LONE_FRAGMENT_CHARS for c in html + markdown)


def test_lone_fragments_at_the_end_join_the_passage_before_and_alone_stay_a_chunk():
    passage = statute_paragraph(5, 3)
    after = chunk(
        doc(
            Section(passage, headings=("Guide",), start_line=3),
            Section("See below.", headings=("Guide", "Notes"), start_line=9),
        )
    )
    assert [(c.text, c.headings, c.line) for c in after] == [
        (f"{passage}\n\nNotes\nSee below.", ("Guide",), 3)
    ]
    fragments = chunk(doc(Section(MARKER, headings=("A",)), Section("Ver abajo.", headings=("B",))))
    assert [c.text for c in fragments] == [f"{MARKER}\n\nB\nVer abajo."]
    assert [c.text for c in chunk(doc(Section(text=MARKER)))] == [MARKER]  # all there is


def test_a_long_section_after_a_fragment_keeps_its_own_lines_and_pages():
    long = "\n\n".join(paragraph(n, 40) for n in range(8))
    chunks = chunk(
        doc(
            Section("Página 3", headings=("H", "Parte 1"), page=3, start_line=5),
            Section(long, headings=("H", "Parte 2"), page=4, start_line=20),
        ),
        chunk_size=600,
    )
    assert len(chunks) > 2
    assert (chunks[0].page, chunks[0].line) == (3, 5)  # it starts with the fragment
    assert chunks[0].text.startswith("Parte 1\nPágina 3\n\n" + paragraph(0, 40))
    for c in chunks[1:]:
        assert (c.page, c.line) == (4, 20 + long.count("\n", 0, long.index(c.text)))
    assert all(len(c.text) <= 600 for c in chunks)


LONE = ["Página 3", "See below.", MARKER, "Figure 2: the bus."]
"""Lone fragments no random section text can equal (their letters are not PIECES')."""


@st.composite
def documents(draw) -> Document:
    """Sections of a document, some lone fragments (a page marker, a pointer), some long."""
    lone = st.sampled_from(LONE).map(lambda t: Section(t))
    chosen = draw(st.lists(st.one_of(lone, sections()), min_size=1, max_size=6))
    return doc(
        *(
            Section(s.text, (f"H{n}",), s.page, s.start_line if s.start_line else n + 1)
            for n, s in enumerate(chosen)
        )
    )


@PROPERTIES
@given(documents(), st.integers(CHUNK_CHARS_MIN, 600))
def test_no_chunk_is_a_lone_fragment_and_no_section_loses_text(document, size):
    chunks = chunk(document, chunk_size=size)

    def squeezed(text: str) -> str:
        return re.sub(r"\s+", "", text)

    joined, at = squeezed("".join(c.text for c in chunks)), 0
    for section in document.sections:  # each section's text, in order, whole
        found = joined.find(squeezed(section.text), at)
        assert found >= 0
        at = found + len(squeezed(section.text))
    assert all(len(c.text) <= size for c in chunks)
    # Where a cut leaves at least a fragment with its heading on either side (chunk_size / 8
    # past the longest: here 45 characters), no chunk is a lone fragment alone, with or
    # without its heading, unless its document holds nothing else.
    if size // FRAGMENT_PARTS >= 45 and sum(1 for s in document.sections if s.text.strip()) > 1:
        for c in chunks:
            lines = c.text.split("\n")
            assert c.text not in LONE and not (len(lines) == 2 and lines[1] in LONE), c.text


def test_a_statute_in_a_pre_keeps_its_page_markers_inside_passages():
    # A US statute as GPO publishes it: one <pre>, hard-wrapped, a page marker between
    # paragraphs. Cut at its blank lines alone, two markers were chunks of their own.
    document = parse(FIXTURES / "ranking" / "statute-pre.htm")
    chunks = chunk(document)
    markers = [c for c in chunks if "[[Page 115 STAT." in c.text]
    assert len(markers) >= 9  # thirteen markers, some two to a chunk
    assert all(len(c.text) >= CHUNK_CHARS // FRAGMENT_PARTS for c in chunks)
    assert "[[Page 115 STAT. 281]]" in "".join(c.text for c in chunks)


def test_a_5000_character_word_is_cut_mid_word_only_as_a_last_resort():
    word = "".join(chr(ord("a") + i % 26) for i in range(5000))
    before = "Before the word, a sentence long enough to stand alone as a passage: " * 3
    text = f"{before.strip()}\n\n{word} after it."
    chunks = chunk(doc(Section(text=text)), chunk_size=1200)
    assert chunks[0].text == before.strip()
    assert [len(c.text) for c in chunks[1:5]] == [1200, 1200, 1200, 1200]
    assert "".join(c.text for c in chunks[1:6]).startswith(word)
    assert chunks[-1].text.endswith("after it.")
    # A line too short to stand alone goes with the word's first piece, cut at the size.
    short = chunk(doc(Section(text=f"Before the word.\n\n{word}")), chunk_size=1200)
    assert short[0].text.startswith("Before the word.\n\nabc") and len(short[0].text) == 1200


def test_a_hard_cut_keeps_an_accent_on_its_letter():
    text = "e\u0301" * 3000  # "é" written as e + combining acute accent, no space anywhere
    chunks = chunk(doc(Section(text=text)), chunk_size=101)
    assert all(not c.text.startswith("\u0301") for c in chunks)
    assert "".join(c.text for c in chunks) == text


def test_cjk_text_without_spaces_is_cut_after_its_sentence_ends():
    sentence = "本手册说明休假政策和代理配置。"  # 15 characters, no spaces
    text = sentence * 40
    chunks = chunk(doc(Section(text=text)), chunk_size=100)
    assert all(c.text.endswith("。") and len(c.text) <= 100 for c in chunks)
    assert [len(c.text) for c in chunks[:-1]] == [90] * (len(chunks) - 1)
    assert "".join(c.text for c in chunks) == text


def test_cjk_without_any_break_is_cut_at_the_size():
    text = "日本語のテキスト" * 100
    chunks = chunk(doc(Section(text=text)), chunk_size=100)
    assert [len(c.text) for c in chunks] == [100] * 8
    assert "".join(c.text for c in chunks) == text


def test_a_numbered_list_is_not_cut_after_its_item_numbers():
    items = "\n".join(f"{n}. Item number {n} of the checklist" for n in range(1, 30))
    chunks = chunk(doc(Section(text=items)), chunk_size=150)
    for c in chunks:
        assert re.match(r"\d+\. Item", c.text), c.text
        assert not re.search(r"\n\d+\.$", c.text), c.text


def test_a_closing_quote_stays_with_its_sentence():
    text = ('He said "stop here." ' * 10) + "x" * 90
    chunks = chunk(doc(Section(text=text)), chunk_size=100)
    assert chunks[0].text.endswith('here."')


def test_chunks_never_cross_a_section_and_keep_its_citation():
    # Sections that are passages (a lone fragment joins its neighbour: tests above).
    one, two, three = paragraph(1), paragraph(2), paragraph(3)
    first = Section(text=f"{one}\n\n{two}", headings=("A",), page=1)
    second = Section(text=three, headings=("A", "B"), page=2)
    chunks = chunk(doc(first, second, title="Report"))
    assert [(c.text, c.headings, c.page, c.line) for c in chunks] == [
        (f"{one}\n\n{two}", ("A",), 1, None),
        (three, ("A", "B"), 2, None),
    ]
    assert {c.title for c in chunks} == {"Report"}


def test_line_numbers_match_a_hand_written_section():
    # Line 20 of the file is the section's first line.
    text = (
        "Alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha.\n"  # 20
        "\n"  # 21
        "Bravo bravo bravo bravo bravo bravo bravo bravo bravo bravo bravo bravo bravo.\n"  # 22
        "Charlie charlie charlie charlie charlie charlie charlie charlie charlie charlie.\n"  # 23
        "\n"  # 24
        "\n"  # 25
        "Delta delta delta delta delta delta delta delta delta delta delta delta delta.\n"  # 26
        "Echo echo echo echo echo. Foxtrot foxtrot foxtrot foxtrot foxtrot foxtrot foxtrot."  # 27
    )
    chunks = chunk(doc(Section(text=text, start_line=20)), chunk_size=100)
    assert [(c.line, c.text.split()[0]) for c in chunks] == [
        (20, "Alpha"),
        (22, "Bravo"),
        (23, "Charlie"),
        (26, "Delta"),
        (27, "Echo"),
    ]


def test_empty_and_blank_sections_give_no_chunk():
    sections = (Section(text=""), Section(text=" \n\n\t "), Section(text="Kept.", start_line=9))
    assert [(c.text, c.line) for c in chunk(doc(*sections))] == [("Kept.", 9)]
    assert chunk(doc()) == []


@pytest.mark.parametrize(
    "size", [CHUNK_CHARS_MIN - 1, CHUNK_CHARS_MAX + 1, 0, -5, True, 1200.0, "1200"]
)
def test_a_chunk_size_out_of_range_is_refused(size):
    with pytest.raises(InvalidRequest, match="chunk size"):
        chunk(doc(Section(text="text")), chunk_size=size)


def test_the_range_ends_and_the_default_are_accepted():
    text = "word " * 30_000
    assert (
        max(len(c.text) for c in chunk(doc(Section(text=text)), chunk_size=CHUNK_CHARS_MIN)) <= 100
    )
    assert len(chunk(doc(Section(text=text)), chunk_size=CHUNK_CHARS_MAX)) == 2
    assert max(len(c.text) for c in chunk(doc(Section(text=text)))) <= CHUNK_CHARS


def test_break_preferences_are_a_table_in_the_spec_order():
    assert [b.name for b in BREAKS] == ["paragraph", "sentence", "line", "word"]


def test_huge_sections_finish_linearly():
    # No timing assertion: a quadratic chunker would not finish these within the test run.
    tiny = "a\n\n" * 1_000_000
    assert len(spans(tiny, 1200)) == 2500
    line = "x" * 10_000_000
    assert len(spans(line, 1200)) == 8334
    words = "word " * 2_000_000
    assert len(spans(words, 1200)) == 8334


# Properties

PIECES = st.one_of(
    st.text(alphabet="abcxyzÉé日本\u0301", min_size=1, max_size=250),
    st.sampled_from(
        [" ", "  ", "\n", "\n\n", "\n \n", "\n\n\n", ". ", "! ", "? ", "。", "」", ".\n", "\t"]
        + ["\u00a0", "\u3000", "\u2028", "1. ", "\n12. ", '." ', ".) ", "…"]
    ),
)


@st.composite
def sections(draw) -> Section:
    text = "".join(draw(st.lists(PIECES, max_size=60)))
    start_line = draw(st.none() | st.integers(1, 10_000))
    return Section(
        text=text, headings=("H",), page=draw(st.none() | st.integers(1, 9)), start_line=start_line
    )


@PROPERTIES
@given(st.lists(sections(), max_size=4), st.integers(CHUNK_CHARS_MIN, 400))
def test_chunks_are_small_stripped_ordered_disjoint_and_lose_nothing(section_list, size):
    for section in section_list:
        chunks = chunk(doc(section), chunk_size=size)
        starts = offsets(section.text, chunks)
        for c, start in zip(chunks, starts, strict=True):
            assert 0 < len(c.text) <= size
            assert c.text == c.text.strip()
            assert (c.title, c.headings, c.page) == ("Handbook", section.headings, section.page)
            expected_line = (
                None
                if section.start_line is None
                else section.start_line + section.text.count("\n", 0, start)
            )
            assert c.line == expected_line


@PROPERTIES
@given(sections(), st.integers(CHUNK_CHARS_MIN, 400))
def test_no_cut_leaves_a_fragment_before_or_after_it(section, size):
    text = section.text
    pairs = spans(text, size)
    shortest = size // FRAGMENT_PARTS
    for (start, _), (following, _) in itertools.pairwise(pairs):
        assert following - start >= shortest  # a chunk and the whitespace after it
    if len(pairs) > 1:
        assert len(text.rstrip()) - pairs[-2][1] >= shortest  # what follows the last cut


@PROPERTIES
@given(sections(), st.integers(CHUNK_CHARS_MIN, 300))
def test_a_word_is_cut_only_when_no_whitespace_is_in_reach(section, size):
    text = section.text
    cjk_end = "。！？｡」』”’）)"
    pairs = spans(text, size)
    shortest = size // FRAGMENT_PARTS
    last_cut = len(text.rstrip()) - shortest
    for (start, end), (following, _) in itertools.pairwise(pairs):
        if end == following and text[end - 1] not in cjk_end:
            # A cut nearer than a fragment's length to the chunk's start or to the section's
            # end would leave a fragment: whitespace there does not count.
            window = text[start + shortest : min(start + size, last_cut) + 1]
            assert not any(ch.isspace() for ch in window), (start, end)


@PROPERTIES
@given(
    st.lists(st.integers(1, 60), min_size=1, max_size=40),
    st.integers(CHUNK_CHARS_MIN, 500),
)
def test_no_two_chunks_ending_at_paragraphs_could_have_been_one(word_counts, size):
    text = "\n\n".join(paragraph(n, words) for n, words in enumerate(word_counts))
    pairs = spans(text, size)
    for (start, _), (_, end) in itertools.pairwise(pairs):
        if end == len(text) or text.startswith("\n\n", end):
            assert end - start > size


def test_a_page_marker_under_its_own_heading_does_not_win_by_meaning(tmp_path):
    # "dirección" put `<p>Página 3</p>` (its vector mostly "Manual de la dirección > … > Parte
    # 1") and a section saying only "Ver abajo." above the passage on "la dirección asistida".
    with Base(tmp_path / "fragments.db", create=True) as base:
        base.add_source(FIXTURES / "fragments")
        assert base.index().without_vector == 0
        for mode in ("hybrid", "dense"):
            results = base.search("dirección", mode=mode).results
            assert "La dirección asistida" in results[0].text, mode
            assert all(len(r.text) >= LONE_FRAGMENT_CHARS for r in results)
