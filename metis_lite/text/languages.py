"""Which scripts and languages a base's text is written in, and which an embedding model reads.

An English-only embedding model turns text it cannot read into noise: all-MiniLM-L6-v2 over
Arabic gives dense nDCG@10 0.03, over Thai 0.09, Russian 0.14, Chinese 0.25, Portuguese 0.52,
and in a hybrid search that noise takes half of every score. So a base whose text is mostly
in a script or language its model does not cover says so (MODEL_LANGUAGE_MISMATCH).

Three tables, read as data:

- SCRIPT_RANGES: code-point ranges → script. Only letters are counted (digits, punctuation,
  spaces and symbols fall outside every range); the ranges compile once into a lookup array,
  so a text is classified by one NumPy gather, not a `unicodedata` call per character.
- FUNCTION_WORDS: the most frequent short words of the common Latin-script languages. Latin
  text is said to be in a language when that language's words are the largest share of its
  words and at least READS_AS_SHARE of them. English's words are ~38 % of English prose and
  10–27 % of this project's docs (per 1,200-character chunk), but under 5 % of Portuguese,
  Spanish, German, French, Italian or Dutch prose.
  Text no list claims (code, names, tables, a language not listed) is "undecided" and never
  counted against a model: a mismatch is named only on positive evidence.
- COVERAGE: what a model family reads, by a pattern in its name (as prefixes.py's FAMILIES),
  first match wins: English-only families, multilingual families; an unknown model is never
  warned about (we do not guess against the user's choice).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from metis_lite.records import MetisWarning

MOSTLY = 0.5
"""A base is "mostly" unread when more than this share of its sampled letters is."""

MIN_LETTERS = 100
"""Fewer sampled letters than this (a sentence or two) say too little to judge a base by."""

READS_AS_SHARE = 0.10
"""Latin text is in a language when at least this share of its words are that language's
function words: below the 0.105 of this project's most command-laden English chunk, above the
0.05 of English words the most English-looking Portuguese passage (FaQuAD) holds."""

MIN_WORDS = 20
"""A chunk with fewer Latin words is not judged alone: such chunks are judged together."""

NAMED_SHARE = 0.10
"""A warning names each unread part holding at least this share of the letters (up to 3)."""

REMEDY = "index --reembed --embedding-model multilingual-e5-small"
"""The way out a warning names: re-embed with the multilingual model."""

UNDECIDED = "undecided"
"""The language of Latin text no FUNCTION_WORDS list claims."""

# fmt: off
SCRIPT_RANGES: tuple[tuple[int, int, str | None], ...] = (
    # (first, last, script), inclusive; later rows win where they overlap (digits carved out).
    (0x0041, 0x005A, "Latin"), (0x0061, 0x007A, "Latin"), (0x00AA, 0x00AA, "Latin"),
    (0x00BA, 0x00BA, "Latin"), (0x00C0, 0x00D6, "Latin"), (0x00D8, 0x00F6, "Latin"),
    (0x00F8, 0x024F, "Latin"), (0x1E00, 0x1EFF, "Latin"), (0x2C60, 0x2C7F, "Latin"),
    (0xA720, 0xA7FF, "Latin"), (0xFF21, 0xFF3A, "Latin"), (0xFF41, 0xFF5A, "Latin"),
    (0x0370, 0x03FF, "Greek"), (0x037E, 0x037E, None), (0x0387, 0x0387, None),
    (0x1F00, 0x1FFF, "Greek"),
    (0x0400, 0x052F, "Cyrillic"), (0x1C80, 0x1C8F, "Cyrillic"), (0x2DE0, 0x2DFF, "Cyrillic"),
    (0xA640, 0xA69F, "Cyrillic"),
    (0x0591, 0x05F4, "Hebrew"), (0x05BE, 0x05BE, None), (0x05C0, 0x05C0, None),
    (0xFB1D, 0xFB4F, "Hebrew"),
    (0x0600, 0x06FF, "Arabic"), (0x0600, 0x060F, None), (0x061B, 0x061F, None),
    (0x0660, 0x066D, None), (0x06D4, 0x06D4, None), (0x06F0, 0x06F9, None),
    (0x0750, 0x077F, "Arabic"), (0x0870, 0x08FF, "Arabic"),
    (0xFB50, 0xFDFF, "Arabic"), (0xFE70, 0xFEFF, "Arabic"),
    (0x0900, 0x097F, "Devanagari"), (0x0964, 0x096F, None),
    (0x0980, 0x0DFF, "Indic"), (0xA8E0, 0xA8FF, "Devanagari"),
    (0x0E00, 0x0E7F, "Thai"), (0x0E3F, 0x0E3F, None), (0x0E50, 0x0E5B, None),
    (0x1100, 0x11FF, "Hangul"), (0x3130, 0x318F, "Hangul"), (0xA960, 0xA97F, "Hangul"),
    (0xAC00, 0xD7FF, "Hangul"),
    (0x3040, 0x30FF, "Kana"), (0x30FB, 0x30FB, None), (0x31F0, 0x31FF, "Kana"),
    (0xFF66, 0xFF9F, "Kana"),
    (0x2E80, 0x2FDF, "Han"), (0x3005, 0x3007, "Han"), (0x3021, 0x3029, "Han"),
    (0x3400, 0x4DBF, "Han"), (0x4E00, 0x9FFF, "Han"), (0xF900, 0xFAFF, "Han"),
    (0x20000, 0x3134F, "Han"),
    # Other scripts: Armenian, Syriac, Thaana, Lao, Tibetan, Myanmar, Georgian, Ethiopic, Khmer.
    (0x0531, 0x058F, "other"), (0x0700, 0x074F, "other"), (0x0780, 0x07BF, "other"),
    (0x0E80, 0x0FFF, "other"), (0x1000, 0x109F, "other"), (0x10A0, 0x10FF, "other"),
    (0x1200, 0x139F, "other"), (0x1780, 0x17FF, "other"),
)
"""Letters by script; a None row carves digits and punctuation out of the row before it."""
# fmt: on

SCRIPTS = (
    "Latin", "Greek", "Cyrillic", "Arabic", "Hebrew", "Devanagari", "Indic", "Thai", "Han",
    "Kana", "Hangul", "other",
)  # fmt: skip

SCRIPT_NAMES: Mapping[str, str] = {
    "Indic": "Indic script (Bengali to Sinhala)",
    "Han": "Chinese characters (Han)",
    "Kana": "Japanese kana",
    "Hangul": "Korean Hangul",
    "other": "other scripts",
}
"""How a warning names a script; the rest read "<script> script"."""

# fmt: off
FUNCTION_WORDS: Mapping[str, frozenset[str]] = {
    language: frozenset(words.split())
    for language, words in {
        # Words another listed language uses as often ("a", "in", "is", "as", "no", "do",
        # "so", "an", "i") are left out of English's list.
        "English": "the of and to is that for it with was be by this are or from at which but "
                   "not have has you they we their were been will would can its if when there "
                   "these he she his her on what who all one more than them then into about your "
                   "our should may must each other also only such how",
        "Portuguese": "de que não uma os do da em um para com se por mais como dos das na no ao "
                      "ou foi pelo pela são seu sua também já está ser ele ela muito entre quando",
        "Spanish": "el la los las del que se por con una para es al lo como más pero sus le ya "
                   "fue este está son entre cuando muy sin sobre también hasta hay donde y",
        "French": "le la les des du un une et est que qui dans pour pas sur au avec ce il elle "
                  "ne se sont plus par ou mais nous vous leur été aux cette",
        "German": "der die und den das ist von mit sich des nicht auf ein eine dem für auch es "
                  "als an werden aus er hat dass sie nach bei um noch wie über zu im",
        "Italian": "il di che non la le per un una del della sono con si da gli dei nel al alla "
                   "anche come più ma ha questo essere delle degli è",
        "Dutch": "de het een van en is dat op te zijn niet met voor er die aan ook als bij door "
                 "maar wordt worden naar nog om hij zij",
        "Swedish": "och att det som en på är av för med till den har de inte om ett var jag men",
        "Polish": "nie na się jest że do to jak po ale od za tak co dla przez oraz jego być",
        "Turkish": "bir ve bu da de için ile olarak çok daha gibi olan en ne ama kadar sonra "
                   "değil var ise",
        "Indonesian": "yang dan di ini itu dengan untuk dari dalam tidak akan pada adalah ke "
                      "juga atau ada oleh sebagai karena",
        "Vietnamese": "của và các có là được trong cho những với không một người này đã khi để "
                      "từ đến",
    }.items()
}
"""The most frequent short words of each language, lower case (frequency lists of each)."""
# fmt: on

LATIN_WORD = re.compile(r"[A-Za-z\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u024F\u1E00-\u1EFF]+")


def _lookup() -> np.ndarray:
    table = np.zeros(0x32000, dtype=np.uint8)  # 0: not a letter; n: SCRIPTS[n - 1]
    for first, last, script in SCRIPT_RANGES:
        table[first : last + 1] = 0 if script is None else SCRIPTS.index(script) + 1
    table.flags.writeable = False
    return table


_SCRIPT_OF = _lookup()


def script_letters(text: str) -> dict[str, int]:
    """Letters of each script in a text (only scripts that occur)."""
    if not text:
        return {}
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    found = _SCRIPT_OF[np.minimum(codes, len(_SCRIPT_OF) - 1)]
    counts = np.bincount(found, minlength=len(SCRIPTS) + 1)
    return {script: int(counts[i + 1]) for i, script in enumerate(SCRIPTS) if counts[i + 1]}


def script_shares(text: str) -> dict[str, float]:
    """The share of a text's letters in each script (summing to 1; {} without letters)."""
    letters = script_letters(text)
    total = sum(letters.values())
    return {script: n / total for script, n in letters.items()} if total else {}


