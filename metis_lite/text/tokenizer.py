"""The words of a text, as docs/how-search-works.md ("Words") defines them, and the FTS5
tokenizer built on them.

A word is a run of letters, digits and the combining marks written on them (Devanagari vowel
signs, Thai tone marks, Arabic harakat), compared folded: lower case, compatibility forms
unfolded (ｶﾀｶﾅ, ﬁ, ①), accents, harakat, Hebrew points and tatweel removed, then recomposed
(NFC), so `configuracao` finds `Configuração` and が written as か + ゛ finds が. Zero-width
joiners and soft hyphens stay inside a word and fold away; direction marks (U+200F, U+202E)
and other format characters end it. One letter alone is left out, one digit kept (`step 2`);
no stemming, no stop words.

Runs of Han, Hiragana, Katakana and Hangul become overlapping character bigrams, as Lucene's
CJKBigramFilter makes them: 東京の天気 → 東京 京の の天 天気; a run of one character stays one
word, and digits or Latin letters beside it are words of their own (東京2024年 → 東京 2024 年).
Thai, Lao, Khmer and Myanmar, also written without spaces between words, whose words cannot be
told apart without a dictionary, get the same bigrams of letters, each with the marks written
on it (โรงพยาบาล → โร รง งพ พย ยา าบ บา าล): a question's word then finds it inside a longer
run (docs/words.md).

The question goes through the same function and becomes a safe FTS5 query: each word
double-quoted, joined by OR, so no user text is ever parsed as FTS5 syntax (`x-ray`, `don't`,
`AND NOT`, `NEAR(` are just words).

A base's words index names the rules that built it (`tokenize='metis 2'`); an index from
before version 2 (`tokenize='metis'`) is read and written with version 1's rules, so one
index never mixes two, until `metis-lite index` rebuilds it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise

import apsw

from metis_lite.text import unicode_tables

TOKENIZER_NAME = "metis"
"""The name the FTS5 table is declared with."""

VERSION = 2
"""The word rules new indexes are built with: `tokenize='metis 2'` in schema.sql."""

TOKENIZE = f"{TOKENIZER_NAME} {VERSION}"
"""The FTS5 `tokenize` option of a words index built now (schema.sql)."""

VERSIONS = (1, 2)
"""1: a word is a run of letters and digits (marks cut it), no bigrams; 2: this module's rules."""

CJK_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3031, 0x3035),  # kana repetition marks
    (0x3038, 0x303C),  # 〸〹〺〻〼
    (0x3040, 0x30FF),  # Hiragana, Katakana (ー, voiced marks)
    (0x3130, 0x318F),  # Hangul compatibility jamo
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul jamo extended A
    (0xA9E0, 0xA9FF),  # Myanmar extended B
    (0xAA60, 0xAA7F),  # Myanmar extended A
    (0xAC00, 0xD7FF),  # Hangul syllables, jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0xFFA0, 0xFFDC),  # halfwidth Hangul
    (0x1AFF0, 0x1B16F),  # Kana extended B, supplement, extended A, small kana
    (0x20000, 0x3FFFF),  # CJK extensions B–I, compatibility supplement (planes 2 and 3)
)
"""Letters of these blocks are made into bigrams (only letters: 「」・ end a run as before):
Han, Kana, Hangul, and the scripts of South-East Asia written without spaces between words."""

JOINERS = "\u00ad\u200c\u200d\u2060"
"""Soft hyphen, zero-width non-joiner and joiner, word joiner: inside a word, folded away."""

STRIPPED_RANGES = (
    (0x0300, 0x036F),  # combining diacritical marks (Latin, Greek, Cyrillic accents)
    (0x1AB0, 0x1AFF),
    (0x1DC0, 0x1DFF),
    (0x20D0, 0x20FF),
    (0xFE20, 0xFE2F),
    (0x0591, 0x05BD),  # Hebrew cantillation and points (05BE maqaf is a hyphen: kept)
    (0x05BF, 0x05BF),
    (0x05C1, 0x05C2),
    (0x05C4, 0x05C5),
    (0x05C7, 0x05C7),
    (0x0640, 0x0640),  # Arabic tatweel
    (0x064B, 0x065F),  # Arabic harakat, and hamza/madda above and below: أ إ آ fold to ا
    (0x0670, 0x0670),  # Arabic superscript alef
    (0xFE00, 0xFE0F),  # variation selectors
    (0xE0100, 0xE01EF),
)
"""Removed from folded text: marks that are read as accents, not as letters."""

