"""Query and document prefixes by model family (metis_lite.models.prefixes)."""

from __future__ import annotations

import pytest

from metis_lite.models.prefixes import (
    BGE_EN_INSTRUCTION,
    FAMILIES,
    WEB_SEARCH_INSTRUCTION,
    family_of,
    prefixes_for,
)

QWEN3 = (
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "
)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("intfloat/e5-base-v2", ("query: ", "passage: ")),
        ("e5-large-v2", ("query: ", "passage: ")),
        ("intfloat/multilingual-e5-large", ("query: ", "passage: ")),
        ("intfloat/multilingual-e5-large-instruct", (QWEN3, "")),
        ("nomic-ai/nomic-embed-text-v1.5", ("search_query: ", "search_document: ")),
        ("nomic-embed-text:latest", ("search_query: ", "search_document: ")),
        ("Qwen/Qwen3-Embedding-0.6B", (QWEN3, "")),
        ("qwen3-embedding:4b", (QWEN3, "")),
        (
            "BAAI/bge-small-en-v1.5",
            ("Represent this sentence for searching relevant passages: ", ""),
        ),
        ("bge-large-en-v1.5", ("Represent this sentence for searching relevant passages: ", "")),
        ("mxbai-embed-large", (BGE_EN_INSTRUCTION, "")),
        ("all-MiniLM-L6-v2", ("", "")),
        ("sentence-transformers/all-MiniLM-L6-v2", ("", "")),
        ("all-minilm", ("", "")),
        ("BAAI/bge-m3", ("", "")),
        ("bge-m3:latest", ("", "")),
        ("BAAI/bge-multilingual-gemma2", ("", "")),
        ("text-embedding-3-small", ("", "")),
        ("tei@http://127.0.0.1:8080", ("", "")),
    ],
)
def test_prefixes_by_family(model: str, expected: tuple[str, str]) -> None:
    assert prefixes_for(model) == expected


def test_the_qwen3_instruction_is_the_documented_one() -> None:
    assert WEB_SEARCH_INSTRUCTION == QWEN3


def test_explicit_prefixes_override_the_family_each_on_its_own() -> None:
    assert prefixes_for("intfloat/e5-base-v2", query_prefix="q: ") == ("q: ", "passage: ")
    assert prefixes_for("intfloat/e5-base-v2", document_prefix="") == ("query: ", "")
    assert prefixes_for("all-MiniLM-L6-v2", query_prefix="x ", document_prefix="y ") == ("x ", "y ")


def test_an_empty_explicit_prefix_means_none_not_the_default() -> None:
    assert prefixes_for("nomic-embed-text", query_prefix="", document_prefix="") == ("", "")


def test_models_without_prefixes_come_before_look_alikes() -> None:
    # bge-m3 must not fall through to BGE English; MiniLM names never pick up E5's markers.
    assert family_of("BAAI/bge-m3").name.startswith("BGE-M3")
    assert family_of("multilingual-e5-small") is not None
    assert family_of("some-e5less-model") is None


def test_the_table_is_data() -> None:
    names = [family.name for family in FAMILIES]
    assert len(names) == len(set(names))
    for family in FAMILIES:
        assert family.pattern.pattern
