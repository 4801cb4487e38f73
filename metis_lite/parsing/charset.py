"""Which characters a file's bytes are: the byte-order mark, then what the file declares, then
UTF-8 when the bytes are valid UTF-8, then Windows-1252 — the order a browser reads a page in.

    HTML  BOM (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE)
          ▶ <meta charset> / <meta http-equiv="Content-Type" content="…; charset=…">
            within the first 1,024 bytes, else the XML declaration's encoding
          ▶ UTF-8, when every byte of the file is valid UTF-8
          ▶ Windows-1252 (a browser's default for a page that says nothing)
    text  BOM ▶ UTF-8 where the bytes are valid UTF-8, Windows-1252 for each run that is not

A declared label is read as the WHATWG Encoding Standard reads it, which differs from Python's
codec names where browsers chose compatibility: `iso-8859-1`, `latin1` and `us-ascii` mean
Windows-1252, `iso-8859-9` Windows-1254, `shift_jis` Windows-31J, `gb2312` GBK, `euc-kr`
Windows-949, and a page declaring UTF-16 without a BOM is UTF-8. A label naming no text
encoding a browser knows (`base64`, `utf-7`, a typo) is ignored, as browsers ignore it.

Windows-1252 leaves five bytes undefined (0x81, 0x8D, 0x8F, 0x90, 0x9D); like browsers, they
read as the C1 controls of the same number, so no byte is ever lost or refused.
"""

from __future__ import annotations

import codecs
import re

PRESCAN_BYTES = 1024
"""A page's `<meta>` charset is looked for in its first 1,024 bytes, where browsers look."""

BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE: FF FE 00 00 starts with FF FE
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
"""Each byte-order mark and the encoding it announces, longest first where two share bytes."""

WINDOWS_1252 = "cp1252"

WHATWG_CODECS: dict[str, str] = {
    "utf-8": "utf-8",
    "utf-16-le": "utf-8",  # a declaration of UTF-16 in bytes that parsed as ASCII is wrong
    "utf-16-be": "utf-8",
    "utf-16": "utf-8",
    "utf-32": "utf-8",
    "utf-32-le": "utf-8",
    "utf-32-be": "utf-8",
    "ascii": WINDOWS_1252,
    "latin-1": WINDOWS_1252,
    "iso8859-1": WINDOWS_1252,
    "cp1252": WINDOWS_1252,
    "iso8859-9": "cp1254",
    "cp1254": "cp1254",
    "iso8859-11": "cp874",
    "tis-620": "cp874",
    "cp874": "cp874",
    "gb2312": "gbk",
    "gbk": "gbk",
    "gb18030": "gb18030",
    "big5": "big5hkscs",
    "big5hkscs": "big5hkscs",
    "shift_jis": "cp932",
    "cp932": "cp932",
    "euc_jp": "euc_jp",
    "iso2022_jp": "iso2022_jp",
    "euc_kr": "cp949",
    "cp949": "cp949",
    "cp866": "cp866",
    "koi8-r": "koi8-r",
    "koi8-u": "koi8-u",
    "mac-roman": "mac-roman",
    "mac-cyrillic": "mac-cyrillic",
    **{f"iso8859-{n}": f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)},
    **{f"cp125{n}": f"cp125{n}" for n in (0, 1, 3, 5, 6, 7, 8)},
}
"""Python's name of a codec (as `codecs.lookup` resolves a label) → the codec a browser reads
that label with. Only these are honoured: every other codec Python knows is ignored."""

EXTRA_LABELS: dict[str, str] = {
    "x-user-defined": WINDOWS_1252,
    "x-sjis": "cp932",
    "windows-31j": "cp932",
    "ms_kanji": "cp932",
    "csshiftjis": "cp932",
    "x-gbk": "gbk",
    "chinese": "gbk",
    "csgb2312": "gbk",
    "x-x-big5": "big5hkscs",
    "cn-big5": "big5hkscs",
    "csbig5": "big5hkscs",
    "windows-949": "cp949",
    "ks_c_5601-1987": "cp949",
    "korean": "cp949",
    "x-mac-roman": "mac-roman",
    "macintosh": "mac-roman",
    "x-mac-cyrillic": "mac-cyrillic",
    "x-mac-ukrainian": "mac-cyrillic",
    "dos-874": "cp874",
    "unicode": "utf-8",
    "ucs-2": "utf-8",
    "unicodefeff": "utf-8",
    "unicodefffe": "utf-8",
}
"""WHATWG labels Python does not resolve to the codec above (or resolves to another one)."""

_FALLBACK_ERRORS = "metis-cp1252-fallback"

