"""Write tests/fixtures/unicode/categories-VERSION.txt: every assigned code point's general
category in the Unicode version metis_lite/text/unicode_tables.py was made from, as ranges.

    python scripts/make_unicode_fixture.py      # on a Python whose unicodedata is that version

tests/test_tokenizer.py checks the tables against this file on every Python, whatever Unicode
version its own `unicodedata` has: the tables (and so the words of every base) stay those of
one version, and the file is that version's data, written out once. Lines are
`FIRST LAST Category` in hexadecimal; unassigned code points (Cn) are left out.
"""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from metis_lite.text import unicode_tables  # noqa: E402


def main() -> None:
    version = unicodedata.unidata_version
    if version != unicode_tables.UNICODE_VERSION:
        raise SystemExit(
            f"this Python has Unicode {version}; the tables are {unicode_tables.UNICODE_VERSION}:"
            " run this with a Python of that version (3.11 has 14.0.0)"
        )
    runs: list[list] = []
    for point in range(sys.maxunicode + 1):
        category = unicodedata.category(chr(point))
        if runs and runs[-1][2] == category and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point, category])
    out = ROOT / "tests" / "fixtures" / "unicode" / f"categories-{version}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"# Unicode {version} general categories (scripts/make_unicode_fixture.py)\n"]
    lines += [f"{a:04X} {b:04X} {c}\n" for a, b, c in runs if c != "Cn"]
    out.write_text("".join(lines), encoding="ascii")
    print(f"wrote {out}: {len(lines) - 1} ranges")


if __name__ == "__main__":
    main()
