"""Honest titles: a PDF's or Word file's title is its metadata's when that is a real one, else
what the document shows as its title (a PDF's largest-font line, a Word file's Title or first
heading), never a converter's label, a placeholder or a line cut from a sentence."""

from __future__ import annotations

import pytest
from fpdf import FPDF

from metis_lite.parsing import pdf, titles

FRAGMENT = "position is that it permits the definition of new functional"


@pytest.mark.parametrize(
    ("metadata", "real"),
    [
        ("Annual Report 2025", "Annual Report 2025"),
        ("  Annual   Report ", "Annual Report"),
        ("Microsoft Word - report.docx", ""),
        ("Microsoft PowerPoint - deck.pptx", ""),
        ("thesis.tex", ""),
        ("report.pdf", ""),
        ("Untitled", ""),
        ("PowerPoint Presentation", ""),
        ("", ""),
        (None, ""),
        ("1234", ""),
        ("x" * 300, ""),
    ],
)
def test_a_metadata_title_is_kept_only_when_it_is_a_real_one(metadata, real):
    assert titles.real_metadata(metadata) == real


@pytest.mark.parametrize(
    ("line", "like"),
    [
        ("Annual Report on Water Quality", True),
        ("2. Getting started", True),
        ("Über die Quellen", True),
        ("数据库手册", True),
        (FRAGMENT, False),
        ("The results of the study and", False),
        ("Chapter 3,", False),
        ("A report on the state of the", False),
        ("ab", False),
        ("12 / 40", False),
        ("word " * 40, False),
    ],
)
def test_a_line_reads_as_a_title_only_when_it_is_not_cut_from_a_sentence(line, like):
    assert titles.title_like(line) is like


def test_a_title_is_chosen_in_order_metadata_shown_name():
    assert titles.choose("Real Title", ["Shown Title"], "file") == "Real Title"
    assert titles.choose("Microsoft Word - x.docx", ["Shown Title"], "file") == "Shown Title"
    assert titles.choose("", [FRAGMENT, "Second Choice"], "file") == "Second Choice"
    assert titles.choose(None, [FRAGMENT, ""], "file") == "file"


def _pdf(tmp_path, lines, *, metadata=None) -> bytes:
    """A one-page PDF of (text, font size) lines; `metadata`, its Info title."""
    made = FPDF()
    made.add_page()
    if metadata is not None:
        made.set_title(metadata)
    for text, size in lines:
        made.set_font("Helvetica", size=size)
        made.multi_cell(0, size * 0.6, text, new_x="LMARGIN", new_y="NEXT")
    path = tmp_path / "made.pdf"
    made.output(str(path))
    return path.read_bytes()


BODY = "The body of the document says what it has to say, line after line. " * 12


def test_a_pdf_whose_metadata_is_a_converters_label_takes_its_largest_line(tmp_path):
    data = _pdf(
        tmp_path,
        [(FRAGMENT, 10), ("Annual Report on Water Quality", 24), (BODY, 10)],
        metadata="Microsoft Word - report.docx",
    )
    assert pdf.parse(data, name="report").title == "Annual Report on Water Quality"


def test_a_pdf_keeps_a_real_metadata_title(tmp_path):
    data = _pdf(tmp_path, [("Big Words", 24), (BODY, 10)], metadata="The Real Title")
    assert pdf.parse(data, name="report").title == "The Real Title"


def test_a_title_set_large_over_two_lines_is_read_whole(tmp_path):
    data = _pdf(
        tmp_path,
        [("Water Quality in the Rivers", 24), ("of Northern Portugal", 24), (BODY, 10)],
    )
    assert (
        pdf.parse(data, name="rivers").title == "Water Quality in the Rivers of Northern Portugal"
    )


def test_a_pdf_that_starts_mid_sentence_in_one_font_is_named_by_its_file(tmp_path):
    data = _pdf(tmp_path, [(FRAGMENT, 10), (BODY, 10)])
    assert pdf.parse(data, name="chapter-3").title == "chapter-3"


def test_a_pdf_without_a_larger_font_keeps_a_first_line_that_reads_as_a_title(tmp_path):
    data = _pdf(tmp_path, [("Introduction to Sorting", 10), (BODY, 10)])
    assert pdf.parse(data, name="sorting").title == "Introduction to Sorting"
