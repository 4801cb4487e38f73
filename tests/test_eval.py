"""Evaluation: metrics against hand-computed values, a tiny BEIR collection whose answer is
known (through the command line), evaluation files on the example base, saved sets and runs,
and a floor on the public FaQuAD collection."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import io
import json
import math
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, words_only_base

from metis_lite.base.core import Base
from metis_lite.cli import main
from metis_lite.evaluation import beir, metrics
from metis_lite.evaluation.runner import _Signal, evaluate, why
from metis_lite.evaluation.sets import EvalSet, Expected, Question, read_jsonl
from metis_lite.evaluation.why import why_it_came_up
from metis_lite.records import WordMatch

FAQUAD = ROOT / "tests" / "fixtures" / "eval" / "faquad_pt"  # CC BY 4.0: SOURCE.md
CONSOLE = ROOT / "metis_lite" / "console"


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def eval_cli(*args: str, check: int | None = 0) -> Ran:
    """`metis-lite eval …` in this process (fast); `test_the_command_runs_as_a_module` runs it
    as a real process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", *args])
    ran = Ran(code, out.getvalue(), err.getvalue())
    if check is not None:
        assert ran.returncode == check, ran.stderr
    return ran


# -- metrics, by hand ------------------------------------------------------------------------


def test_judge_ranks_documents_once_and_the_first_chunk_decides():
    # Chunks of A, A, B, C, B; item 0 is in A, item 1 in C.
    results = [
        ("A", frozenset({0})),
        ("A", frozenset({0})),
        ("B", frozenset()),
        ("C", frozenset({1})),
        ("B", frozenset()),
    ]
    judged = metrics.judge(results, [2, 1])
    assert judged.places == (1, 3)  # the second chunk of A and of B take no place
    assert judged.first == 1


def test_ndcg_with_graded_relevance_recall_and_mrr_by_hand():
    judged = metrics.Judged(places=(1, 3), grades=(2.0, 1.0))
    dcg = 2 / math.log2(2) + 1 / math.log2(4)
    ideal = 2 / math.log2(2) + 1 / math.log2(3)
    assert metrics.ndcg(judged, 10) == pytest.approx(dcg / ideal)  # 2.5 / 2.6309
    assert metrics.ndcg(judged, 10) == pytest.approx(0.950234, abs=1e-6)
    assert metrics.ndcg(judged, 2) == pytest.approx(2 / ideal)
    assert metrics.recall(judged, 2) == 0.5
    assert metrics.recall(judged, 3) == 1.0
    assert metrics.reciprocal_rank(judged, 10) == 1.0

    late = metrics.Judged(places=(None, 4), grades=(1.0, 1.0))
    assert metrics.reciprocal_rank(late, 10) == 0.25
    assert metrics.reciprocal_rank(late, 3) == 0.0
    assert metrics.ndcg(late, 10) == pytest.approx((1 / math.log2(5)) / (1 + 1 / math.log2(3)))
    assert metrics.recall(late, 100) == 0.5


def test_a_place_finding_two_items_counts_its_best_grade_and_never_exceeds_one():
    both = metrics.judge([("A", frozenset({0, 1}))], [1, 3])
    assert both.places == (1, 1)
    assert metrics.ndcg(both, 10) == pytest.approx(3 / (3 + 1 / math.log2(3)))
    assert metrics.recall(both, 1) == 1.0
    nothing = metrics.judge([("B", frozenset())], [1])
    assert metrics.ndcg(nothing, 10) == 0.0 and metrics.reciprocal_rank(nothing) == 0.0


def word(text: str, *, common: bool = False, exact: bool = True) -> WordMatch:
    return WordMatch(text, 30 if common else 2, common, exact, (text,) if exact else ())


WHY_CASES = [
    # (dense rank, keyword rank, words held, meaning searched, reranker's score)
    (2, 1, [word("xid")], True, None),
    (10, 10, [], True, None),
    (11, 10, [word("xid")], True, None),  # the words' list near the top, meaning not
    (None, 1, [word("xid"), word("do", common=True)], True, None),
    (None, 1, [word("do", common=True), word("get", common=True)], True, None),
    (None, 1, [word("travel", exact=False)], True, None),  # only a form: names no term
    (None, 3, [word("xid")], False, None),  # meaning could not be searched
    (40, 2, [word("xid")], True, 0.97),
    (1, None, [], True, None),
    (1, 30, [word("get", common=True)], True, -1.25),
    (30, 45, [word("get", common=True)], True, None),
    (12, None, [], True, None),
    (None, None, [], True, 0.5),
]


