"""One pipeline: a search of one base is a search of several with one, and both answer as the
two pipelines before them did (tests/pipeline_cases.py: 436 searches of the handbook, FaQuAD
and a memory base, alone and together, in every mode and fusion, reranked or not, filtered,
empty, cut and unmatched; tests/fixtures/pipeline/answers.jsonl holds what the pipelines before
their merge answered, recorded again only where a change meant to move answers moved them, as
when one result per text came to join two FaQuAD passages of one regulation cut at other
places: 9 answers' places, and 2 reranked answers' last result): the same results, order, texts and warnings, every score to within the
last bits that the CPU's vector instructions decide (pipeline_cases.FLOAT_TOLERANCE)."""

from __future__ import annotations

import json
from contextlib import ExitStack

import pytest
from conftest import ROOT
from pipeline_cases import build, digest, record, same
from word_models import attach

from metis_lite import Base, search_bases
from metis_lite.records import Answer

ANSWERS = ROOT / "tests" / "fixtures" / "pipeline" / "answers.jsonl"


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    paths = build(tmp_path_factory.mktemp("pipeline"), attach)
    with ExitStack() as stack:
        yield {name: stack.enter_context(attach(Base(path))) for name, path in paths.items()}


def test_every_search_answers_as_before(bases):
    expected = [json.loads(line) for line in ANSWERS.read_text(encoding="utf-8").splitlines()]
    found = [digest(row) for row in record(bases)]
    assert len(found) == len(expected)
    differ = [(old, new) for old, new in zip(expected, found, strict=True) if not same(old, new)]
    assert not differ, f"{len(differ)} of {len(found)} answers changed; the first: {differ[0]}"


def test_a_search_of_one_base_is_the_search_of_several_with_that_one(bases):
    for name in ("handbook", "team"):
        for mode in ("keyword", "dense", "hybrid"):
            alone = bases[name].search("who approves my expenses", mode=mode, top_k=7)
            several = search_bases([bases[name]], "who approves my expenses", mode=mode, top_k=7)
            assert isinstance(alone, Answer)
            assert alone.results == several.results
            assert alone.reranked == several.reranked
            assert [w.code for w in alone.warnings] == [w.code for w in several.warnings]
