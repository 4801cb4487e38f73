"""One home for a run and a typed spec: ingest.index does an indexing run and reports it; a
base's spec is a frozen BaseSpec parsed once, a newer or damaged one refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import DEAD_EMBEDDING, words_only_base

from metis_lite.base.core import Base
from metis_lite.errors import SchemaTooNew, SpecInvalid
from metis_lite.indexing import ingest
from metis_lite.store import Store
from metis_lite.store.spec import SPEC_VERSION, BaseSpec, parse_spec


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_spec_is_a_frozen_dataclass_parsed_once(tmp_path):
    with words_only_base(tmp_path / "b.db") as base:
        spec = base.spec
        assert isinstance(spec, BaseSpec) and spec is base.spec  # not parsed again
        assert (spec.kind, spec.chunk_size, spec.version) == ("documents", 1200, SPEC_VERSION)
        assert dict(spec.embedding) == DEAD_EMBEDDING and spec["embedding"] == DEAD_EMBEDDING
        with pytest.raises(dataclasses.FrozenInstanceError):
            spec.chunk_size = 10  # type: ignore[misc]
        with pytest.raises(TypeError):
            spec.embedding["url"] = "http://elsewhere"  # type: ignore[index]
        base.configure(chunk_size=600)
        assert base.spec.chunk_size == 600 and spec.chunk_size == 1200
        with Base(tmp_path / "b.db") as other:  # another connection's write is seen
            other.configure(kind="memory")
        assert base.spec.is_memory


def test_a_spec_without_a_version_is_version_1(tmp_path):
    assert parse_spec({"kind": "memory"}).version == 1
    assert parse_spec({}).model_label == "multilingual-e5-small"


def test_a_newer_spec_is_refused_and_the_base_left_untouched(tmp_path):
    path = tmp_path / "b.db"
    words_only_base(path).close()
    with Store(path) as store:
        store.set_spec({"version": SPEC_VERSION + 1})
    before = path.read_bytes()
    with pytest.raises(SchemaTooNew) as newer:
        Base(path)
    assert newer.value.code == "SCHEMA_TOO_NEW" and "spec version" in newer.value.message
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    "values, key",
    [
        ({"chunk_size": "big"}, "chunk_size"),
        ({"kind": "diary"}, "kind"),
        ({"embedding": "e5"}, "embedding"),
        ({"reranker": 3}, "reranker"),
        ({"dimension": -1}, "dimension"),
        ({"fusion": "average"}, "fusion"),
        ({"version": "one"}, "version"),
    ],
)
def test_a_spec_value_of_the_wrong_type_is_refused_naming_its_key(tmp_path, values, key):
    path = tmp_path / "b.db"
    words_only_base(path).close()
    with Store(path) as store:
        store.set_spec(values)
    with pytest.raises(SpecInvalid, match=key) as invalid:
        Base(path)
    assert invalid.value.code == "SPEC_INVALID"


def test_ingest_index_does_the_run_and_its_report(tmp_path):
    src = tmp_path / "src"
    write(src, "a.md", "# A\n\nThe aardvark.\n")
    write(src, "b.txt", "The bilby.\n")
    with words_only_base(tmp_path / "b.db", src) as base:
        with Store(base.path) as writer:
            spec = parse_spec(writer.spec())
            report = ingest.index(writer, spec, base.embedder, document_prefix="")
            assert isinstance(report, ingest.IndexReport)
            assert (report.added, report.chunks, report.without_vector) == (2, 2, 2)
            assert report.warnings[0].code == "EMBEDDING_MODEL_UNAVAILABLE"
            run = writer.last_run()
            assert (run["state"], run["added"], run["skipped"]) == ("done", 2, 0)

            def interrupt(stage: str, done: int, total: int) -> None:
                if stage == "files" and done == total:  # after the last file was written
                    raise KeyboardInterrupt

            write(src, "c.md", "# C\n\nThe capybara.\n")
            with pytest.raises(KeyboardInterrupt):
                ingest.index(writer, spec, base.embedder, document_prefix="", progress=interrupt)
            assert writer.last_run()["state"] == "interrupted"
        assert base.index().added == 0  # c.md was written before the interruption