def latin_language(text: str) -> str:
    """The language Latin-script text reads as (a FUNCTION_WORDS key), or UNDECIDED."""
    return _language_of(LATIN_WORD.findall(text.lower()))


def _languages_by_word() -> dict[str, tuple[str, ...]]:
    by_word: dict[str, tuple[str, ...]] = {}
    for language, words in FUNCTION_WORDS.items():
        for word in words:
            by_word[word] = (*by_word.get(word, ()), language)
    return by_word


_LANGUAGES_OF_WORD = _languages_by_word()


def _language_of(words: list[str]) -> str:
    counts = Counter(words)
    hits: Counter[str] = Counter()
    for word in counts.keys() & _LANGUAGES_OF_WORD.keys():
        for language in _LANGUAGES_OF_WORD[word]:
            hits[language] += counts[word]
    if not hits:
        return UNDECIDED
    best, n = hits.most_common(1)[0]
    return best if n >= READS_AS_SHARE * len(words) else UNDECIDED


@dataclass(frozen=True)
class Profile:
    """Letters of a sample of a base's text: by script, and the Latin ones by language."""

    scripts: Mapping[str, int]
    latin: Mapping[str, int]

    @property
    def letters(self) -> int:
        return sum(self.scripts.values())


def profile_of(texts: Iterable[str]) -> Profile:
    """Count letters by script over texts (chunks), and the Latin ones by language: a text
    holding MIN_WORDS Latin words or more is judged alone, the shorter ones together."""
    texts = list(texts)
    latin: Counter[str] = Counter()
    short_words: list[str] = []
    for text in texts:
        words = LATIN_WORD.findall(text.lower())
        if len(words) >= MIN_WORDS:
            latin[_language_of(words)] += sum(map(len, words))
        else:
            short_words += words
    if short_words:
        latin[_language_of(short_words)] += sum(map(len, short_words))
    return Profile(script_letters("\n".join(texts)), dict(latin))