_FOLDED_LETTERS = {
    # Not a letter and an accent in Unicode, folded as if they were.
    **{"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "ı": "i"},
    # Arabic letters written for one another (alef maksura for yeh, teh marbuta for heh), as
    # Lucene's ArabicNormalizer folds them: keyword nDCG@10 on ARCD 0.776 → 0.782 (docs/words.md).
    **{"ى": "ي", "ة": "ه"},
}
_FOLD_TABLE = str.maketrans(_FOLDED_LETTERS)


def _class(ranges: Iterable[tuple[int, int]]) -> str:
    """A regex class's inside; characters as such, since parsing 1,000 escapes costs ~3 ms."""
    return "".join(chr(a) + (f"-{chr(b)}" if b > a else "") for a, b in ranges)


@dataclass(frozen=True)
class _Patterns:
    """The word patterns, as strings compiled on first use by `re` (and kept in its cache):
    compiling the classes of marks and CJK letters costs ~15 ms, which importing the package
    should not pay.

    `\\w` is a letter or a digit (str.isalnum) or "_"; "_" is made a space before these apply,
    so it ends a word, as it always has. Characters outside the BMP (marks, CJK extensions B–I)
    are in `_ASTRAL`'s classes only, used for a text that holds such a character: `re` tests
    them one range at a time for every character, which makes a text ~3× slower to tokenize.
    """

    run: str  # a word as written: letters, digits, marks, and joiners between them
    piece: str  # in folded text: a run of CJK letters (group 1), or another word (group 2)
    word: str  # in folded text without CJK letters: a word
    unit: str  # in a CJK run: a letter and the marks on it (ㇷ゚ has no precomposed form)
    mark: str
    cjk: str
    unsafe: str

    @classmethod
    def of(cls, *, astral: bool) -> _Patterns:
        def inside(ranges: Iterable[tuple[int, int]]) -> str:
            return _class(r for r in ranges if astral or r[1] <= 0xFFFF)

        marks, cjk = inside(unicode_tables.MARKS), inside(unicode_tables.CJK_LETTERS)
        letter, joiner = f"[^\\W{cjk}]", f"[{_class((ord(c), ord(c)) for c in JOINERS)}]"
        return cls(
            run=f"\\w(?:[\\w{marks}]|{joiner}+(?=[\\w{marks}]))*",
            piece=f"([{cjk}][{cjk}{marks}]*)|({letter}+(?:[{marks}]+{letter}*)*)",
            word=f"\\w+(?:[{marks}]+\\w*)*",
            unit=f"[^{marks}][{marks}]*",
            mark=f"[{marks}]",
            cjk=f"[{cjk}]",
            unsafe=f"[{inside(unicode_tables.UNSAFE)}]",
        )


_BMP = _Patterns.of(astral=False)
_ASTRAL = _Patterns.of(astral=True)
_ASCII_WORD = re.compile(r"[a-z0-9]{2,}|(?<![a-z0-9])[0-9](?![a-z0-9])")
"""An ASCII word as kept: a run of two or more letters and digits, or a lone digit (one regex
instead of a Python test of each run: ~25 % faster)."""
_ASCII_WORD_OR_END = re.compile(_ASCII_WORD.pattern + "|\x00")

TEXT_END = "\x00"
"""What `words_of` puts after each text's words (never a word: not a letter or a digit)."""

SEPARATORS = "¶§©®°±·«»×÷‐‑‒–—―‘’‚“”„†‡•…‰′″‹›€"
"""Characters outside ASCII that are no letter, digit or mark and whose folded forms hold none
(tests/test_tokenizer.py checks each): a text of ASCII and these alone is read by the ASCII
rule (runs of [a-z0-9], these between them), as the full rules read it (Sphinx's ¶, curly
quotes and dashes make ~80 % of the chunks of Python's HTML documentation not ASCII)."""
_BEYOND_SEPARATORS = re.compile(f"[^\\x00-\\x7f{SEPARATORS}]")
_ASTRAL_CHARACTER = re.compile("[\U00010000-\U0010ffff]")
_STRIP = re.compile(f"[{_class(STRIPPED_RANGES)}{JOINERS}]+")


def fold(text: str) -> str:
    """Lower case, compatibility forms unfolded, accents removed: 'Configuração' → 'configuracao'."""
    text = text.casefold()
    if text.isascii():
        return text
    # Compatibility forms (𝐀, ﬁ, ①) decompose to letters that need folding once more.
    text = unicodedata.normalize("NFKD", text).casefold()
    if any(letter in text for letter in _FOLDED_LETTERS):  # translate() costs ~40 µs a chunk
        text = text.translate(_FOLD_TABLE)
    return unicodedata.normalize("NFC", _STRIP.sub("", text))


def _keep(word: str) -> bool:
    return len(word) > 1 or word.isdigit()


def tokens(text: str, *, version: int = VERSION) -> list[str]:
    """The words of `text` in order, folded, CJK runs as bigrams; a single letter is dropped
    (but not a CJK character), a single digit kept. `version`: the word rules to apply."""
    if version == 1:
        return _tokens_v1(text)
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())
    if not _BEYOND_SEPARATORS.search(text):  # the ASCII rule: [a-z0-9] runs, these between
        return _ASCII_WORD.findall(text.lower())
    return _unicode_tokens(text)


