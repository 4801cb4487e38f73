"""plain.plain_text: a Markdown chunk as a reader sees it, the text of every other kind as it is."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metis_lite.text.chunking import CHUNK_CHARS_MAX
from metis_lite.text.plain import BULLET, CELL_SEPARATOR, markdown_text, plain_text

PROPERTIES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_inline_code_emphasis_and_strikethrough_keep_only_their_text():
    text = "Use `git config` **always**, *never* __twice__, _once_ and ~~old~~ new."
    assert markdown_text(text) == "Use git config always, never twice, once and old new."


def test_code_is_kept_as_written_even_when_it_looks_like_markup():
    assert markdown_text("Paths (`*.lumen.internal`, `a_b_c`) stay.") == (
        "Paths (*.lumen.internal, a_b_c) stay."
    )
    assert markdown_text("`` a `tick` here ``") == "a `tick` here"
    assert markdown_text("snake_case_name and 2 * 3 * 4") == "snake_case_name and 2 * 3 * 4"


def test_links_and_images_keep_their_text():
    text = (
        "See [the guide](https://x.example/g) and ![a chart](c.png), [ref][1], <https://a.example>."
    )
    assert markdown_text(text) == "See the guide and a chart, ref, https://a.example."
    assert markdown_text("[1]: https://x.example/g") == ""  # a reference definition is not text


def test_headings_quotes_and_bullets_lose_their_markers():
    text = "## Claiming expenses ##\n> Quoted line\n- one\n* two\n+ three\n  - nested\n1. first"
    assert markdown_text(text).split("\n") == [
        "Claiming expenses",
        "Quoted line",
        f"{BULLET} one",
        f"{BULLET} two",
        f"{BULLET} three",
        f"  {BULLET} nested",
        "1. first",
    ]
    assert markdown_text("#hashtag is not a heading") == "#hashtag is not a heading"


def test_a_table_becomes_its_cells_row_by_row():
    text = (
        "| City   | Hotel, per night | Meals |\n"
        "|--------|:----------------:|------:|\n"
        "| Lisbon | €140             | €45   |\n"
        "| `Porto` | **€120**        | €40.  |"
    )
    assert markdown_text(text).split("\n") == [
        f"City{CELL_SEPARATOR}Hotel, per night{CELL_SEPARATOR}Meals.",
        f"Lisbon{CELL_SEPARATOR}€140{CELL_SEPARATOR}€45.",
        f"Porto{CELL_SEPARATOR}€120{CELL_SEPARATOR}€40.",
    ]


def test_a_table_without_outer_pipes_and_a_chunk_starting_inside_one():
    assert markdown_text("a | b\n--|--\n1 | 2") == "a · b.\n1 · 2."
    assert markdown_text("| Porto | €120 |\n| London | £190 |") == "Porto · €120.\nLondon · £190."
    assert markdown_text("cats | dogs are words") == "cats | dogs are words"  # no table here


def test_fences_go_and_their_lines_stay_as_written():
    text = "Before:\n```bash\n# a comment, not a heading\nexport A=`b`\n```\nAfter **it**."
    assert markdown_text(text) == "Before:\n# a comment, not a heading\nexport A=`b`\nAfter it."
    assert markdown_text("~~~\n| not | a table |\n~~~") == "| not | a table |"


def test_breaks_escapes_and_character_references():
    assert markdown_text("one\n---\n***\ntwo") == "one\ntwo"
    assert markdown_text(r"\*not emphasis\* and \`no code\`") == "*not emphasis* and `no code`"
    assert markdown_text("Fish &amp; chips&nbsp;now &#233;t&#xE9; &bogus;") == (
        "Fish & chips\xa0now été &bogus;"
    )


def test_only_markdown_is_read_as_markdown():
    text = "**bold** | `code` | # not a heading"
    assert plain_text(text, "md") != text
    for kind in ("txt", "html", "pdf", "docx", "note"):
        assert plain_text(text, kind) == text


def test_the_handbook_travel_table_reads_as_text(example_base):
    answer = example_base.search("hotel per night in Lisbon", mode="keyword", top_k=3, rerank=False)
    table = next(r for r in answer.results if "Lisbon      | €140" in r.text)
    assert f"Lisbon{CELL_SEPARATOR}€140{CELL_SEPARATOR}€45." in table.citation.snippet
    assert "|" not in table.citation.snippet and "---" not in table.citation.snippet
    assert "| Lisbon      | €140" in table.text  # the chunk itself is kept as indexed


def test_no_snippet_of_the_handbook_shows_markdown_syntax(example_base):
    for question in ("proxy lumen internal porta", "handbook organised policies people"):
        answer = example_base.search(question, mode="keyword", top_k=10, rerank=False)
        markdown = [r for r in answer.results if r.citation.kind == "md"]
        assert any("`" in r.text for r in markdown), question  # the chunks hold code spans
        for result in markdown:
            assert "`" not in result.citation.snippet, result.citation.snippet
            assert not result.citation.snippet.lstrip("…").startswith(("- ", "#")), result


# Properties

PIECES = st.one_of(
    st.sampled_from(
        ["`", "``", "*", "**", "_", "__", "~~", "[", "]", "(", ")", "!", "|", "#", "> ", "- ", "\\"]
    ),
    st.sampled_from(["word", "Configuração", "x_y", "79", "東京", " ", "  ", "\n", "\n\n", "---"]),
    st.text(alphabet="ab |*_`-", min_size=1, max_size=6),
)
MARKDOWN = st.lists(PIECES, max_size=60).map("".join)


def letters(text: str) -> str:
    return "".join(c for c in text if c.isalnum())


def in_order(part: str, whole: str) -> bool:
    """Whether `part` is `whole` with some characters left out."""
    rest = iter(whole)
    return all(c in rest for c in part)


@PROPERTIES
@given(MARKDOWN)
def test_markdown_text_invents_no_letter_and_drops_none_of_the_prose(text):
    """The plain text's letters are the Markdown's, in order, some left out (link targets,
    fence lines, reference definitions); with none of those, none is left out. Syntax goes,
    words stay (`*a*b` is read as "ab", as CommonMark shows it)."""
    plain = markdown_text(text)
    assert in_order(letters(plain), letters(text))
    if not any(c in text for c in "[]()`~\\") and "---" not in text:
        assert letters(plain) == letters(text)


@PROPERTIES
@given(MARKDOWN)
def test_markdown_text_keeps_the_lines(text):
    """Lines are dropped (fences, delimiter rows, breaks) but never joined or split."""
    assert len(markdown_text(text).split("\n")) <= len(text.split("\n"))


@pytest.mark.parametrize(
    "unit", ["*a ", "_a ", "~~a ", "**a ", "__a ", "[", "[a](", "[a][", "` a ", "``a", "|", "|a|\n"]
)
def test_a_whole_chunk_of_unclosed_markup_is_read_in_one_pass(unit):
    """The largest chunk a base allows, made of marks that never close: each mark's try ends at
    the next one (no pattern may hold its own closing mark), so this reads in one pass; a
    pattern that scanned on to the end from every mark would take minutes here."""
    text = unit * (CHUNK_CHARS_MAX // len(unit))
    plain = markdown_text(text)
    assert in_order(letters(plain), letters(text))
    assert len(plain) <= len(text) + text.count("\n") + 1
