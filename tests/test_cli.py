"""The command line: documented in the README, --json equal to the API's answer, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import DEAD_EMBEDDING, ROOT

from metis_lite.base import Base
from metis_lite.cli import build_parser, citation_text
from metis_lite.records import Citation


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if check:
        assert run.returncode == 0, run.stderr
    return run


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in commands():
        assert f"metis-lite {name}" in readme, name


@pytest.mark.parametrize("name", commands())
def test_every_command_has_help_with_an_example(name):
    run = cli(name, "-h")
    assert "example" in run.stdout


def test_search_json_is_the_api_answer_and_text_has_the_score_line(example_base_file, tmp_path):
    human = cli("search", str(example_base_file), "Xid 79", "--mode", "keyword", "--top-k", "2")
    assert "words " in human.stdout and "(#1)" in human.stdout
    assert "took" in human.stderr
    as_json = json.loads(
        cli("search", str(example_base_file), "Xid 79", "--mode", "keyword", "--json").stdout
    )
    assert set(as_json) == {"mode", "reranked", "warnings", "took", "results"}
    assert as_json["results"][0]["scores"]["keyword_rank"] == 1


def test_index_keyword_search_and_status(tmp_path):
    base = str(tmp_path / "b.db")
    folder = ROOT / "examples" / "handbook"
    report = json.loads(
        cli(
            "index",
            base,
            str(folder),
            "--embedding",
            "tei",
            "--embedding-url",
            DEAD_EMBEDDING["url"],
            "--json",
        ).stdout
    )
    assert report["added"] > 5 and report["chunks"] == report["without_vector"]
    again = json.loads(cli("index", base, "--json").stdout)
    assert again["added"] == 0 and again["unchanged"] == report["added"]
    found = json.loads(
        cli("search", base, "configuracao do proxy", "--mode", "keyword", "--json").stdout
    )
    assert "onfiguração" in found["results"][0]["text"]
    status = json.loads(cli("status", base, "--json").stdout)
    assert status["state"] == "Waiting" and status["documents"] == report["added"]
    assert status["chunks_without_vector"] == status["chunks"]
    text = cli("status", base).stdout
    assert "documents" in text and "last indexing: done" in text


def test_status_says_when_the_embedding_model_cannot_read_the_base(tmp_path):
    base = str(tmp_path / "pt.db")
    folder = str(ROOT / "examples" / "handbook" / "ti")  # Portuguese
    url = DEAD_EMBEDDING["url"]
    cli(
        "index",
        base,
        folder,
        "--embedding",
        "tei",
        "--embedding-url",
        url,
        "--embedding-model",
        "all-MiniLM-L6-v2",
    )
    text = cli("status", base)
    assert "warning: MODEL_LANGUAGE_MISMATCH: most of this base" in text.stderr
    assert "is Portuguese, which all-MiniLM-L6-v2 (English) does not read" in text.stderr
    status = json.loads(cli("status", base, "--json").stdout)
    assert [w["code"] for w in status["warnings"]] == ["MODEL_LANGUAGE_MISMATCH"]


def test_errors_have_codes_and_exit_codes(tmp_path):
    base = str(tmp_path / "b.db")
    cli(
        "index",
        base,
        str(ROOT / "examples" / "handbook" / "policies"),
        "--embedding",
        "tei",
        "--embedding-url",
        DEAD_EMBEDDING["url"],
    )
    dense = cli("search", base, "vacation", "--mode", "dense", check=False)
    assert dense.returncode == 3 and "EMBEDDING_MODEL_UNAVAILABLE" in dense.stderr
    missing = cli("search", str(tmp_path / "none.db"), "q", check=False)
    assert missing.returncode == 1 and "no base" in missing.stderr
    not_a_base = tmp_path / "x.db"
    not_a_base.write_text("hello")
    wrong = cli("status", str(not_a_base), check=False)
    assert wrong.returncode == 1 and "NOT_A_BASE" in wrong.stderr
    assert not_a_base.read_text() == "hello"
    bad_k = cli("search", base, "q", "--top-k", "0", check=False)
    assert bad_k.returncode == 2 and "INVALID_REQUEST" in bad_k.stderr
    for run in (dense, missing, wrong, bad_k):
        assert "Traceback" not in run.stderr


def test_a_model_option_without_its_provider_is_refused_before_a_base_is_made(tmp_path):
    # --embedding-url alone would name no provider and be dropped silently: refused (exit 2),
    # and no base file is left behind.
    for option in ("--embedding-url", "--reranker-model", "--reranker-url"):
        done = cli("index", str(tmp_path / "new.db"), option, "x", check=False)
        assert done.returncode == 2
        assert f"{option} needs --{option.split('-')[2]} PROVIDER" in done.stderr
    assert not (tmp_path / "new.db").exists()


# -- plain output (issue 15) ----------------------------------------------------------------


def score_lines(stdout: str) -> list[str]:
    return [line.strip() for line in stdout.splitlines() if line.startswith("   ") and "(#" in line]


def test_keyword_search_shows_words_only_and_the_words_step(example_base_file):
    run = cli("search", str(example_base_file), "Xid 79", "--mode", "keyword", "--top-k", "3")
    lines = score_lines(run.stdout)
    assert lines and all(line.startswith("words ") and "·" not in line for line in lines)
    summary = run.stderr.strip().splitlines()[-1]
    assert summary.startswith("3 results, keyword; took ") and summary.endswith(")")
    assert "(words " in summary and not any(s in summary for s in ("embed", "meaning", "fuse"))


def test_dense_search_shows_meaning_only_and_its_steps(example_base_file):
    run = cli("search", str(example_base_file), "Xid 79", "--mode", "dense", "--top-k", "2")
    lines = score_lines(run.stdout)
    assert lines and all(line.startswith("meaning ") and "·" not in line for line in lines)
    summary = run.stderr.strip().splitlines()[-1]
    assert "(embed " in summary and "meaning " in summary
    assert "words" not in summary and "fuse" not in summary


def test_hybrid_search_shows_meaning_words_and_fused(example_base_file):
    run = cli("search", str(example_base_file), "how many holidays do I get", "--top-k", "1")
    line = score_lines(run.stdout)[0]
    assert line.startswith("meaning ") and " · words " in line and " · fused " in line
    assert run.stderr.strip().splitlines()[-1].startswith("1 result, hybrid;")


@pytest.mark.parametrize(
    "kind, page, line, shown",
    [
        ("md", None, 23, "handbook/policies/leave.md:23"),
        ("txt", None, 4, "handbook/policies/leave.md:4"),
        ("pdf", 2, None, "handbook/policies/leave.md, page 2"),
        ("html", None, None, "handbook/policies/leave.md"),
        ("docx", None, None, "handbook/policies/leave.md"),
    ],
)
def test_citation_names_line_or_page_never_the_kind(kind, page, line, shown):
    citation = Citation("handbook", "policies/leave.md", "t", kind, (), "", page=page, line=line)
    assert citation_text(citation) == shown


def test_search_citations_of_each_kind(example_base_file):
    def first(kind: str) -> str:
        run = cli("search", str(example_base_file), "the", "--mode", "keyword", "--kind", kind)
        return run.stdout.splitlines()[0].split(" — ", 1)[1]

    assert first("html").endswith(".html") and first("docx").endswith(".docx")
    assert ", page " in first("pdf") and first("md").rsplit(":", 1)[1].isdigit()


def test_a_replaced_fact_is_marked_in_search_and_facts(tmp_path):
    path = tmp_path / "team.db"
    with Base(path, create=True) as base:
        base.configure(kind="memory")
        old = base.remember("Bruno works on billing.", stated_at="2026-01-01", subject="Bruno")
        new = base.remember(
            "Bruno moved to the data team.", stated_at="2026-11-01", replaces=[old.id]
        )
    listed = cli("facts", str(path)).stdout
    assert f"replaced by fact {new.id} on 2026-11-01" in listed
    found = cli("search", str(path), "Bruno billing", "--mode", "keyword").stdout
    block = next(b for b in found.split("\n2. ") if "billing" in b)
    assert f"replaced by fact {new.id} on 2026-11-01" in block
    assert "replaced" not in next(b for b in found.split("\n2. ") if "data team" in b)