def _unicode_tokens(text: str) -> list[str]:
    """tokens() of a text with characters beyond ASCII and SEPARATORS (version 2)."""
    patterns = _ASTRAL if _ASTRAL_CHARACTER.search(text) else _BMP
    if re.search(patterns.unsafe, text):
        # ™ or ㈱ would make words in the folded text that the text as written has not.
        return [word for _, _, word in _spans(text)]
    folded = fold(text).replace("_", " ")
    if not re.search(patterns.cjk, folded):
        return [w for w in re.findall(patterns.word, folded) if _keep(w)]
    out: list[str] = []
    for run, word in re.findall(patterns.piece, folded):
        if word:
            if _keep(word):
                out.append(word)
        elif not re.search(patterns.mark, run):
            out.extend([run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run])
        else:
            units = re.findall(patterns.unit, run)
            out.extend([a + b for a, b in pairwise(units)] if len(units) > 1 else [run])
    return out


def words_of(texts: Sequence[str], *, version: int = VERSION) -> list[str]:
    """tokens() of each text in turn, each text's words followed by TEXT_END, in one list: a
    run of ASCII texts is read by one regex over them all, joined by TEXT_END (the words of
    many chunks at once, for bm25.py)."""
    out: list[str] = []
    ascii_run: list[str] = []
    for text in texts:
        plain = text.isascii() or (version > 1 and not _BEYOND_SEPARATORS.search(text))
        if plain and TEXT_END not in text:
            ascii_run.append(text)
            continue
        if ascii_run:
            out += _ASCII_WORD_OR_END.findall((TEXT_END.join(ascii_run) + TEXT_END).lower())
            ascii_run = []
        out += tokens(text, version=version)
        out.append(TEXT_END)
    if ascii_run:
        out += _ASCII_WORD_OR_END.findall((TEXT_END.join(ascii_run) + TEXT_END).lower())
    return out


def token_spans(text: str, *, version: int = VERSION) -> Iterator[tuple[int, int, str]]:
    """(start, end, folded word) for each word of `text`, offsets into the original string.

    The words are tokens(text)'s, in order; bigrams of a CJK run overlap by one character.
    """
    return _token_spans_v1(text) if version == 1 else _spans(text)


def _spans(text: str) -> Iterator[tuple[int, int, str]]:
    patterns = _ASTRAL if _ASTRAL_CHARACTER.search(text) else _BMP
    for match in re.finditer(patterns.run, text.replace("_", " ")):
        run, at = match.group(), match.start()
        if run.isascii():
            if _keep(run):
                yield at, match.end(), run.lower()
            continue
        folded, starts, ends = _aligned_fold(run)
        for piece in re.finditer(patterns.piece, folded.replace("_", " ")):
            if piece.group(1) is None:
                if _keep(word := piece.group(2)):
                    yield at + starts[piece.start()], at + ends[piece.end() - 1], word
                continue
            units = [u.span() for u in re.compile(patterns.unit).finditer(folded, *piece.span())]
            if len(units) == 1:
                units *= 2  # one character: itself, not a bigram
            for (a, _), (_, b) in pairwise(units):
                yield at + starts[a], at + ends[b - 1], folded[a:b]


def _aligned_fold(run: str) -> tuple[str, list[int], list[int]]:
    """fold(run), and for each of its characters the (start, end) in `run` it comes from.

    Characters that fold to nothing (accents, joiners) belong to the one before them. Where
    folding joins characters (Hangul jamo into a syllable, ｶﾞ into ガ), they share one span.
    """
    whole = fold(run)
    parts = [(i, i + 1, fold(c)) for i, c in enumerate(run)]
    if "".join(p for *_, p in parts) != whole:
        parts = _clusters(run, whole)
    starts: list[int] = []
    ends: list[int] = []
    for start, end, part in parts:
        if not part:
            if ends:
                ends[-1] = end
            continue
        starts += [start] * len(part)
        ends += [end] * len(part)
    return whole, starts, ends


def _clusters(run: str, whole: str) -> list[tuple[int, int, str]]:
    """(start, end, folded) of each group of characters that fold together."""
    out: list[tuple[int, int, str]] = []
    for i, c in enumerate(run):
        part = fold(c)
        if out:
            start, _, before = out[-1]
            merged = fold(run[start : i + 1])
            if merged != before + part:
                out[-1] = (start, i + 1, merged)
                continue
        out.append((i, i + 1, part))
    if "".join(p for *_, p in out) != whole:
        return [(0, len(run), whole)]
    return out


