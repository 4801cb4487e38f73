"""A base records the chunking rules its chunks were cut by (chunking.RULES_VERSION, in `meta`):
a base cut by older rules says so in every search and its status (CHUNKS_OUTDATED), and `index`
cuts its documents again, changed or not, embedding again only the chunks whose text changed."""

from __future__ import annotations

import shutil

from conftest import FIXTURES, words_only_base
from word_models import WORDS, WordsEmbedder

from metis_lite.parsing import parse
from metis_lite.records import Document, Section
from metis_lite.text import chunking
from metis_lite.text.chunking import LONE_FRAGMENT_CHARS, RULES_VERSION, chunk

UNCHANGED = """# Onboarding

## Your laptop

Collect your laptop at the reception on your first morning; IT has set it up with your account.

## Your badge

Your badge opens the office from seven to eight and the car park; keep it with you at all times.
"""


def cut_by_rules_1(document: Document):
    """The chunks rules 1 cut: each section alone, a lone fragment a chunk of its own."""
    return [
        c
        for section in document.sections
        for c in chunk(Document(document.title, document.kind, (section,)))
    ]


def old_rules_base(tmp_path):
    """A base indexed as version 1 of the rules left it: the same files, unchanged since, their
    page marker and "Ver abajo." chunks of their own, and no rules recorded."""
    folder = tmp_path / "docs"
    shutil.copytree(FIXTURES / "fragments", folder)
    (folder / "onboarding.md").write_text(UNCHANGED, encoding="utf-8")
    base = words_only_base(tmp_path / "old.db", folder)
    base.configure(embedding=WORDS)
    base.index()
    store = base.store
    for doc_id, path, title in store.db.execute(
        "SELECT id, path, title FROM documents ORDER BY id"
    ).fetchall():
        row = store.db.execute(
            "SELECT source_id, kind, content_hash, size, mtime FROM documents WHERE id = ?",
            (doc_id,),
        ).fetchone()
        source_id, kind, content_hash, size, mtime = row
        store.replace_document(
            source_id=source_id,
            path=path,
            kind=kind,
            title=title,
            content_hash=content_hash,
            size=size,
            mtime=mtime,
            chunks=cut_by_rules_1(parse(folder / path)),
        )
    model = base.status().embedding  # the old chunks' vectors, as the old base had them
    lacking = store.chunks_lacking_vectors(model, 100)
    embedded = WordsEmbedder().embed([text for _, text in lacking])
    store.put_vectors(model, zip([chunk_id for chunk_id, _ in lacking], embedded, strict=True))
    with store.writing():
        store.db.execute("DELETE FROM meta WHERE key = 'chunk_rules'")
    return base


def texts(base) -> dict[str, tuple[int, bytes | None]]:
    rows = base.store.db.execute(
        "SELECT c.text, c.id, v.embedding FROM chunks c LEFT JOIN vectors v ON v.chunk_id = c.id"
    )
    return {text: (chunk_id, vector) for text, chunk_id, vector in rows}


def test_a_new_base_records_the_rules_its_chunks_are_cut_by(tmp_path):
    with words_only_base(tmp_path / "new.db", FIXTURES / "fragments") as base:
        assert base.store.chunk_rules == RULES_VERSION == 3
        base.index()
        assert not base.store.chunks_outdated
        assert "CHUNKS_OUTDATED" not in [w.code for w in base.status().warnings]