def test_why_says_what_the_console_says_by_one_set_of_rules():
    # The eval report said "both agree" for any ranks up to 50 and "names a term exactly" for
    # any words, while claiming the console's words: both now read evaluation/why.py's rules.
    said = [
        why_it_came_up(m, w, words, meaning_searched=searched, rerank=rerank)
        for m, w, words, searched, rerank in WHY_CASES
    ]
    assert said[0] == "close in meaning (#2) and shares words (#1) — both agree"
    assert "both agree" in said[1] and "both agree" not in said[2]
    assert said[3].endswith("it names a term of the question exactly")
    assert said[4].endswith("the words it shares are common in the base")
    assert said[5].endswith("the words it shares are common in the base")
    assert "meaning could not be searched" in said[6]
    assert said[7].endswith("; the reranker scored it 0.970")
    assert said[10].endswith("neither list placed it among its first 10")
    # The eval runner's own why: ranks past what a search of top_k = k keeps count as absent.
    assert why(_Signal(213, 1, words=(word("xid"),)), within=50).startswith(
        "shares words (#1: “xid”); not among the closest in meaning"
    )
    assert why(_Signal(30, 45, words=(word("get", common=True),))) == said[10]
    assert why(None) == "not among the best 100 by meaning or by words"
    node = shutil.which("node")
    if node is None:
        pytest.skip("no node to run the console's why.js")
    script = (
        "const { why } = await import(process.argv[1]);"
        "const cases = JSON.parse(process.argv[2]);"
        "console.log(JSON.stringify(cases.map(c => why(...c))));"
    )
    module = CONSOLE / "why.js"
    cases = [
        [m, w, [dataclasses.asdict(x) for x in words], searched, rerank]
        for m, w, words, searched, rerank in WHY_CASES
    ]
    # The console's file as an ES module wherever it lies (no package.json says so).
    source = f"data:text/javascript;base64,{base64.b64encode(module.read_bytes()).decode()}"
    ran = subprocess.run(
        [node, "--input-type=module", "-e", script, source, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == said


# -- a tiny BEIR collection whose answer is known -------------------------------------------

CORPUS = [
    ("d1", "Volcanoes", "Magma rises through the crust and erupts as lava from volcanoes."),
    ("d2", "Tides", "The moon pulls the oceans and makes the tides rise and fall twice a day."),
    ("d3", "Bees", "Honey bees dance to tell the hive where the flowers are."),
    ("d4", "Parade", "Once a purple elephant parade crossed the old bridge in town."),
    (
        "d5",
        "Elephants",
        "Purple elephant, purple elephant: the parade song. Parade, parade, purple elephant.",
    ),
    ("d/6 é", "Odd id", "# not a heading\n\nPenguins huddle together through the polar winter."),
]
QUERIES = {
    "q1": "why do tides rise",
    "q2": "lava erupts from volcanoes",
    "q3": "purple elephant parade bridge",  # d4 (graded 2) and d5 (graded 1)
    "q4": "purple elephant parade",  # d4 is relevant; d5 holds these words more often
    "q5": "penguins polar winter",
    "unjudged": "bees",
}
QRELS = [
    ("q1", "d2", 1),
    ("q2", "d1", 1),
    ("q3", "d4", 2),
    ("q3", "d5", 1),
    ("q4", "d4", 1),
    ("q5", "d/6 é", 1),
    ("q5", "d3", 0),
]


def write_beir(folder: Path, corpus=CORPUS) -> Path:
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for _id, title, text in corpus:
            out.write(json.dumps({"_id": _id, "title": title, "text": text}) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as out:
        for _id, text in QUERIES.items():
            out.write(json.dumps({"_id": _id, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{s}" for q, d, s in QRELS]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_beir_collection_end_to_end_by_words(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()  # an empty base with its own spec: eval builds into it
    out = json.loads(
        eval_cli(
            str(folder), "--base", str(base_path), "--modes", "keyword,hybrid", "--json"
        ).stdout
    )
    keyword = out["modes"]["keyword"]
    assert keyword["queries"] == 5  # the unjudged query is not asked
    # q1, q2, q3 (d4 first, d5 second), q5 at #1; q4 finds d4 second, after d5.
    q3 = 1.0  # both relevant in the ideal order: DCG = IDCG
    q4 = 1 / math.log2(3)
    assert keyword["ndcg@10"] == pytest.approx((1 + 1 + q3 + q4 + 1) / 5, abs=1e-4)
    assert keyword["mrr@10"] == pytest.approx((1 + 1 + 1 + 0.5 + 1) / 5, abs=1e-4)
    assert keyword["recall@10"] == keyword["recall@100"] == 1.0
    assert set(keyword) == {
        "ndcg@10",
        "recall@10",
        "recall@100",
        "mrr@10",
        "queries",
        "ms_per_search",
    }
    assert out["modes"]["hybrid"]["ndcg@10"] == keyword["ndcg@10"]  # no vectors: by words
    assert out["base"]["built"] is True and out["base"]["documents"] == 6
    assert out["comparisons"][0]["modes"] == ["keyword", "hybrid"]
    assert out["comparisons"][0]["same"] == 5
    assert any(w.get("code") == "NO_VECTORS" for w in out["warnings"])

    with Base(base_path) as base:  # documents named by _id, titled by the record's title
        titles = dict(base.store.db.execute("SELECT path, title FROM documents"))
    assert titles[beir.document_path("d/6 é")] == "Odd id"
    assert titles["d1.md"] == "Volcanoes"

    again = json.loads(
        eval_cli(str(folder), "--base", str(base_path), "--modes", "keyword", "--json").stdout
    )
    assert again["base"]["built"] is False
    assert again["modes"]["keyword"] == {
        **keyword,
        "ms_per_search": again["modes"]["keyword"]["ms_per_search"],
    }


def test_the_command_runs_as_a_module(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "metis_lite",
            "eval",
            str(folder),
            "--base",
            str(base_path),
            "--modes",
            "keyword",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["modes"]["keyword"]["queries"] == 5


def test_dense_without_its_model_is_skipped_with_its_code_and_alone_fails(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    out = json.loads(
        eval_cli(str(folder), "--base", str(base_path), "--modes", "dense,keyword", "--json").stdout
    )
    assert out["skipped"][0]["mode"] == "dense"
    assert out["skipped"][0]["code"] == "EMBEDDING_MODEL_UNAVAILABLE"
    alone = eval_cli(str(folder), "--base", str(base_path), "--modes", "dense", check=3)
    assert "EMBEDDING_MODEL_UNAVAILABLE" in alone.stderr


def test_a_base_built_from_another_corpus_or_holding_documents_is_refused(tmp_path):
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    eval_cli(str(write_beir(tmp_path / "one")), "--base", str(base_path), "--modes", "keyword")
    other = write_beir(tmp_path / "two", CORPUS[:-1])
    refused = eval_cli(str(other), "--base", str(base_path), check=2)
    assert "built from another corpus" in refused.stderr
    handbook = tmp_path / "handbook.db"
    words_only_base(handbook, EXAMPLES).close()
    refused = eval_cli(str(other), "--base", str(handbook), check=2)
    assert "holds other sources" in refused.stderr


def test_human_report_names_the_base_and_the_table(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    run = eval_cli(str(folder), "--base", str(base_path), "--modes", "keyword", "--k", "3")
    assert f"base {base_path} (built now)" in run.stdout
    assert "nDCG@3" in run.stdout and "recall@100" in run.stdout and "keyword" in run.stdout


def test_the_questions_every_mode_missed_are_named(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    args = (str(folder), "--base", str(base_path), "--modes", "keyword,hybrid", "--k", "1")
    out = json.loads(eval_cli(*args, "--json").stdout)
    # By words (and so by hybrid, with no vectors) q4 finds d4 second, after d5; the rest first.
    assert out["missed"] == [
        {
            "question": "purple elephant parade",
            "expected": ["d4.md"],
            "ranks": {"keyword": 2, "hybrid": 2},
        }
    ]
    run = eval_cli(*args)
    assert "missed by every mode within the first 1: 1 of 5 questions" in run.stdout
    assert "  'purple elephant parade' → d4.md: keyword #2 · hybrid #2" in run.stdout
    assert "warning: hybrid: NO_VECTORS: " in run.stderr and "(5 questions)" in run.stderr
    found = eval_cli(str(folder), "--base", str(base_path), "--modes", "keyword")
    assert "every question was found within the first 10 by at least one mode" in found.stdout


def test_one_question_and_one_document_are_said_in_the_singular(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "leave.md").write_text("# Leave\n\nEvery employee gets 25 days.\n", "utf-8")
    base_path = tmp_path / "one.db"
    with words_only_base(base_path, folder) as base:
        base.index()
    questions = tmp_path / "one.jsonl"
    questions.write_text(
        json.dumps({"question": "how many days", "expected": ["leave.md"]}) + "\n", "utf-8"
    )
    run = eval_cli(str(questions), "--base", str(base_path), "--modes", "keyword,hybrid")
    first, second = run.stdout.splitlines()[:2]
    assert first.startswith("one: 1 question (")
    assert ": 1 document, 1 chunk · " in second
    assert "keyword ranks 0 questions better" in run.stdout
    assert "(1 question)" in run.stderr  # hybrid's NO_VECTORS warning, on that one question


def test_the_table_aligns_long_mode_names(tmp_path):
    folder = write_beir(tmp_path / "tiny")
    base_path = tmp_path / "tiny.db"
    words_only_base(base_path).close()
    run = eval_cli(str(folder), "--base", str(base_path), "--modes", "keyword,hybrid:relative")
    table = [
        line for line in run.stdout.splitlines() if re.match(r"(mode|keyword|hybrid\S*) {2,}", line)
    ]
    assert len(table) == 3, run.stdout
    assert len({len(line) for line in table}) == 1, table  # every column ends where its head does


def test_a_document_name_in_an_evaluation_file_cannot_drive_the_terminal(tmp_path):
    base_path = tmp_path / "handbook.db"
    with words_only_base(base_path, EXAMPLES) as base:
        base.index()
    evil = tmp_path / "evil.jsonl"
    line = {"question": "vacation days", "expected": [{"document": "x\x1b]0;pwned\x07.md"}]}
    evil.write_text(json.dumps(line) + "\n", encoding="utf-8")
    run = eval_cli(str(evil), "--base", str(base_path), "--modes", "keyword")
    assert "\x1b" not in run.stdout + run.stderr
    assert "x\\x1b]0;pwned\\x07.md" in run.stderr  # shown, escaped, in the warning


def test_markdown_escapes_keep_a_record_one_section():
    text = beir.markdown('A "quoted" title', "# not a heading\ntext\n===\n---")
    assert text.startswith('---\ntitle: "A \\"quoted\\" title"\n---\n')
    assert "\\# not a heading" in text and "\\===" in text and "\\---" in text
    assert beir.document_path(".hidden/é") == "~2Ehidden~2F~C3~A9.md"
    assert len(beir.document_path("x" * 500).encode()) <= beir.NAME_BYTES_MAX + 3


# -- an evaluation file on an existing base --------------------------------------------------


def handbook_set(tmp_path: Path) -> Path:
    items = [
        {
            "question": "25 days of paid vacation",
            "expected": [{"document": "policies/leave.md", "line": 25}],
        },
        {
            "question": "BitLocker FileVault disk encryption",
            "expected": [{"document": "it/security-guide.pdf", "page": 2}],
        },
        {"question": "Xid 79", "expected": ["handbook/it/gpu-troubleshooting.html"]},
        {"question": "where is the moon", "expected": ["nowhere/moon.md"]},
    ]
    path = tmp_path / "handbook.jsonl"
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n\n", encoding="utf-8")
    return path


def test_evaluation_file_on_an_existing_base_by_page_line_and_document(tmp_path):
    base_path = tmp_path / "handbook.db"
    with words_only_base(base_path, EXAMPLES) as base:
        base.index()
        evalset = read_jsonl(handbook_set(tmp_path))
        report = evaluate(base, evalset, modes=("keyword",))
    keyword = report.modes[0]
    assert keyword.recall_k == 0.75 and keyword.mrr == 0.75  # three found first, one missing
    (warning,) = report.warnings
    assert warning.code == "EXPECTED_NOT_IN_BASE"
    assert "nowhere/moon.md" in warning.message and "not in the base" in warning.message


def test_eval_save_gives_each_warning_its_code(tmp_path):
    """What a saved set leaves out, and what the base lacks, each said with its code."""
    base_path = tmp_path / "handbook.db"
    with words_only_base(base_path, EXAMPLES) as base:
        base.index()
    folder = write_beir(tmp_path / "beir")
    with (folder / "queries.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps({"_id": "blank", "text": "  "}) + "\n")
    with (folder / "qrels" / "test.tsv").open("a", encoding="utf-8") as out:
        out.write("blank\td1\t1\ngone\td1\t1\n")  # one without text, one not in queries
    said = json.loads(eval_cli("save", str(base_path), "b", str(folder), "--json").stdout)
    codes = sorted(w["code"] for w in said["warnings"])
    assert codes == ["EXPECTED_NOT_IN_BASE", "QUESTIONS_LEFT_OUT", "QUESTIONS_LEFT_OUT"]
    human = eval_cli("save", str(base_path), "b", str(folder)).stderr.splitlines()
    assert sorted(line.split(":")[1].strip() for line in human) == codes
    assert "warning: QUESTIONS_LEFT_OUT: 1 judged queries have no text (left out)" in human


def test_a_page_or_line_elsewhere_in_the_document_does_not_count(tmp_path):
    base_path = tmp_path / "handbook.db"
    with words_only_base(base_path, EXAMPLES) as base:
        base.index()
        wrong = EvalSet(
            "wrong",
            "jsonl",
            "-",
            (
                Question("25 days of paid vacation", (Expected("policies/leave.md", line=9),)),
                Question("BitLocker FileVault", (Expected("it/security-guide.pdf", page=4),)),
            ),
        )
        report = evaluate(base, wrong, modes=("keyword",), k=1)
    assert report.modes[0].recall_k == 0.0


def test_bad_evaluation_files_name_their_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    words_only_base(tmp_path / "empty.db").close()  # the file is read before the base is asked
    for line, message in [
        ('{"question": "q"}', "expected must be a non-empty list"),
        ('{"question": "", "expected": ["a.md"]}', "question must be a non-empty string"),
        ('{"question": "q", "expected": [{"document": "a.md", "page": 0}]}', "page must be"),
        ('{"question": "q", "expected": [{"document": "a.md", "grade": -1}]}', "grade must be"),
        ("not json", "not JSON"),
    ]:
        path.write_text(
            '{"question": "fine", "expected": ["a.md"]}\n' + line + "\n", encoding="utf-8"
        )
        run = eval_cli(str(path), "--base", str(tmp_path / "empty.db"), check=2)
        assert f"{path}:2: " in run.stderr and message in run.stderr, run.stderr
    assert "--base" in eval_cli(str(handbook_set(tmp_path)), check=2).stderr


# -- saved sets ------------------------------------------------------------------------------


def test_save_then_run_again_shows_the_change_and_the_spec(tmp_path):
    base_path = tmp_path / "handbook.db"
    with words_only_base(base_path, EXAMPLES) as base:
        base.index()
    saved = eval_cli("save", str(base_path), "smoke", str(handbook_set(tmp_path)), "--json")
    said = json.loads(saved.stdout)
    assert (said["questions"], said["expected"], said["in_base"]) == (4, 4, 3)  # no moon.md
    assert said["replaced"] is False
    again = eval_cli("save", str(base_path), "smoke", str(handbook_set(tmp_path)))
    assert said["warnings"] == [
        {"code": "EXPECTED_NOT_IN_BASE", "message": "1 expected answer is not in the base yet"}
    ]
    assert "warning: EXPECTED_NOT_IN_BASE: 1 expected answer is not in the base yet" in again.stderr
    assert again.stdout.splitlines() == [
        f"replaced the evaluation set 'smoke' in {base_path}: 4 questions, 4 expected answers"
        " (3 in the base); its earlier runs are kept",
        f"nothing was searched yet; run it with: metis-lite eval run {base_path} smoke",
    ]
    first = json.loads(
        eval_cli("run", str(base_path), "smoke", "--modes", "keyword", "--json").stdout
    )
    assert first["previous"] is None and first["modes"]["keyword"]["recall@10"] == 0.75
    with Base(base_path) as base:  # a change between runs: a reranker that never answers
        base.configure(reranker={"provider": "tei", "url": "http://127.0.0.1:9", "timeout_s": 1})
    second = json.loads(
        eval_cli("run", str(base_path), "smoke", "--modes", "keyword", "--json").stdout
    )
    assert second["previous"]["modes"] == first["modes"]
    assert second["previous"]["spec"]["reranker"] is None
    assert second["run"]["spec"]["reranker"] == "tei@http://127.0.0.1:9"
    assert second["change"]["keyword"]["ndcg@10"] == 0.0
    human = eval_cli("run", str(base_path), "smoke", "--modes", "keyword").stdout
    assert "change since the run of" in human and "unchanged" in human
    with Base(base_path) as base:  # what was saved: questions and expected, no results
        (items,) = base.store.db.execute(
            "SELECT items FROM eval_sets WHERE name = 'smoke'"
        ).fetchone()
        runs = base.store.db.execute("SELECT count(*) FROM eval_runs").fetchone()[0]
    assert json.loads(items.splitlines()[0]) == {
        "question": "25 days of paid vacation",
        "expected": [{"document": "policies/leave.md", "line": 25}],
    }
    assert runs == 3
    missing = eval_cli("run", str(base_path), "nope", check=2)
    assert "no evaluation set named 'nope'" in missing.stderr and "smoke" in missing.stderr


# -- with the embedded model ------------------------------------------------------------------


def test_meaning_finds_what_words_miss_and_the_comparison_says_why(tmp_path):
    corpus = CORPUS + [
        (
            "vac",
            "Leave",
            "Every full-time employee gets 25 days of paid vacation per calendar year.",
        ),
    ]
    folder = write_beir(tmp_path / "meaning", corpus)
    with (folder / "queries.jsonl").open("a", encoding="utf-8") as out:
        out.write(json.dumps({"_id": "qh", "text": "how many holidays do I get"}) + "\n")
    with (folder / "qrels" / "test.tsv").open("a", encoding="utf-8") as out:
        out.write("qh\tvac\t1\n")
    out = json.loads(eval_cli(str(folder), "--modes", "dense,keyword", "--json").stdout)
    assert out["base"]["where"] == "beside the evalset"
    assert out["base"]["path"] == str(tmp_path / "meaning.metis-eval.db")
    assert out["modes"]["dense"]["mrr@10"] > 0
    (pair,) = out["comparisons"]
    example = next(e for e in pair["examples"] if e["question"] == "how many holidays do I get")
    assert example["better"] == "dense" and example["ranks"]["dense"] == 1
    assert example["ranks"]["keyword"] is None
    assert example["why"].startswith("close in meaning (#1); its words do not match")


# -- a public collection: FaQuAD (Portuguese, CC BY 4.0) -------------------------------------


def test_faquad_keyword_floor_on_150_questions(tmp_path):
    full = beir.read_questions(FAQUAD)
    subset = EvalSet("faquad-150", "beir", str(FAQUAD), full.questions[::6][:150])
    base_path = tmp_path / "faquad.db"
    words_only_base(base_path).close()
    from metis_lite.evaluation.bases import open_beir_base

    base, _ = open_beir_base(FAQUAD, base_path)
    with base:
        report = evaluate(base, subset, modes=("keyword",))
    keyword = report.modes[0]
    assert keyword.queries == 150
    # Measured on these 150 by words: nDCG@10 0.881, recall@10 0.96 (all 900: 0.889, 0.970).
    assert keyword.ndcg >= 0.85
    assert keyword.recall_k >= 0.93