def fts_query(question: str, *, version: int = VERSION) -> str | None:
    """A safe FTS5 MATCH expression for a question: its distinct words, quoted, OR-ed.

    None when the question has no word at all (an empty or punctuation-only question).
    """
    return fts_match(list(dict.fromkeys(tokens(question, version=version))))


def fts_match(words: list[str]) -> str | None:
    """Words (already tokens: letters, digits and marks only) as a quoted OR; None for no word."""
    return " OR ".join(f'"{word}"' for word in words) or None


def joined_words(text: str, *, version: int = VERSION) -> str:
    """tokens(text) joined by TEXT_END: a text's words as `preset_words` takes them."""
    return TEXT_END.join(tokens(text, version=version))


_PRESET: dict[apsw.Connection, tuple[int, Mapping[str, str]]] = {}
"""The words computed ahead for what each connection is writing now (preset_words)."""


@contextmanager
def preset_words(
    connection: apsw.Connection, version: int, words: Mapping[str, str]
) -> Iterator[None]:
    """While the block runs, FTS5 writing a text found in `words` on `connection`, into a
    words index of rules `version`, takes the text's words from there (`joined_words`, made
    by an indexer's parse workers on every core) instead of tokenizing it again. Any other
    text, or another version's index, is tokenized as always, so a preset that misses costs
    time, never a word."""
    _PRESET[connection] = (version, words)
    try:
        yield
    finally:
        _PRESET.pop(connection, None)


def declared_version(sql: str) -> int:
    """The word rules an FTS5 table's CREATE statement names: `tokenize='metis 2'` → 2."""
    match = re.search(rf"tokenize\s*=\s*['\"]{TOKENIZER_NAME}(?:\s+(\d+))?\s*['\"]", sql)
    return int(match.group(1) or 1) if match else 1


def _fts5_tokenizer(connection: apsw.Connection, args: list[str]) -> apsw.Tokenizer:
    """FTS5 tokenizer factory: bare tokens for documents (1.7× faster to insert than with offsets), offsets for queries.

    The table's declaration chooses the rules: `tokenize='metis'` version 1, 'metis 2' version 2.
    """
    version = 1 if not args else int(args[0]) if len(args) == 1 and args[0].isdigit() else 0
    if version not in VERSIONS:
        raise ValueError(
            f"this words index was built with word rules {' '.join(args)!r}; this metis-lite "
            f"knows {', '.join(map(str, VERSIONS))}: upgrade metis-lite to read it"
        )
    words: Callable[[str], list[str]] = _tokens_v1 if version == 1 else tokens
    spans = _token_spans_v1 if version == 1 else _spans

    def tokenize(utf8: bytes, flags: int, locale: str | None):  # noqa: ANN202 - apsw protocol
        text = utf8.decode("utf-8", "replace")
        if flags & apsw.FTS5_TOKENIZE_DOCUMENT:
            preset = _PRESET.get(connection)
            if preset is not None and preset[0] == version:
                known = preset[1].get(text)
                if known is not None:
                    return known.split(TEXT_END) if known else []
            return words(text)
        return _with_byte_offsets(text, spans(text))

    return tokenize


def _with_byte_offsets(
    text: str, spans: Iterable[tuple[int, int, str]]
) -> list[tuple[int, int, str]]:
    if text.isascii():
        return list(spans)
    out = []
    at = byte_at = 0  # starts never go back by more than a bigram: walk forward from the last
    for start, end, word in spans:
        if start >= at:
            byte_at += len(text[at:start].encode("utf-8"))
        else:
            byte_at -= len(text[start:at].encode("utf-8"))
        at = start
        out.append((byte_at, byte_at + len(text[start:end].encode("utf-8")), word))
    return out


def register(connection: apsw.Connection) -> None:
    """Register the tokenizer on a connection (needed by every statement touching the FTS table)."""
    connection.register_fts5_tokenizer(TOKENIZER_NAME, _fts5_tokenizer)


# -- version 1: the words of indexes built before CJK bigrams; kept as they were ----------------

_WORD_V1 = re.compile(r"[^\W_]+")
_FOLD_TABLE_V1 = str.maketrans(
    {"ß": "ss", "æ": "ae", "œ": "oe", "ø": "o", "đ": "d", "ł": "l", "ı": "i"}
)
_MARKS_V1 = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")


def _fold_v1(text: str) -> str:
    text = text.casefold()
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKD", text).casefold().translate(_FOLD_TABLE_V1)
    return _MARKS_V1.sub("", text)


def _tokens_v1(text: str) -> list[str]:
    return [w for w in _WORD_V1.findall(_fold_v1(text)) if _keep(w)]


def _token_spans_v1(text: str) -> Iterator[tuple[int, int, str]]:
    for match in _WORD_V1.finditer(text):
        for word in _WORD_V1.findall(_fold_v1(match.group())) or ():
            if _keep(word):
                yield match.start(), match.end(), word
                break
