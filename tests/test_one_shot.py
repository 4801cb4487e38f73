"""A one-shot search (a fresh `metis-lite search` process): what it does not import, the words
index it does not read, and the embedded model's cache (metis_lite/models/weights_cache.py):
the same vectors and the same answers, to the bit, with the cache cold, warm, damaged or
unusable (a read-only or full folder: one warning, then loaded as without it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from test_disk import remount, tmpfs  # noqa: F401 - the fixture: a 2 MB tmpfs (root)

from metis_lite import cli
from metis_lite.errors import ModelError
from metis_lite.models import e5, weights_cache
from metis_lite.models.embedded import EmbeddedEmbedder
from metis_lite.settings import E5_MODEL

TEXTS = [
    "query: how many holidays do I get",
    "passage: Configuração do proxy — 東京の天気は晴れ; Ｘid 79 on nvidia-smi",
    "query: a\x00b ▁▁ \u200d tab\there",
    "passage: " + "the annual leave policy and its carry-over rules " * 40,
]
"""Accents, CJK, fullwidth, a NUL, marks and spaces the normaliser rewrites, a long passage."""


def vectors(path=None) -> np.ndarray:
    model = EmbeddedEmbedder(path, model=None if path else E5_MODEL, workers=1)
    try:
        return model.embed(TEXTS)
    finally:
        model.close()


@pytest.fixture(scope="module")
def reference() -> np.ndarray:
    """The vectors as the file gives them, without any cache."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(weights_cache.ENV, weights_cache.OFF)
        return vectors()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv(weights_cache.ENV, str(folder))
    monkeypatch.setattr(weights_cache, "_warned", False)
    return folder


def arrays_file(folder):
    (path,) = folder.glob(f"{e5.CACHE_NAME}.*.arrays")
    return path


def assert_same(found: np.ndarray, reference: np.ndarray) -> None:
    assert found.dtype == reference.dtype and found.tobytes() == reference.tobytes()


def test_a_warm_cache_gives_the_files_vectors_to_the_bit_without_reading_it(
    cache, reference, monkeypatch
):
    assert_same(vectors(), reference)  # cold: read, hashed, kept
    assert arrays_file(cache).stat().st_size > e5.FILE_BYTES
    with monkeypatch.context() as patch:
        patch.setattr(e5, "_read", lambda path: pytest.fail(f"{path} was read again"))
        assert_same(vectors(), reference)


