"""Scripts and languages of a base's text against what its embedding model reads:
letters by script in many scripts, English told from other Latin-script languages on real
paragraphs, the model table, and MODEL_LANGUAGE_MISMATCH on real bases, in search and status.

The bases' embedding model is a stand-in on loopback (TEI's /embed, vectors of hashed words)
named as the model under test: the warning depends on the model's name, not on its vectors."""

from __future__ import annotations

import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import DEAD_EMBEDDING, EXAMPLES, ROOT
from hypothesis import given
from hypothesis import strategies as st

from metis_lite.base.core import Base
from metis_lite.service.serialize import answer_to_json, status_to_json
from metis_lite.text import languages
from metis_lite.text.languages import (
    coverage_of,
    latin_language,
    mismatch,
    profile_of,
    script_letters,
    script_shares,
)
from metis_lite.text.tokenizer import tokens

MINILM = "all-MiniLM-L6-v2"
E5 = "multilingual-e5-small"
CODE = "MODEL_LANGUAGE_MISMATCH"

# The first article of the Universal Declaration of Human Rights, in each script's language.
ARTICLE_1 = {
    "Latin": "All human beings are born free and equal in dignity and rights.",
    "Greek": "Όλοι οι άνθρωποι γεννιούνται ελεύθεροι και ίσοι στην αξιοπρέπεια και τα δικαιώματα.",
    "Cyrillic": "Все люди рождаются свободными и равными в своем достоинстве и правах.",
    "Arabic": "يولد جميع الناس أحراراً متساوين في الكرامة والحقوق.",
    "Hebrew": "כל בני האדם נולדו בני חורין ושווים בערכם ובזכויותיהם.",
    "Devanagari": "सभी मनुष्यों को गौरव और अधिकारों के मामले में जन्मजात स्वतन्त्रता और समानता प्राप्त है।",
    "Indic": "সমস্ত মানুষ স্বাধীনভাবে সমান মর্যাদা এবং অধিকার নিয়ে জন্মগ্রহণ করে।",
    "Thai": "มนุษย์ทั้งหลายเกิดมามีอิสระและเสมอภาคกันในเกียรติศักดิ์และสิทธิ",
    "Han": "人人生而自由，在尊严和权利上一律平等。",
    "Hangul": "모든 인간은 태어날 때부터 자유로우며 그 존엄과 권리에 있어 동등하다.",
    "other": "ყველა ადამიანი იბადება თავისუფალი და თანასწორი თავისი ღირსებითა და უფლებებით.",
}
JAPANESE = "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。"

ARABIC = (
    "يولد جميع الناس أحراراً متساوين في الكرامة والحقوق. وقد وهبوا عقلاً وضميراً وعليهم أن "
    "يعامل بعضهم بعضاً بروح الإخاء.\n\n"
    "لكل إنسان حق التمتع بكافة الحقوق والحريات الواردة في هذا الإعلان، دون أي تمييز، كالتمييز "
    "بسبب العنصر أو اللون أو الجنس أو اللغة أو الدين أو الرأي السياسي أو أي رأي آخر، أو الأصل "
    "الوطني أو الاجتماعي أو الثروة أو الميلاد أو أي وضع آخر، دون أية تفرقة بين الرجال والنساء.\n\n"
    "لكل فرد الحق في الحياة والحرية وسلامة شخصه. لا يجوز استرقاق أو استعباد أي شخص، ويحظر "
    "الاسترقاق وتجارة الرقيق بكافة أوضاعهما. لا يعرض أي إنسان للتعذيب ولا للعقوبات أو المعاملات "
    "القاسية أو الوحشية أو الحاطة بالكرامة.\n"
)