def test_index_cuts_a_base_of_older_rules_again_and_keeps_unchanged_chunks_vectors(tmp_path):
    with old_rules_base(tmp_path) as base:
        before = texts(base)
        assert {"Página 3", "Ver abajo."} <= set(before)  # lone fragments, chunks of their own
        assert all(vector is not None for _, vector in before.values())
        assert base.store.chunk_rules == 1 and base.store.chunks_outdated
        # Until `index` runs, every search and the status say so; nothing changed is re-read.
        assert "CHUNKS_OUTDATED" in [w.code for w in base.status().warnings]
        for mode in ("keyword", "hybrid"):
            answer = base.search("dirección", mode=mode)
            assert chunking.CHUNKS_OUTDATED in answer.warnings

        report = base.index()

        assert report.updated == 3 and report.unchanged == 0  # every document, unchanged files too
        after = texts(base)
        assert all(len(text) >= LONE_FRAGMENT_CHARS for text in after)
        assert base.store.chunk_rules == RULES_VERSION and not base.store.chunks_outdated
        assert "CHUNKS_OUTDATED" not in [w.code for w in base.status().warnings]
        assert chunking.CHUNKS_OUTDATED not in base.search("dirección").warnings
        # Only the chunks whose text changed were embedded again; the others kept their vector.
        kept = set(before) & set(after)
        assert kept and all(after[t][0] != before[t][0] for t in kept)  # new chunk rows …
        assert all(after[t][1] == before[t][1] for t in kept)  # … with the same vectors
        assert report.embedded == len(set(after) - kept) == 2
        assert report.without_vector == 0
        # The next run reads nothing again.
        assert base.index().unchanged == 3


PAGE = """<html><head><title>Gears</title></head><body>
<div class="navheader"><a href="prev.html">Prev</a> | <a href="index.html">Home</a></div>
<div class="sect1" id="gears"><h2>Gears</h2><p>A gearbox waits thirty seconds for its teeth.</p>
</div><div class="navfooter"><a href="next.html">Next</a> | <a href="index.html">Home</a></div>
</body></html>"""


def test_a_base_of_rules_2_reads_its_web_pages_again_and_nothing_else(tmp_path):
    """Version 3 reads web pages without their site and cites their anchors: a base cut by
    version 2 says so and `index` reads its pages again, its other documents (a PDF's OCR
    among them) kept as they are."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "onboarding.md").write_text(UNCHANGED, encoding="utf-8")
    (folder / "gears.html").write_text(PAGE, encoding="utf-8")
    with words_only_base(tmp_path / "two.db", folder) as base:
        base.configure(embedding=WORDS)
        base.index()
        store = base.store
        # As version 2 read the page: its bars among its words, no anchor.
        (doc_id, source_id, content_hash, size, mtime) = store.db.execute(
            "SELECT id, source_id, content_hash, size, mtime FROM documents"
            " WHERE path = 'gears.html'"
        ).fetchone()
        old = Document(
            "Gears",
            "html",
            (
                Section(
                    text="Prev | Home\n\nA gearbox waits thirty seconds for its teeth.\n\n"
                    "Next | Home",
                    headings=("Gears",),
                ),
            ),
        )
        store.replace_document(
            source_id=source_id,
            path="gears.html",
            kind="html",
            title="Gears",
            content_hash=content_hash,
            size=size,
            mtime=mtime,
            chunks=chunk(old),
        )
        with store.writing():
            store.db.execute("UPDATE meta SET value = '2' WHERE key = 'chunk_rules'")
        assert store.chunks_outdated
        assert "CHUNKS_OUTDATED" in [w.code for w in base.status().warnings]

        report = base.index()

        assert (report.updated, report.unchanged) == (1, 1)  # the page; not the Markdown
        assert store.chunk_rules == RULES_VERSION and not store.chunks_outdated
        [hit] = base.search("gearbox teeth", mode="keyword").results
        assert "Home" not in hit.text and hit.citation.anchor == "gears"
        assert base.index().unchanged == 2


def test_a_base_of_rules_2_without_web_pages_is_not_outdated(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "onboarding.md").write_text(UNCHANGED, encoding="utf-8")
    with words_only_base(tmp_path / "two.db", folder) as base:
        base.index()
        with base.store.writing():
            base.store.db.execute("UPDATE meta SET value = '2' WHERE key = 'chunk_rules'")
        assert not base.store.chunks_outdated
        assert "CHUNKS_OUTDATED" not in [w.code for w in base.status().warnings]
        assert base.index().unchanged == 1