def test_a_truncated_cache_file_is_made_again(cache, reference):
    vectors()
    kept = arrays_file(cache)
    size = kept.stat().st_size
    os.truncate(kept, size // 2)
    assert_same(vectors(), reference)
    assert arrays_file(cache).stat().st_size == size


def test_a_cache_file_changed_in_place_is_refused_and_made_again(cache, reference):
    vectors()
    kept = arrays_file(cache)
    size = kept.stat().st_size
    with kept.open("r+b") as file:  # a weight's bytes, the size unchanged
        file.seek(size - 4096)
        file.write(b"\x7f" * 64)
    assert_same(vectors(), reference)
    with kept.open("rb") as file:
        file.seek(size - 4096)
        assert file.read(64) != b"\x7f" * 64


def test_a_changed_weights_file_is_hashed_again(cache, reference, tmp_path):
    weights = tmp_path / e5.FILE_NAME
    shutil.copyfile(e5.shipped_file(), weights)
    assert_same(vectors(weights), reference)
    os.utime(weights, ns=(1, 1))  # touched: the same bytes, hashed again, still accepted
    assert weights_cache.remembered_sha256(cache, weights) is None
    assert_same(vectors(weights), reference)
    assert weights_cache.remembered_sha256(cache, weights) == e5.SHA256
    with weights.open("r+b") as file:  # altered, the size kept: refused, not trusted
        file.seek(e5.FILE_BYTES // 2)
        byte = file.read(1)
        file.seek(e5.FILE_BYTES // 2)
        file.write(bytes([byte[0] ^ 1]))
    with pytest.raises(ModelError, match="altered or damaged"):
        vectors(weights)


def test_a_read_only_cache_folder_warns_once_and_loads_as_before(tmpfs, reference, monkeypatch):  # noqa: F811
    monkeypatch.setenv(weights_cache.ENV, str(tmpfs / "cache"))
    monkeypatch.setattr(weights_cache, "_warned", False)
    remount(tmpfs, "ro")
    with pytest.warns(weights_cache.CacheWarning, match="cannot be used") as said:
        assert_same(vectors(), reference)
        assert_same(vectors(), reference)
    assert len(said) == 1


def test_a_full_cache_folder_warns_once_and_leaves_no_partial_file(tmpfs, reference, monkeypatch):  # noqa: F811
    monkeypatch.setenv(weights_cache.ENV, str(tmpfs))
    monkeypatch.setattr(weights_cache, "_warned", False)
    with pytest.warns(weights_cache.CacheWarning, match="No space left") as said:
        assert_same(vectors(), reference)
        assert_same(vectors(), reference)
    assert len(said) == 1
    assert not list(tmpfs.glob("*.arrays")) and not list(tmpfs.glob(".*"))


def test_a_cache_folder_that_is_a_file_warns_once(tmp_path, reference, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv(weights_cache.ENV, str(blocked / "cache"))
    monkeypatch.setattr(weights_cache, "_warned", False)
    with pytest.warns(weights_cache.CacheWarning) as said:
        assert_same(vectors(), reference)
    assert len(said) == 1


def search_json(base, question: str, cache: str) -> list:
    env = {**os.environ, weights_cache.ENV: cache}
    run = subprocess.run(
        [sys.executable, "-m", "metis_lite", "search", str(base), question, "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "Warning" not in run.stderr, run.stderr
    answer = json.loads(run.stdout)
    return [answer["warnings"], *answer["results"]]


def test_a_fresh_process_answers_alike_with_the_cache_off_cold_and_warm(
    example_base_file, tmp_path
):
    question = "how many holidays do I get"
    off = search_json(example_base_file, question, weights_cache.OFF)
    folder = str(tmp_path / "cache")
    cold = search_json(example_base_file, question, folder)
    warm = search_json(example_base_file, question, folder)
    assert len(off) > 1 and all(r["scores"]["dense"] is not None for r in off[1:])
    assert off == cold == warm  # every result: text, citation, score, scores (JSON's digits)


def test_a_search_process_ends_at_once_with_its_whole_output(example_base_file, tmp_path, capsys):
    """Run as the program, a search ends without the interpreter's teardown (cli.QUICK_EXIT):
    its output, block-buffered into a file, is whole (the answer main() gives in this process),
    and its exit codes are those of any command."""
    question = ["search", str(example_base_file), "vacation days", "--top-k", "50", "--json"]
    assert cli.main(question) == 0
    here = json.loads(capsys.readouterr().out)
    out = tmp_path / "out.json"
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with out.open("w") as stdout:
        run = subprocess.run(
            [sys.executable, "-m", "metis_lite", *question],
            cwd=ROOT,
            env=buffered,
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert run.returncode == 0, run.stderr
    there = json.loads(out.read_text())
    assert len(there["results"]) > 10 and there["results"] == here["results"]
    gone = subprocess.run(
        [sys.executable, "-m", "metis_lite", "search", str(tmp_path / "none.db"), "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert gone.returncode == 2 and "BASE_NOT_FOUND" in gone.stderr


NOT_FOR_A_SEARCH = (
    "httpx",
    "asyncio",
    "pathspec",
    "selectolax",
    "pypdfium2",
    "docx",
    "msgspec",
    "metis_lite.http",
    "metis_lite.indexing.ingest",
    "metis_lite.models.http",
    "metis_lite.service.serialize",
    "metis_lite.text.languages",
    "hashlib",
    "difflib",
    "numpy",
    "metis_lite.parsing",
    "subprocess",
    "concurrent",
    "logging",
)
"""What a command-line search by words has no use for (the HTTP stack, the index run, parsers,
the languages of the base, the hash of a fact written, the suggestion of a mistyped option;
NumPy: FTS5 answers it, and the base's vectors and words are never read into memory; the OCR
languages' check and its processes; threads for several bases' steps; logging)."""


def test_a_search_by_words_imports_nothing_it_does_not_use(tmp_path):
    base = tmp_path / "w.db"
    with words_only_base(base, EXAMPLES) as made:
        made.index()
    script = (
        "import sys; from metis_lite import cli;"
        f"code = cli.main(['search', {str(base)!r}, 'vacation days', '--mode', 'keyword']);"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr); sys.exit(code)"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert "leave.md" in run.stdout, run.stdout
    imported = set(run.stderr.split())
    found = [m for m in imported if m.split(".")[0] in NOT_FOR_A_SEARCH or m in NOT_FOR_A_SEARCH]
    found += [m for m in imported for n in NOT_FOR_A_SEARCH if m.startswith(n + ".")]
    assert not found, sorted(set(found))


def blas_threads(base, env: dict[str, str]) -> int:
    """The BLAS threads of a fresh process after its command-line search of `base`: NumPy is
    imported after it (a search by words imports none), as a search by meaning would load it."""
    script = (
        "import sys; from metis_lite import cli; from threadpoolctl import threadpool_info;"
        f"code = cli.main(['search', {str(base)!r}, 'vacation days', '--mode', 'keyword']);"
        "import numpy;"
        "print(max(i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'),"
        " file=sys.stderr); sys.exit(code)"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")} | env
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    return int(run.stderr.split()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: BLAS starts one thread")
def test_a_search_process_starts_one_blas_thread_unless_told_otherwise(tmp_path):
    base = tmp_path / "w.db"
    with words_only_base(base, EXAMPLES) as made:
        made.index()
    assert blas_threads(base, {}) == 1
    assert blas_threads(base, {"OPENBLAS_NUM_THREADS": "2"}) == 2  # the user's is kept


def test_every_command_is_built_by_its_own_module_alone():
    everything = cli.build_parser()
    (commands,) = [a for a in everything._actions if hasattr(a, "choices") and a.choices]
    assert set(commands.choices) == set(cli.COMMANDS)
    for name in commands.choices:
        alone = cli.build_parser(name)
        (only,) = [a for a in alone._actions if hasattr(a, "choices") and a.choices]
        assert name in only.choices
        assert only.choices[name].format_help() == commands.choices[name].format_help()


def test_a_base_searched_once_never_reads_its_words_into_memory(tmp_path):
    base = words_only_base(tmp_path / "w.db", EXAMPLES)
    try:
        base.index()
        first = base.search("vacation days", mode="keyword")
        assert base._words._thread is None  # a command-line search: FTS5 alone
        second = base.search("vacation days", mode="keyword")
        assert base._words._thread is not None  # a base searched again reads them
        assert first.results and first.results == second.results
    finally:
        base.close()


def test_no_warning_is_raised_by_a_usable_cache(cache, reference):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(vectors(), reference)
        assert_same(vectors(), reference)