_COMMENT = re.compile(rb"<!--.*?(?:-->|\Z)", re.DOTALL)
_META = re.compile(rb"<meta[\s/]([^>]*)", re.IGNORECASE)
_ATTRIBUTE = re.compile(
    rb"""([^\s/>=]+)(?:\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s>]*)))?""", re.IGNORECASE
)
_CONTENT_CHARSET = re.compile(rb"""charset\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;"']+))""", re.I)
_XML_DECLARATION = re.compile(
    rb"""<\?xml\s[^>]*?encoding\s*=\s*(?:"([^"]*)"|'([^']*)')""", re.IGNORECASE
)


def _cp1252_fallback(exc: UnicodeError) -> tuple[str, int]:
    """Decode the bytes UTF-8 rejected as Windows-1252, or Latin-1 where 1252 leaves a gap."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    chunk = exc.object[exc.start : exc.end]
    return "".join(_byte_1252(byte) for byte in chunk), exc.end


def _byte_1252(byte: int) -> str:
    try:
        return bytes([byte]).decode(WINDOWS_1252)
    except UnicodeDecodeError:
        return chr(byte)


codecs.register_error(_FALLBACK_ERRORS, _cp1252_fallback)


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """(encoding, length of the mark) of the byte-order mark `data` starts with, or None."""
    for mark, encoding in BOMS:
        if data.startswith(mark):
            return encoding, len(mark)
    return None


def wide_encoding(data: bytes) -> str | None:
    """ "UTF-16" or "UTF-32" when `data` starts with the BOM of one (its text then holds NUL
    bytes that mark no binary data), else None."""
    bom = bom_encoding(data)
    if bom and bom[0] != "utf-8":
        return bom[0][:6].upper()
    return None


def codec_for_label(label: str | bytes) -> str | None:
    """The codec a browser reads a declared charset label with, or None for none it knows."""
    if isinstance(label, bytes):
        label = label.decode("ascii", "replace")
    name = label.strip("\t\n\f\r ").lower()
    if not name:
        return None
    if name in EXTRA_LABELS:
        return EXTRA_LABELS[name]
    try:
        resolved = codecs.lookup(name).name
    except (LookupError, ValueError):
        return None
    return WHATWG_CODECS.get(resolved)


def declared_charset(data: bytes) -> str | None:
    """The codec a page declares in its first PRESCAN_BYTES: a `<meta>` (the first one that
    names a known encoding), else an XML declaration at its start; None when it declares none."""
    head = _COMMENT.sub(b"", data[:PRESCAN_BYTES])
    for meta in _META.finditer(head):
        attributes: dict[bytes, bytes] = {}
        for match in _ATTRIBUTE.finditer(meta[1]):
            name = match[1].lower()
            if name not in attributes:  # the first of two same-named attributes counts
                attributes[name] = match[2] or match[3] or match[4] or b""
        codec = None
        if b"charset" in attributes:
            codec = codec_for_label(attributes[b"charset"])
        elif attributes.get(b"http-equiv", b"").strip().lower() == b"content-type":
            found = _CONTENT_CHARSET.search(attributes.get(b"content", b""))
            if found:
                codec = codec_for_label(found[1] or found[2] or found[3] or b"")
        if codec:
            return codec
    declaration = _XML_DECLARATION.match(data.lstrip()[:PRESCAN_BYTES])
    if declaration:
        return codec_for_label(declaration[1] or declaration[2] or b"")
    return None


def html_codec(data: bytes) -> tuple[str, int]:
    """(codec, bytes of BOM to skip) a page is read with, by its BOM or its declaration; the
    codec is "" when it has neither (then UTF-8 if valid, else Windows-1252: see html_utf8)."""
    bom = bom_encoding(data)
    if bom:
        return bom
    return declared_charset(data) or "", 0


def html_utf8(data: bytes) -> bytes:
    """A page's bytes, as UTF-8, decoded as a browser decodes them (see the module): bytes that
    its encoding cannot read become U+FFFD, except in Windows-1252, which reads every byte.
    A page that is UTF-8 already comes back as it is, not copied."""
    codec, skip = html_codec(data)
    if codec in ("", "utf-8") and not skip:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            if codec == "":
                codec = WINDOWS_1252
        else:
            return data
    codec = codec or "utf-8"
    errors = _FALLBACK_ERRORS if codec == WINDOWS_1252 else "replace"
    text = codecs.decode(memoryview(data)[skip:], codec, errors)
    return text.encode("utf-8", "replace")


def decode_plain(data: bytes) -> str:
    """A text file's characters: by its BOM, else UTF-8 where the bytes are valid UTF-8 and
    Windows-1252 for each run of bytes that is not (a UTF-8 file with one stray byte keeps the
    rest of its accents; a Windows-1252 file reads as Windows-1252). A BOM whose encoding the
    bytes then break raises UnicodeDecodeError."""
    bom = bom_encoding(data)
    if bom and bom[0] != "utf-8":
        codec, skip = bom
        return codecs.decode(memoryview(data)[skip:], codec, "strict")
    return codecs.decode(data.removeprefix(codecs.BOM_UTF8), "utf-8", _FALLBACK_ERRORS)
