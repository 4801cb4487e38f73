"""Charsets as browsers read them (parsing/charset.py): the byte-order mark, then the page's
declaration, then UTF-8 when the bytes are valid UTF-8, then Windows-1252 — checked against
text written by hand in each encoding, and end to end through the HTML and text parsers."""

from __future__ import annotations

import codecs

import pytest

from metis_lite.parsing import parser_for
from metis_lite.parsing.charset import (
    PRESCAN_BYTES,
    codec_for_label,
    declared_charset,
    decode_plain,
    html_utf8,
)

SPANISH = "Los niños están de razón: 5 € por café"


def page(body: str, head: str = "") -> str:
    return (
        f"<!DOCTYPE html><html><head>{head}<title>t</title></head><body><p>{body}</p></body></html>"
    )


def html_text(data: bytes) -> str:
    return " ".join(s.text for s in parser_for("html")(data, name="x").sections)


def test_utf8_without_a_declaration_is_read_as_utf8():
    """A Spanish page in UTF-8 with no charset declared, read as Windows-1252 before
    ("estÃ¡n de razÃ³n")."""
    assert html_text(page(SPANISH).encode("utf-8")) == SPANISH


def test_windows_1252_without_a_declaration_is_read_as_windows_1252():
    raw = page(SPANISH).encode("cp1252")
    assert b"est\xe1n" in raw and b"\x80" in raw
    assert html_text(raw) == SPANISH


@pytest.mark.parametrize(
    ("bom", "encoding"),
    [
        (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"),
        (codecs.BOM_UTF16_BE, "utf-16-be"),
        (codecs.BOM_UTF32_LE, "utf-32-le"),
        (codecs.BOM_UTF32_BE, "utf-32-be"),
    ],
)
def test_a_bom_wins_over_any_declaration(bom, encoding):
    raw = bom + page(SPANISH, '<meta charset="windows-1252">').encode(encoding)
    assert html_text(raw) == SPANISH


@pytest.mark.parametrize(
    "head",
    [
        '<meta charset="windows-1252">',
        "<meta charset=windows-1252>",
        "<META CHARSET='Windows-1252'>",
        '<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">',
        "<meta content='text/html;charset=iso-8859-1' http-equiv=content-type>",
        '<meta name="viewport" content="width=device-width"><meta charset="latin1">',
    ],
)
def test_a_declared_charset_is_read(head):
    assert html_text(page(SPANISH, head).encode("cp1252")) == SPANISH


def test_the_xml_declaration_is_read_when_no_meta_declares():
    raw = ('<?xml version="1.0" encoding="ISO-8859-1"?>' + page(SPANISH)).encode("cp1252")
    assert html_text(raw) == SPANISH


def test_other_legacy_encodings_by_their_labels():
    russian = "Привет, мир"
    raw = page(russian, '<meta charset="windows-1251">').encode("cp1251")
    assert html_text(raw) == russian
    japanese = "日本語のテキスト"
    raw = page(japanese, '<meta charset="shift_jis">').encode("cp932")
    assert html_text(raw) == japanese


@pytest.mark.parametrize(
    ("label", "codec"),
    [
        ("iso-8859-1", "cp1252"),  # WHATWG: Latin-1 labels mean Windows-1252
        ("US-ASCII", "cp1252"),
        (" latin1 ", "cp1252"),
        ("iso-8859-9", "cp1254"),
        ("gb2312", "gbk"),
        ("shift_jis", "cp932"),
        ("euc-kr", "cp949"),
        ("utf-16", "utf-8"),  # declared in bytes that parsed as ASCII: it cannot be UTF-16
        ("utf-16le", "utf-8"),
        ("x-user-defined", "cp1252"),
        ("koi8-r", "koi8-r"),
        ("utf8", "utf-8"),
        ("base64", None),  # a codec Python knows, but no text encoding
        ("utf-7", None),
        ("rot13", None),
        ("no-such-charset", None),
        ("", None),
    ],
)
def test_labels_are_read_as_the_encoding_standard_reads_them(label, codec):
    assert codec_for_label(label) == codec


def test_an_unknown_or_hostile_declaration_is_ignored():
    for head in ('<meta charset="base64">', '<meta charset="utf-7">', '<meta charset="bogus">'):
        assert html_text(page(SPANISH, head).encode("utf-8")) == SPANISH
        assert html_text(page(SPANISH, head).encode("cp1252")) == SPANISH


def test_a_utf16_declaration_without_a_bom_reads_as_utf8():
    assert html_text(page(SPANISH, '<meta charset="utf-16">').encode("utf-8")) == SPANISH


def test_only_the_first_1024_bytes_are_looked_at_and_comments_are_not():
    filler = "<!-- " + "x" * PRESCAN_BYTES + " -->"
    late = page(SPANISH, filler + '<meta charset="windows-1251">').encode("utf-8")
    assert declared_charset(late) is None
    assert html_text(late) == SPANISH  # valid UTF-8: not read as the late declaration's 1251
    hidden = page(SPANISH, '<!-- <meta charset="windows-1251"> -->').encode("utf-8")
    assert declared_charset(hidden) is None
    first = page(SPANISH, '<meta charset="bogus"><meta charset="windows-1252">').encode("cp1252")
    assert declared_charset(first) == "cp1252", "the first meta that names a known encoding"


def test_a_declared_utf8_page_with_bad_bytes_gets_replacement_characters():
    raw = page("caf\xe9", '<meta charset="utf-8">').encode("cp1252")
    assert html_text(raw) == "caf\ufffd"


def test_the_five_bytes_windows_1252_leaves_undefined_read_as_c1_controls():
    raw = b"<p>a\x81b\x8dc\x8fd\x90e\x9df \x80</p>"
    assert html_utf8(raw).decode("utf-8") == "<p>a\x81b\x8dc\x8fd\x90e\x9df \u20ac</p>"


def test_a_utf8_page_is_handed_on_as_it_is():
    raw = page(SPANISH).encode("utf-8")
    assert html_utf8(raw) is raw


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (codecs.BOM_UTF8 + "Relatório".encode(), "Relatório"),
        (codecs.BOM_UTF16_LE + "Relatório".encode("utf-16-le"), "Relatório"),
        (codecs.BOM_UTF16_BE + "Relatório".encode("utf-16-be"), "Relatório"),
        (codecs.BOM_UTF32_LE + "Relatório".encode("utf-32-le"), "Relatório"),
        (codecs.BOM_UTF32_BE + "Relatório".encode("utf-32-be"), "Relatório"),
        ("Relatório".encode("cp1252"), "Relatório"),
        ("Relatório de março: ".encode() + "ção".encode("cp1252"), "Relatório de março: ção"),
        ("€ “quoted”".encode("cp1252"), "€ “quoted”"),
    ],
)
def test_text_by_its_bom_else_utf8_else_windows_1252_run_by_run(data, text):
    assert decode_plain(data) == text
