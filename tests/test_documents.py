"""A document's file read back for a citation's link: only what the base indexed, only inside
its source, never through a link or a pipe swapped in after indexing."""

from __future__ import annotations

import os

import pytest

from metis_lite.errors import DocumentNotFound
from metis_lite.store.document_file import MEDIA_TYPES, read_document
from tests.conftest import words_only_base


@pytest.fixture
def indexed(tmp_path):
    docs = tmp_path / "docs"
    (docs / "policies").mkdir(parents=True)
    (docs / "policies" / "leave.md").write_text(
        "# Leave\n\nVacation is 25 days.\n", encoding="utf-8"
    )
    (docs / "notes.txt").write_text("plain words\n", encoding="utf-8")
    secret = tmp_path / "secret.txt"
    secret.write_text("outside the source\n", encoding="utf-8")
    base = words_only_base(tmp_path / "b.db", docs)
    base.index()
    yield base, docs, secret
    base.close()


def test_an_indexed_document_is_read_back_as_it_is_on_disk(indexed):
    base, docs, _ = indexed
    document = read_document(base.store, "docs", "policies/leave.md")
    assert document.content == (docs / "policies" / "leave.md").read_bytes()
    assert document.kind == "md"
    assert document.media_type == MEDIA_TYPES["md"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    "source, path",
    [
        ("docs", "missing.md"),  # never indexed
        ("docs", "../secret.txt"),  # outside the source by name
        ("nope", "notes.txt"),  # no such source
        ("docs", "policies"),  # a folder
        ("docs", "/etc/passwd"),
    ],
)
def test_only_documents_the_base_holds_can_be_read(indexed, source, path):
    base, _, _ = indexed
    with pytest.raises(DocumentNotFound) as caught:
        read_document(base.store, source, path)
    assert caught.value.code == "DOCUMENT_NOT_FOUND" and caught.value.status == 404


def test_a_symlink_swapped_in_after_indexing_is_not_followed(indexed):
    base, docs, secret = indexed
    target = docs / "notes.txt"
    target.unlink()
    target.symlink_to(secret)
    with pytest.raises(DocumentNotFound, match="cannot be opened"):
        read_document(base.store, "docs", "notes.txt")


def test_a_folder_swapped_for_a_link_outside_is_refused(indexed, tmp_path):
    base, docs, _ = indexed
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "leave.md").write_text("not the indexed file\n", encoding="utf-8")
    (docs / "policies" / "leave.md").unlink()
    (docs / "policies").rmdir()
    (docs / "policies").symlink_to(outside)
    with pytest.raises(DocumentNotFound, match="outside its source"):
        read_document(base.store, "docs", "policies/leave.md")


def test_a_source_folder_swapped_for_a_link_is_never_followed(indexed, tmp_path):
    base, docs, _ = indexed
    outside = tmp_path / "elsewhere"
    (outside / "policies").mkdir(parents=True)
    (outside / "policies" / "leave.md").write_text("not the indexed file\n", encoding="utf-8")
    docs.rename(tmp_path / "docs-moved")
    docs.symlink_to(outside)  # every path inside now leads inside the link's target
    with pytest.raises(DocumentNotFound, match="source folder is now a symlink"):
        read_document(base.store, "docs", "policies/leave.md")


def test_a_pipe_in_place_of_the_file_is_refused_without_blocking(indexed):
    base, docs, _ = indexed
    target = docs / "notes.txt"
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(DocumentNotFound, match="not a regular file"):
        read_document(base.store, "docs", "notes.txt")


def test_a_deleted_file_is_not_found(indexed):
    base, docs, _ = indexed
    (docs / "notes.txt").unlink()
    with pytest.raises(DocumentNotFound):
        read_document(base.store, "docs", "notes.txt")


def test_a_fact_has_no_file(tmp_path):
    base = words_only_base(tmp_path / "m.db")
    base.configure(kind="memory")
    base.remember("Ana leads the Lisbon office", subject="Ana", key="office")
    source, path = base.store.db.execute(
        "SELECT s.name, d.path FROM documents d JOIN sources s ON s.id = d.source_id"
    ).fetchone()
    assert source == "metis-m"
    with pytest.raises(DocumentNotFound, match="note"):
        read_document(base.store, source, path)
    base.close()