@dataclass(frozen=True)
class Reads:
    """What a model reads: scripts and, for Latin, languages; None means any."""

    label: str
    scripts: frozenset[str] | None
    latin: frozenset[str] | None


ENGLISH = Reads("English", frozenset({"Latin"}), frozenset({"English", UNDECIDED}))
MANY = Reads("multilingual", None, None)


@dataclass(frozen=True)
class Coverage:
    family: str
    pattern: re.Pattern[str]
    reads: Reads


def _coverage(family: str, pattern: str, reads: Reads) -> Coverage:
    return Coverage(family, re.compile(pattern), reads)


COVERAGE: tuple[Coverage, ...] = (
    # Multilingual first, so "paraphrase-multilingual-MiniLM" and "multilingual-e5" match here.
    _coverage(
        "multilingual",
        r"multilingual|bge-m3|labse|xlm-r|qwen3-embedding|nomic-embed-text-v2|jina-embeddings-v3"
        r"|arctic-embed-.*-v2",
        MANY,
    ),
    _coverage("MiniLM, MPNet (sentence-transformers English)", r"minilm|all-mpnet", ENGLISH),
    _coverage("BGE English", r"bge-(small|base|large)-en", ENGLISH),
    _coverage("E5 English", r"(^|[/_-])e5-(small|base|large)", ENGLISH),
    _coverage("Nomic v1", r"nomic-embed-text", ENGLISH),
    _coverage("mxbai", r"mxbai-embed-large", ENGLISH),
)
"""What each model family reads, tried in order, the pattern searched in the lower-cased name."""