PARAGRAPHS = {
    "English": (
        "All human beings are born free and equal in dignity and rights. They are endowed with "
        "reason and conscience and should act towards one another in a spirit of brotherhood. "
        "Everyone is entitled to all the rights and freedoms set forth in this Declaration, "
        "without distinction of any kind, such as race, colour, sex, language, religion, "
        "political or other opinion, national or social origin, property, birth or other status."
    ),
    "Portuguese": (
        "Todos os seres humanos nascem livres e iguais em dignidade e em direitos. Dotados de razão "
        "e de consciência, devem agir uns para com os outros em espírito de fraternidade. Todos os "
        "seres humanos podem invocar os direitos e as liberdades proclamados na presente "
        "Declaração, sem distinção alguma, nomeadamente de raça, de cor, de sexo, de língua, de "
        "religião, de opinião política ou outra, de origem nacional ou social."
    ),
    "Spanish": (
        "En un lugar de la Mancha, de cuyo nombre no quiero acordarme, no ha mucho tiempo que vivía "
        "un hidalgo de los de lanza en astillero, adarga antigua, rocín flaco y galgo corredor. "
        "Una olla de algo más vaca que carnero, salpicón las más noches, duelos y quebrantos los "
        "sábados, lentejas los viernes, algún palomino de añadidura los domingos, consumían las "
        "tres partes de su hacienda."
    ),
    "German": (
        "Die Würde des Menschen ist unantastbar. Sie zu achten und zu schützen ist Verpflichtung "
        "aller staatlichen Gewalt. Das Deutsche Volk bekennt sich darum zu unverletzlichen und "
        "unveräußerlichen Menschenrechten als Grundlage jeder menschlichen Gemeinschaft, des "
        "Friedens und der Gerechtigkeit in der Welt. Die nachfolgenden Grundrechte binden "
        "Gesetzgebung, vollziehende Gewalt und Rechtsprechung als unmittelbar geltendes Recht."
    ),
    "French": (
        "Tous les êtres humains naissent libres et égaux en dignité et en droits. Ils sont doués de "
        "raison et de conscience et doivent agir les uns envers les autres dans un esprit de "
        "fraternité. Chacun peut se prévaloir de tous les droits et de toutes les libertés "
        "proclamés dans la présente Déclaration, sans distinction aucune, notamment de race, de "
        "couleur, de sexe, de langue, de religion, d'opinion politique ou de toute autre opinion."
    ),
    "Italian": (
        "Tutti gli esseri umani nascono liberi ed eguali in dignità e diritti. Essi sono dotati di "
        "ragione e di coscienza e devono agire gli uni verso gli altri in spirito di fratellanza. "
        "Ad ogni individuo spettano tutti i diritti e tutte le libertà enunciate nella presente "
        "Dichiarazione, senza distinzione alcuna, per ragioni di razza, di colore, di sesso, di "
        "lingua, di religione, di opinione politica o di altro genere."
    ),
}


# -- scripts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("script", sorted(ARTICLE_1))
def test_each_script_is_told(script):
    assert script_shares(ARTICLE_1[script]) == {script: 1.0}


def test_japanese_is_han_and_kana_and_a_mix_is_shared_by_letters():
    shares = script_shares(JAPANESE)
    assert set(shares) == {"Han", "Kana"} and 0.5 < shares["Kana"] < 0.9
    mixed = script_letters(ARTICLE_1["Latin"] + " " + ARTICLE_1["Cyrillic"])
    assert mixed == {
        "Latin": script_letters(ARTICLE_1["Latin"])["Latin"],
        "Cyrillic": script_letters(ARTICLE_1["Cyrillic"])["Cyrillic"],
    }


def test_digits_punctuation_spaces_and_emoji_are_not_letters():
    assert script_letters("") == {}
    assert script_letters("123 !? ٣٤، ०१। ๕ 、。 😀 \U0001f1f5 \t\n") == {}
    assert script_shares("--") == {}


@given(st.text())
def test_any_text_is_counted(text):
    letters = script_letters(text)
    assert sum(letters.values()) <= len(text)
    assert set(letters) <= set(languages.SCRIPTS)
    shares = script_shares(text)
    assert not shares or abs(sum(shares.values()) - 1.0) < 1e-9


# -- English or not ----------------------------------------------------------------------------


@pytest.mark.parametrize("language", sorted(PARAGRAPHS))
def test_latin_paragraphs_read_as_their_language(language):
    assert latin_language(PARAGRAPHS[language]) == language


def _chunks(text: str, size: int = 1200) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@pytest.mark.parametrize("path", ["README.md", "docs/api.md", "docs/eval.md", "CHANGELOG.md"])
def test_technical_english_is_never_another_language(path):
    """Docs full of commands, tables and names are English or undecided, chunk by chunk."""
    found = {latin_language(c) for c in _chunks((ROOT / path).read_text("utf-8"))}
    assert found <= {"English", languages.UNDECIDED} and "English" in found


def test_the_handbooks_portuguese_file_is_portuguese():
    text = (EXAMPLES / "ti" / "configuração-do-proxy.md").read_text("utf-8")
    assert latin_language(text) == "Portuguese"
    assert latin_language((EXAMPLES / "policies" / "leave.md").read_text("utf-8")) == "English"


def test_code_and_names_are_undecided():
    assert latin_language("metis-lite index handbook.db examples/handbook --json") == "undecided"
    assert latin_language("") == "undecided"


# -- the model table and the verdict -------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        MINILM,
        "sentence-transformers/all-MiniLM-L6-v2",
        "all-mpnet-base-v2",
        "BAAI/bge-small-en-v1.5",
        "intfloat/e5-base-v2",
        "nomic-embed-text:latest",
        "mxbai-embed-large",
    ],
)
def test_english_only_families(name):
    assert coverage_of(name).reads == languages.ENGLISH
    assert languages.may_mismatch(name)


