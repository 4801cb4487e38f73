"""How fast chunking.chunk cuts text: chunks per second on a generated Markdown-like corpus.

    python benchmarks/chunking.py [--sections 3000]     # after pip install . (or PYTHONPATH=.)

Prints chunks/s and MB/s for a few chunk sizes, then the time of the hostile sections (a
million tiny paragraphs, one 10 MB line with and without spaces, 10 MB of CJK) that a
quadratic chunker would never finish. One process, one core; figures vary with the machine.
"""

from __future__ import annotations

import argparse
import random
import time

from metis_lite.records import Document, Section
from metis_lite.text.chunking import chunk

WORDS = (
    "the leave policy gives every employee twenty five days of paid vacation per year configuração"
    " do proxy relatório server node drained Xid 79 PO-2231 warranty supplier answered portal"
).split()


def corpus(sections: int, seed: int = 7) -> Document:
    rng = random.Random(seed)

    def paragraph() -> str:
        sentences = (
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 24))).capitalize() + "."
            for _ in range(rng.randint(1, 6))
        )
        return " ".join(sentences)

    return Document(
        title="Handbook",
        kind="md",
        sections=tuple(
            Section(
                text="\n\n".join(paragraph() for _ in range(rng.randint(1, 30))),
                headings=("Handbook", f"Section {i}"),
                start_line=1 + 40 * i,
            )
            for i in range(sections)
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, default=3000)
    args = parser.parse_args()
    document = corpus(args.sections)
    chars = sum(len(s.text) for s in document.sections)
    for size in (1000, 1200, 4000):
        started = time.perf_counter()
        chunks = chunk(document, chunk_size=size)
        seconds = time.perf_counter() - started
        mean = sum(len(c.text) for c in chunks) / len(chunks)
        print(
            f"chunk_size {size:>5}: {len(chunks):>6} chunks of {mean:4.0f} chars on average,"
            f" {len(chunks) / seconds:9,.0f} chunks/s, {chars / seconds / 1e6:5.1f} MB/s"
        )
    hostile = {
        "a million tiny paragraphs": "a\n\n" * 1_000_000,
        "one 10 MB line, no space": "x" * 10_000_000,
        "one 10 MB line of words": "word " * 2_000_000,
        "10 MB of CJK, no break": "日本語のテキスト" * 1_250_000,
    }
    for name, text in hostile.items():
        started = time.perf_counter()
        chunks = chunk(Document("T", "txt", (Section(text=text, start_line=1),)))
        print(f"{name:>26}: {len(chunks):>5} chunks in {time.perf_counter() - started:.2f} s")


if __name__ == "__main__":
    main()
