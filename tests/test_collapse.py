"""One result per text: a passage nearly the same as one ranked before it is that result's
place (`also_in`), not a result of its own, and `top_k` counts distinct results — in Python,
JSON, the CLI, HTTP and MCP."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from conftest import ROOT, words_only_base
from serving import served

from metis_lite.agents.tools import Agent
from metis_lite.retrieval.collapse import (
    LENGTHS_RATIO,
    SAME_TEXT_JACCARD,
    SAME_TEXT_SHARE,
    same_text,
    shingles,
)
from metis_lite.service.serialize import answer_to_json
from metis_lite.text.tokenizer import VERSION

TIMEOUTS = (
    "Timeouts. If the process does not terminate after timeout seconds, a TimeoutExpired "
    "exception will be raised. Catching this exception and retrying communication will not "
    "lose any output. The child process is not killed if the timeout expires, so in order to "
    "clean up properly a well-behaved application should kill the child process and finish "
    "communication."
)
"""A passage of a documentation page, which its source file holds too, in its markup."""

TIMEOUTS_SOURCE = (
    "Timeouts\n--------\n\nIf the process does not terminate after *timeout* seconds, a "
    ":exc:`TimeoutExpired` exception will be raised. Catching this exception and retrying "
    "communication will not lose any output.\n\nThe child process is not killed if the timeout "
    "expires, so in order to cleanup properly a well-behaved application should kill the "
    "child process and finish communication."
)

PIPES = (
    "Pipes. The stdout and stderr arguments take PIPE to capture the child's output, and the "
    "timeout argument bounds how long the parent waits for the process to terminate."
)
"""Another passage of the same page, in the same words: not the same text."""


def near(text: str) -> frozenset:
    return shingles(text, VERSION)


def test_the_measure_tells_a_copy_from_a_neighbour():
    assert same_text(near(TIMEOUTS), near(TIMEOUTS_SOURCE))  # markup and a cut apart
    assert not same_text(near(TIMEOUTS), near(PIPES))  # one page, one vocabulary
    words = TIMEOUTS.split()
    shifted = " ".join(words[len(words) // 5 :] + ["Then", "the", "next", "paragraph", "starts."])
    assert same_text(near(TIMEOUTS), near(shifted))  # a chunk cut a fifth further on
    half = " ".join(words[len(words) // 2 :])
    assert not same_text(near(TIMEOUTS), near(half))  # half of it is not the same passage
    # Short texts: the same words only (a fact and the one that replaced it stay two).
    assert not same_text(
        near("Ana's role is backend engineer."), near("Ana's role is frontend engineer.")
    )
    assert same_text(near("Closed on Mondays."), near("closed on mondays"))
    # Scripts without spaces are read by the word rules too (bigrams).
    zh = "北京是中华人民共和国的首都，也是全国的政治中心和文化中心，有三千多年的建城史。"
    assert same_text(near(zh), near(zh + "它位于华北平原的北部。"))
    assert not same_text(near(zh), near("上海是中国最大的城市，位于长江入海口，是经济和金融中心。"))
    assert 0 < SAME_TEXT_JACCARD < 1


OPENING = (
    "A virtual environment is created on top of an existing Python installation, known as "
    "the virtual environment's base Python, and may optionally be isolated from the packages "
    "in the base environment, so only those explicitly installed in the virtual environment "
    "are available."
)
MIDDLE = (
    "When used from within a virtual environment, common installation tools such as pip will "
    "install Python packages into a virtual environment without needing to be told to do so "
    "explicitly. A virtual environment is used to contain a specific Python interpreter and "
    "software libraries and binaries which are needed to support a project, and it is "
    "considered disposable: it should be simple to delete and recreate it from scratch."
)
CLOSING = (
    "Virtual environments are not checked into source control such as Git, and they are not "
    "considered movable or copyable: you just recreate the same environment in the target "
    "location, with the packages your project lists as its requirements in a file."
)
"""Three paragraphs of one page: a passage of OPENING and MIDDLE in one file, and of MIDDLE
and CLOSING in another, is the same text cut at another place (as a page and its source file
are chunked by their own markup)."""


def test_passages_of_two_documents_that_share_half_the_shorter_are_one_text():
    first, second = near(f"{OPENING} {MIDDLE}"), near(f"{MIDDLE} {CLOSING}")
    shared = len(first & second)
    assert shared / len(first | second) < SAME_TEXT_JACCARD  # Jaccard counts both ends
    assert shared / min(len(first), len(second)) >= SAME_TEXT_SHARE
    assert same_text(first, second, one_document=False)
    # Within one document passages are cut without overlap: what they share is phrasing, and
    # two of its passages that repeat half their words stay two (Jaccard alone).
    assert not same_text(first, second, one_document=True)
    assert not same_text(first, second)
    # A passage wholly inside one of another document, of about its length, is that text; a
    # neighbour is not, and neither is a list that holds it among much else (a command's
    # summary in the list of every command).
    assert same_text(near(MIDDLE), first, one_document=False)
    listing = near(f"{OPENING} {MIDDLE} {CLOSING} {TIMEOUTS}")
    assert near(MIDDLE) < listing and len(near(MIDDLE)) < LENGTHS_RATIO * len(listing)
    assert not same_text(near(MIDDLE), listing, one_document=False)
    assert not same_text(near(OPENING), near(CLOSING), one_document=False)
    assert not same_text(near(TIMEOUTS), near(PIPES), one_document=False)


def test_a_text_cut_at_other_places_in_two_files_is_one_result_but_not_in_one_file(tmp_path):
    question = "install packages into a virtual environment disposable"
    site = tmp_path / "site"
    (site / "_sources").mkdir(parents=True)
    (site / "venv.md").write_text(f"# venv\n\n{OPENING}\n\n{MIDDLE}\n", encoding="utf-8")
    (site / "_sources" / "venv.txt").write_text(f"{MIDDLE}\n\n{CLOSING}\n", encoding="utf-8")
    with words_only_base(tmp_path / "site.db", site) as base:
        base.index()
        every = base.search(question, mode="keyword", top_k=10, collapse=False).results
        [one] = base.search(question, mode="keyword", top_k=10).results
    assert len(every) == 2
    assert one.chunk_id == every[0].chunk_id
    assert [p.chunk_id for p in one.also_in] == [every[1].chunk_id]
    assert {one.citation.document, one.also_in[0].citation.document} == {
        "venv.md",
        "_sources/venv.txt",
    }
    # One file's two passages that repeat half their words: two results.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "notes.md").write_text(
        f"# Creating one\n\n{OPENING}\n\n{MIDDLE}\n\n# Keeping one\n\n{MIDDLE}\n\n{CLOSING}\n",
        encoding="utf-8",
    )
    with words_only_base(tmp_path / "notes.db", notes) as base:
        base.index()
        answer = base.search(question, mode="keyword", top_k=10)
    assert [r.citation.headings for r in answer.results] in (
        [("Creating one",), ("Keeping one",)],
        [("Keeping one",), ("Creating one",)],
    )
    assert all(not r.also_in for r in answer.results)


@pytest.fixture
def docs(tmp_path):
    """A site's page and its source file (the same passage in two markups), a notice repeated on
    three pages, and pages of their own."""
    folder = tmp_path / "docs"
    (folder / "_sources").mkdir(parents=True)
    (folder / "subprocess.html").write_text(
        f"<html><head><title>subprocess</title></head><body><main><h1>subprocess</h1>"
        f"<p>{TIMEOUTS}</p><p>{PIPES}</p></main></body></html>",
        encoding="utf-8",
    )
    (folder / "_sources" / "subprocess.rst.txt").write_text(TIMEOUTS_SOURCE, encoding="utf-8")
    notice = (
        "This page describes a feature that will be removed: the timeout handling of the legacy "
        "spawn functions is kept only for old scripts and will go in the next major release."
    )
    for name in ("spawn", "popen2", "commands"):
        (folder / f"{name}.md").write_text(
            f"# {name}\n\n{notice}\n\n# Use\n\nThe {name} module starts a program and waits "
            f"for it; its own options are listed in the {name} reference table.\n",
            encoding="utf-8",
        )
    (folder / "signals.md").write_text(
        "# Signals\n\nA process that does not terminate in time can be sent SIGTERM, then "
        "SIGKILL after a grace period; the timeout of the wait is the caller's.\n",
        encoding="utf-8",
    )
    base = words_only_base(tmp_path / "docs.db", folder)
    base.index()
    yield base
    base.close()


def test_a_page_and_its_source_file_are_one_result(docs):
    question = "process does not terminate after timeout seconds TimeoutExpired"
    every = docs.search(question, mode="keyword", top_k=10, collapse=False).results
    answer = docs.search(question, mode="keyword", top_k=10)
    documents = [r.citation.document for r in every]
    assert {"subprocess.html", "_sources/subprocess.rst.txt"} <= set(documents)
    first = answer.results[0]
    [copy] = first.also_in
    assert {first.citation.document, copy.citation.document} == {
        "subprocess.html",
        "_sources/subprocess.rst.txt",
    }
    shown = [r.citation.document for r in answer.results]
    assert copy.citation.document not in shown  # never the same passage twice
    assert len(shown) == len(set(shown))
    # The result is the one that ranked first, its scores its own.
    assert (first.chunk_id, first.scores) == (every[0].chunk_id, every[0].scores)


def test_a_notice_on_three_pages_is_one_result_and_top_k_counts_distinct_results(docs):
    question = "timeout of the legacy spawn functions"
    every = docs.search(question, mode="keyword", top_k=3, collapse=False).results
    assert [r.text for r in every].count(every[0].text) == 3  # the notice, three times
    answer = docs.search(question, mode="keyword", top_k=3)
    assert len(answer.results) == 3
    notice = answer.results[0]
    assert len(notice.also_in) == 2
    pages = {notice.citation.document, *(p.citation.document for p in notice.also_in)}
    assert pages == {"spawn.md", "popen2.md", "commands.md"}
    texts = [r.text for r in answer.results]
    assert len(set(texts)) == 3
    # JSON: the places after the result, each with its citation.
    item = answer_to_json(answer)["results"][0]
    assert [p["citation"]["document"] for p in item["also_in"]] == [
        p.citation.document for p in notice.also_in
    ]
    assert "also_in" not in answer_to_json(answer)["results"][1]  # absent when none


def test_the_cli_says_also_in_and_all_copies_lists_each(docs):
    question = "timeout of the legacy spawn functions"

    def cli(*extra: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "metis_lite", "search", str(docs.path), question]
            + ["--mode", "keyword", "--top-k", "2", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    shown = cli()
    assert shown.count("   also in docs/") == 2
    every = cli("--all-copies")
    assert "also in" not in every
    assert sum(f"docs/{name}.md" in every for name in ("spawn", "popen2", "commands")) == 2
    as_json = json.loads(cli("--json"))
    assert len(as_json["results"][0]["also_in"]) == 2


def test_http_and_mcp_take_collapse(docs):
    question = "timeout of the legacy spawn functions"
    path = str(docs.path)
    docs.close()
    with served([path]) as server:
        url = f"{server.url}/v1/bases/docs/search"
        body = {"question": question, "mode": "keyword", "top_k": 3}
        one = httpx.post(url, json=body, timeout=30).json()["results"]
        every = httpx.post(url, json={**body, "collapse": False}, timeout=30).json()["results"]
        assert len(one[0]["also_in"]) == 2 and "base" not in one[0]["also_in"][0]
        assert all("also_in" not in r for r in every)
        assert len({r["text"] for r in every}) == 1
        refused = httpx.post(url, json={**body, "collapse": "no"}, timeout=30)
        assert refused.status_code == 400
        many = httpx.post(
            f"{server.url}/v1/search", json={**body, "bases": ["docs"]}, timeout=30
        ).json()["results"]
        assert [p["base"] for p in many[0]["also_in"]] == ["docs", "docs"]
    from metis_lite.base.core import Base

    with Base(path) as base:
        agent = Agent({"docs": base})
        try:
            data = agent.call("search", {"question": question, "top_k": 3}, None)
            assert len(data.data["results"][0]["also_in"]) == 2
            assert data.text.count("also in docs/") == 2
            flat = agent.call("search", {"question": question, "collapse": False}, None)
            assert "also_in" not in flat.data["results"][0]
        finally:
            agent.close()
