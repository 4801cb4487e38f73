"""Where a chunk is, beyond its page and line: its heading's anchor in an HTML or EPUB page and
whether OCR read it, kept by the base (`chunk_places`) from the parser's sections to a result's
citation in Python, JSON and the CLI, and nothing for chunks that have neither."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from conftest import words_only_base

from metis_lite.cli.search import citation_text
from metis_lite.records import Citation, Document, Section
from metis_lite.service.serialize import result_to_json
from metis_lite.text.chunking import chunk

LONG = " It is said here at some length, so that the section stands as a passage of its own."


def test_a_sections_anchor_and_ocr_reach_the_citation(tmp_path):
    document = Document(
        "Scanned and linked",
        "html",
        (
            Section("The wombat digs burrows at night." + LONG, ("Burrows",), anchor="burrows"),
            Section("Its teeth never stop growing." + LONG, ("Teeth",), page=2, ocr=True),
            Section("Plain words about the quokka." + LONG, ("Quokka",)),
        ),
    )
    chunks = chunk(document)
    assert [(c.anchor, c.ocr) for c in chunks] == [("burrows", False), (None, True), (None, False)]
    with words_only_base(tmp_path / "b.db") as base:
        store = base.store
        source = store.add_source("s", str(tmp_path))
        store.replace_document(
            source_id=source,
            path="page.html",
            kind="html",
            title=document.title,
            content_hash="h",
            size=1,
            mtime=None,
            chunks=chunks,
        )
        found = {
            r.citation.headings[0]: r
            for q in ("wombat", "teeth", "quokka")
            for r in base.search(q, mode="keyword").results
        }
    burrows, teeth, quokka = found["Burrows"], found["Teeth"], found["Quokka"]
    assert (burrows.citation.anchor, burrows.citation.ocr) == ("burrows", False)
    assert (teeth.citation.anchor, teeth.citation.ocr) == (None, True)
    assert result_to_json(burrows)["citation"]["anchor"] == "burrows"
    assert "ocr" not in result_to_json(burrows)["citation"]
    assert result_to_json(teeth)["citation"]["ocr"] is True
    assert not {"anchor", "ocr"} & result_to_json(quokka)["citation"].keys()
    assert citation_text(burrows.citation) == "s/page.html#burrows"
    assert citation_text(teeth.citation) == "s/page.html, page 2 (OCR)"
    with closing(sqlite3.connect(tmp_path / "b.db")) as plain:
        assert plain.execute(
            "SELECT anchor, ocr FROM chunk_places ORDER BY chunk_id"
        ).fetchall() == [
            ("burrows", 0),
            (None, 1),
        ]


def test_a_removed_chunk_takes_its_place_with_it(tmp_path):
    with words_only_base(tmp_path / "b.db") as base:
        store = base.store
        source = store.add_source("s", str(tmp_path))
        chunks = chunk(Document("T", "html", (Section("Words." + LONG, ("H",), anchor="h"),)))
        for _ in range(2):  # written again: the old chunk and its place go
            store.replace_document(
                source_id=source,
                path="p.html",
                kind="html",
                title="T",
                content_hash="h",
                size=1,
                mtime=None,
                chunks=chunks,
            )
    with closing(sqlite3.connect(tmp_path / "b.db")) as plain:
        assert plain.execute("SELECT count(*) FROM chunk_places").fetchone() == (1,)


def test_a_citation_without_a_place_reads_as_before():
    citation = Citation("s", "a.md", "T", "md", (), "", line=3)
    assert (citation.anchor, citation.ocr, citation_text(citation)) == (None, False, "s/a.md:3")