@pytest.mark.parametrize(
    "name",
    [
        E5,
        "intfloat/multilingual-e5-large",
        "paraphrase-multilingual-MiniLM-L12-v2",
        "BAAI/bge-m3",
        "Qwen/Qwen3-Embedding-0.6B",
        "nomic-embed-text-v2-moe",
    ],
)
def test_multilingual_families(name):
    assert coverage_of(name).reads == languages.MANY
    assert mismatch(profile_of([ARABIC]), name) is None
    assert not languages.may_mismatch(name)  # so no sample of the base is read for it


@pytest.mark.parametrize("name", ["text-embedding-3-small", "tei@http://127.0.0.1:9", "my-model"])
def test_an_unknown_model_is_never_warned_about(name):
    assert coverage_of(name) is None
    assert mismatch(profile_of([ARABIC]), name) is None
    assert not languages.may_mismatch(name)


def test_the_warning_names_the_script_the_model_and_the_way_out():
    warning = mismatch(profile_of([ARABIC]), MINILM)
    assert warning is not None and warning.code == CODE
    assert warning.message.startswith("most of this base (100 % of its letters) is Arabic script,")
    assert f"which {MINILM} (English) does not read: results by meaning are unreliable" in (
        warning.message
    )
    assert warning.message.endswith(languages.REMEDY)
    japanese = mismatch(profile_of([JAPANESE * 3]), MINILM)
    assert "Japanese kana and Chinese characters (Han)" in japanese.message
    portuguese = mismatch(profile_of([PARAGRAPHS["Portuguese"]]), MINILM)
    assert "is Portuguese, which" in portuguese.message


def test_most_means_more_than_half_of_the_letters():
    english = PARAGRAPHS["English"]
    arabic_letters = script_letters(ARABIC)["Arabic"]
    english_letters = script_letters(english)["Latin"]
    assert english_letters < arabic_letters
    assert mismatch(profile_of([ARABIC, english]), MINILM) is not None
    assert mismatch(profile_of([ARABIC, english * 3]), MINILM) is None
    assert mismatch(profile_of([english]), MINILM) is None


def test_too_little_text_is_not_judged():
    assert mismatch(profile_of([]), MINILM) is None
    assert mismatch(profile_of(["مرحبا بالعالم"]), MINILM) is None


def test_short_texts_are_judged_together():
    facts = [
        "Ana trabalha na equipe de busca desde março.",
        "O servidor de produção fica em São Paulo.",
        "A reunião de planejamento é às terças.",
        "O João é o responsável pelo orçamento do projeto.",
    ]
    assert profile_of(facts).latin.keys() == {"Portuguese"}
    assert mismatch(profile_of(facts), MINILM) is not None


# -- on a base: search and status ---------------------------------------------------------------