def coverage_of(model_name: str) -> Coverage | None:
    """The first COVERAGE row whose pattern occurs in the model's name, or None (unknown)."""
    lowered = model_name.lower()
    return next((row for row in COVERAGE if row.pattern.search(lowered)), None)


def may_mismatch(model_name: str) -> bool:
    """Whether `mismatch` can warn about the named model at all: not for one that reads every
    script and language, nor one we do not know, so a search by such a model reads no sample
    of the base (Base's language cache: ~25 ms of CPU of a fresh process's first search)."""
    coverage = coverage_of(model_name)
    return coverage is not None and (
        coverage.reads.scripts is not None or coverage.reads.latin is not None
    )


def unread(profile: Profile, reads: Reads) -> dict[str, int]:
    """Letters a model does not read, by part: a script, or a Latin-script language."""
    parts = {
        script: n
        for script, n in profile.scripts.items()
        if reads.scripts is not None and script not in reads.scripts
    }
    if reads.latin is not None and (reads.scripts is None or "Latin" in reads.scripts):
        parts.update({lang: n for lang, n in profile.latin.items() if lang not in reads.latin})
    return parts


def mismatch(profile: Profile, model_name: str) -> MetisWarning | None:
    """MODEL_LANGUAGE_MISMATCH when most of the profiled text is in scripts or languages the
    named model does not read; None for a model that reads it, or one we do not know."""
    coverage = coverage_of(model_name)
    total = profile.letters
    if coverage is None or total < MIN_LETTERS:
        return None
    parts = unread(profile, coverage.reads)
    share = sum(parts.values()) / total
    if share <= MOSTLY:
        return None
    ranked = sorted(parts.items(), key=lambda part: -part[1])
    named = [name for name, n in ranked[:3] if n >= NAMED_SHARE * total] or [ranked[0][0]]
    what = " and ".join(_part_name(name) for name in named)
    return MetisWarning(
        "MODEL_LANGUAGE_MISMATCH",
        f"most of this base ({round(100 * share)} % of its letters) is {what}, which "
        f"{model_name} ({coverage.reads.label}) does not read: results by meaning are "
        f"unreliable; re-embed with a multilingual model: {REMEDY}",
    )


def _part_name(part: str) -> str:
    if part in FUNCTION_WORDS:
        return part
    return SCRIPT_NAMES.get(part, f"{part} script")
