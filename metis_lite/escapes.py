"""Text shown to a person in a terminal, made visible: control characters and bidirectional
overrides written as escapes, never executed.

A base holds text from anywhere — titles, file names, passages, facts posted over HTTP — and
a terminal obeys what some characters say: ESC starts a sequence that can clear the screen,
set the window title or move the cursor; a newline in a file name forges a line of output;
U+202E shows the rest of a line reversed. The CLI's human output passes each line through
`escape_controls`; `--json` keeps the text exact (JSON escapes what it must itself).
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

BIDI_CONTROLS = (
    "\u061c"  # ARABIC LETTER MARK
    "\u200e\u200f"  # LEFT-TO-RIGHT and RIGHT-TO-LEFT MARK
    "\u202a\u202b\u202c\u202d\u202e"  # embeddings, POP, overrides (LRO, RLO)
    "\u2066\u2067\u2068\u2069"  # isolates and POP DIRECTIONAL ISOLATE
)
"""Characters that reorder what follows them on screen (Unicode's bidirectional controls)."""


def _escape(code: int) -> str:
    char = chr(code)
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_TABLE = {
    code: _escape(code)
    for code in (
        *range(0x00, 0x20),  # C0 controls: ESC, BEL, backspace, newline, carriage return ...
        0x7F,  # DEL
        *range(0x80, 0xA0),  # C1 controls: CSI (0x9b) starts a sequence on its own
        *(ord(c) for c in BIDI_CONTROLS),
        0x2028,  # LINE SEPARATOR
        0x2029,  # PARAGRAPH SEPARATOR
        *range(0xD800, 0xE000),  # lone surrogates: not text a terminal can be sent
    )
}


def escape_controls(text: str) -> str:
    """`text` with every control character, bidirectional control and line separator written
    as a visible escape (`\\x1b`, `\\n`, `\\u202e`); all other text unchanged."""
    return text.translate(_TABLE)
