"""Query and document prefixes by model family, read from the model's name.

Some embedding models were trained with a marker in front of the text, and retrieve much worse
without it: E5 reads "query: " before a question and "passage: " before a passage, Nomic reads
"search_query: " and "search_document: ", Qwen3 Embedding and the instruction-tuned E5 models read
an instruction before the question only, BGE English v1.5 reads its instruction before the
question only. Others (MiniLM, BGE-M3, multilingual BGE, OpenAI's) take the text as it is.

The families are one table, tried in order, first match wins; a name matches when the family's
pattern is found anywhere in the lower-cased name, so "intfloat/e5-base-v2",
"nomic-embed-text:latest" (Ollama) and "BAAI/bge-small-en-v1.5" all resolve. A base's spec may
name its own prefixes (`embedding.query_prefix`, `embedding.document_prefix`); those win,
and "" there means "no prefix" rather than "the default".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

WEB_SEARCH_INSTRUCTION = (
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "
)
"""Qwen3 Embedding's (and instruction-tuned E5's) task instruction for retrieval, from their cards."""

BGE_EN_INSTRUCTION = "Represent this sentence for searching relevant passages: "
"""BGE English's query instruction (also used by mxbai-embed-large), from its model card."""


@dataclass(frozen=True)
class Family:
    """One row of the table: a family, how to recognise its name, and its two prefixes."""

    name: str
    pattern: re.Pattern[str]
    query_prefix: str
    document_prefix: str


def _family(name: str, pattern: str, query_prefix: str = "", document_prefix: str = "") -> Family:
    return Family(name, re.compile(pattern), query_prefix, document_prefix)


FAMILIES: tuple[Family, ...] = (
    # Without prefixes, listed first so that e.g. "bge-m3" never falls through to BGE English.
    _family("BGE-M3 / multilingual BGE", r"bge-m3|bge-multilingual"),
    _family("MiniLM", r"minilm"),
    # With prefixes.
    _family("Qwen3 Embedding", r"qwen3-embedding", WEB_SEARCH_INSTRUCTION),
    _family("E5 instruct", r"e5-.*instruct", WEB_SEARCH_INSTRUCTION),
    _family("E5", r"(^|[/_-])e5-", "query: ", "passage: "),
    _family("Nomic", r"nomic-embed-text", "search_query: ", "search_document: "),
    _family("BGE English", r"bge-(small|base|large)-en", BGE_EN_INSTRUCTION),
    _family("mxbai", r"mxbai-embed-large", BGE_EN_INSTRUCTION),
)


def family_of(model_name: str) -> Family | None:
    """The first family in FAMILIES whose pattern occurs in the name, or None."""
    lowered = model_name.lower()
    for family in FAMILIES:
        if family.pattern.search(lowered):
            return family
    return None


def prefixes_for(
    model_name: str,
    *,
    query_prefix: str | None = None,
    document_prefix: str | None = None,
) -> tuple[str, str]:
    """(query prefix, document prefix) for a model; an explicit value (even "") overrides each."""
    family = family_of(model_name)
    default_query = family.query_prefix if family else ""
    default_document = family.document_prefix if family else ""
    return (
        default_query if query_prefix is None else query_prefix,
        default_document if document_prefix is None else document_prefix,
    )