class FakeTEI(ThreadingHTTPServer):
    """TEI's /embed on loopback: a unit vector of hashed words for each text."""

    daemon_threads = True
    dimension = 32

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Embed)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _Embed(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        texts = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["inputs"]
        data = json.dumps([_vector(text) for text in texts]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _vector(text: str) -> list[float]:
    values = [0.0] * FakeTEI.dimension
    for word in tokens(text) or ["-"]:
        values[zlib.crc32(word.encode()) % FakeTEI.dimension] += 1.0
    norm = sum(v * v for v in values) ** 0.5
    return [v / norm for v in values]


@pytest.fixture(scope="module")
def tei():
    server = FakeTEI()
    yield server
    server.shutdown()
    server.server_close()


def _base(path: Path, tei: FakeTEI, model: str, *folders: Path) -> Base:
    base = Base(path, create=True)
    base.configure(embedding={"provider": "tei", "url": tei.url, "model": model})
    for folder in folders:
        base.add_source(folder)
    report = base.index()
    assert report.without_vector == 0, report.warnings
    return base


@pytest.fixture
def arabic_folder(tmp_path) -> Path:
    folder = tmp_path / "arabic"
    folder.mkdir()
    for n, part in enumerate(ARABIC.split("\n\n")):
        (folder / f"article-{n + 1}.md").write_text(f"# المادة {n + 1}\n\n{part}\n", "utf-8")
    return folder


def _codes(warnings) -> list[str]:
    return [w.code for w in warnings]


def test_an_arabic_base_with_an_english_model_says_so_in_search_and_status(
    tmp_path, tei, arabic_folder
):
    with _base(tmp_path / "ar.db", tei, MINILM, arabic_folder) as base:
        for mode in ("hybrid", "dense"):
            answer = base.search("الحق في الحياة والحرية", mode=mode)
            assert _codes(answer.warnings) == [CODE], mode
            assert "Arabic script" in answer.warnings[0].message
            assert answer.results  # still answered, with the warning
            assert answer_to_json(answer)["warnings"][0]["code"] == CODE
        assert base.search("الحق في الحياة", mode="keyword").warnings == ()
        status = base.status()
        assert _codes(status.warnings) == [CODE]
        assert status_to_json(status)["warnings"] == [
            {"code": CODE, "message": status.warnings[0].message}
        ]
        # Re-embedded with the multilingual model: nothing to say.
        base.configure(embedding={"provider": "tei", "url": tei.url, "model": E5}, reembed=True)
        base.index(reembed=True)
        assert base.search("الحق في الحياة والحرية").warnings == ()
        assert base.search("الحق في الحياة", mode="dense").warnings == ()
        assert base.status().warnings == ()


def test_a_portuguese_base_with_an_english_model_says_so(tmp_path, tei):
    with _base(tmp_path / "pt.db", tei, MINILM, EXAMPLES / "ti") as base:
        answer = base.search("configuração do proxy")
        assert _codes(answer.warnings) == [CODE]
        assert "is Portuguese, which all-MiniLM-L6-v2 (English)" in answer.warnings[0].message


def test_english_bases_with_an_english_model_say_nothing(tmp_path, tei):
    with _base(tmp_path / "en.db", tei, MINILM, EXAMPLES / "policies") as base:
        assert base.search("how many holidays do I get").warnings == ()
        assert base.status().warnings == ()
    # The whole handbook: English with two Portuguese files.
    with _base(tmp_path / "handbook.db", tei, MINILM, EXAMPLES) as base:
        assert base.language_profile().latin.get("Portuguese", 0) > 0
        assert base.search("how many holidays do I get").warnings == ()
        assert base.status().warnings == ()


def test_an_empty_base_or_an_unknown_model_says_nothing(tmp_path, arabic_folder):
    with Base(tmp_path / "empty.db", create=True) as base:
        assert base.status().warnings == ()
        assert _codes(base.search("anything").warnings) == ["NOTHING_INDEXED_YET"]
    with Base(tmp_path / "unknown.db", create=True) as base:
        base.configure(embedding=DEAD_EMBEDDING)  # a TEI server named by its url only
        base.add_source(arabic_folder)
        base.index()
        # Only that the model did not answer: nothing is said of a model it cannot name.
        assert _codes(base.status().warnings) == ["CHUNKS_WITHOUT_VECTORS"]


def test_a_model_that_is_down_is_still_judged_in_status_not_in_a_keyword_answer(
    tmp_path, arabic_folder
):
    with Base(tmp_path / "down.db", create=True) as base:
        base.configure(embedding={**DEAD_EMBEDDING, "model": MINILM})
        base.add_source(arabic_folder)
        base.index()
        assert _codes(base.status().warnings) == [CODE, "CHUNKS_WITHOUT_VECTORS"]
        assert _codes(base.search("الحق في الحياة").warnings) == ["NO_VECTORS"]


def test_the_profile_is_made_again_only_when_chunks_change(tmp_path, tei, monkeypatch):
    made = []
    real = languages.profile_of
    monkeypatch.setattr(languages, "profile_of", lambda texts: made.append(1) or real(texts))
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(PARAGRAPHS["English"], "utf-8")
    with _base(tmp_path / "b.db", tei, MINILM, folder) as base:
        for _ in range(3):
            base.search("human rights")
        base.status()
        assert len(made) == 1
        base.index()  # nothing changed
        base.search("human rights")
        assert len(made) == 1
        (folder / "b.md").write_text(ARABIC * 3, "utf-8")
        base.index()
        assert _codes(base.search("human rights").warnings) == [CODE]
        assert len(made) == 2


def test_a_model_that_reads_every_language_reads_no_sample(tmp_path, tei, arabic_folder):
    """A search and a status by a multilingual model (or one not known) never read the
    base's languages: they could warn of nothing (a fresh process's search saves the read)."""
    made = []
    real = languages.profile_of
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(languages, "profile_of", lambda texts: made.append(1) or real(texts))
        for model in (E5, "my-model"):
            with _base(tmp_path / f"{model}.db", tei, model, arabic_folder) as base:
                assert _codes(base.search("الحق في الحياة").warnings) == []
                assert CODE not in _codes(base.status().warnings)
        assert made == []
        with _base(tmp_path / "minilm.db", tei, MINILM, arabic_folder) as base:
            assert _codes(base.search("الحق في الحياة").warnings) == [CODE]
        assert made == [1]
