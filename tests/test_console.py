"""The console end to end: headless Chromium against a real `metis-lite serve` on loopback.

Two bases are served: the example handbook (embedded model, reranked by a small TEI-protocol
reranker run here) and a base whose embedding model answered while it was indexed and is gone
now, so each search of it falls back to words with its warning. Screenshots of each page,
at a desktop and a phone size, go to test-artifacts/console/ for a person to look at.

Needs Debian's chromium and chromium-driver (scripts/install-system); skipped without them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from conftest import EXAMPLES, ROOT
from webdriver import Browser, available

from metis_lite.base.core import Base
from metis_lite.copies.publish import publish
from metis_lite.text.tokenizer import tokens

pytestmark = pytest.mark.skipif(
    not available(),
    reason="no chromium/chromedriver (run scripts/install-system, Debian's apt-get)",
)

ARTIFACTS = ROOT / "test-artifacts" / "console"
DESKTOP = (1280, 800)
PHONE = (390, 844)
"""The two windows every page is looked at in, in CSS pixels of the page itself."""
NEAR_THE_TOP = 10  # console/why.js: a list placed a passage near the top: its first 10
QUESTION = "how many holidays do I get"
TOKEN = "console-test-token-0123456789"
SERVE_START_S = 60.0
FAKE_DIMENSION = 64
INDEX_AGAIN_S = 30.0

SCORE_LINE = re.compile(
    r"^(meaning -?\d\.\d{3} \(#\d+\))?( · )?(words \d+\.\d{2} \(#\d+\))?( · )?"
    r"(fused \d\.\d{4})?( · )?(reranker -?\d+\.\d{3})?$"
)
WORDS_HELD = r"(: “[^”]+”(, “[^”]+”)*)?"
WHY = re.compile(
    r"^(close in meaning \(#\d+\) and shares words \(#\d+\) — both agree"
    rf"|shares words \(#\d+{WORDS_HELD}\); (not among the closest in meaning|further in meaning"
    r" \(#\d+\)) — (it names a term of the question exactly|the words it shares are common in the base)"
    rf"|close in meaning \(#\d+\); (its words do not match|shares words \(#\d+{WORDS_HELD}\), further"
    r" down) — it says the same thing in other words"
    rf"|(close in meaning \(#\d+\))?( and )?(shares words \(#\d+{WORDS_HELD}\))?; neither list placed"
    r" it among its first 10)"
    r"; the reranker scored it -?\d+\.\d{3}$"
)
CHINESE_TEXT = "北京的天气很冷。东京的天气很好,大阪下雨。"
GEARBOX_WORDS = "<p>The gearbox turns the shaft of the widget at a steady pace.</p>" * 60
SPROCKET_WORDS = "<p>Each sprocket is checked after its retries.</p>" * 60
SITE_PAGE = (
    "<html><head><title>Gearbox — Widget docs</title></head><body>"
    '<nav role="navigation">SITENAV widget index</nav><div role="main">'
    '<div class="navheader">SITEBAR Prev | Up | Home</div>'
    f'<h1 id="gearbox">Gearbox<a class="headerlink" href="#gearbox">¶</a></h1>{GEARBOX_WORDS}'
    '<h2 id="retries">Sprocket retries<a class="headerlink" href="#retries">¶</a></h2>'
    f"<p>A sprocket that slips is retried three times.</p>{SPROCKET_WORDS}</div>"
    '<div class="footer">SITEFOOT copyright</div></body></html>'
)
"""An HTML page shaped like Sphinx's: its cited heading far down, its site's furniture about."""
MARKUP_TEXT = (
    'Error <img src="x" id="injected"> and <b>Xid 79</b> on gpu-17 means the card fell off the bus.'
)


# -- a text-embeddings-inference stand-in: /embed (hashed words) and /rerank (shared words) ------


class FakeTEI(ThreadingHTTPServer):
    """Answers TEI's /embed and /rerank on loopback, from the words of each text."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _FakeTEIHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join()


def _vector(text: str) -> list[float]:
    values = [0.0] * FAKE_DIMENSION
    for word in tokens(text):
        values[zlib.crc32(word.encode()) % FAKE_DIMENSION] += 1.0
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def _share(question: str, text: str) -> float:
    """The share of the question's words a passage holds, a longer word counting more."""
    asked = set(tokens(question))
    held = asked & set(tokens(text))
    return round(0.05 + 0.9 * sum(map(len, held)) / max(1, sum(map(len, asked))), 6)


class _FakeTEIHandler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/embed":
            answer = [_vector(text) for text in body["inputs"]]
        else:
            scores = [_share(body["query"], text) for text in body["texts"]]
            answer = sorted(
                ({"index": i, "score": s} for i, s in enumerate(scores)), key=lambda r: -r["score"]
            )
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


# -- the service, the bases and the browser -------------------------------------------------------


class Service:
    """`metis-lite serve BASE… --port 0` in its own process; its URL from its first line."""

    def __init__(
        self, *bases: Path | str, env: dict[str, str] | None = None, flags=("--poll", "0")
    ) -> None:
        command = [sys.executable, "-m", "metis_lite", "serve", *map(str, bases)]
        self.process = subprocess.Popen(
            [*command, "--port", "0", *flags, "--no-access-log"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        first = self.process.stdout.readline().strip()
        if not first.startswith("serving http://"):
            self.stop()
            raise RuntimeError(f"the service did not start: {first!r}")
        self.url = first.removeprefix("serving ").rstrip("/")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=SERVE_START_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stdout.close()


@pytest.fixture(scope="module")
def reranker() -> Iterator[FakeTEI]:
    server = FakeTEI()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def bases(example_base_file, reranker, tmp_path_factory) -> tuple[Path, Path]:
    """handbook (the example base, reranked) and down (its embedding model gone since indexing)."""
    folder = tmp_path_factory.mktemp("console")
    handbook = folder / "handbook.db"
    shutil.copy(example_base_file, handbook)
    with Base(handbook) as base:
        base.configure(reranker={"provider": "tei", "url": reranker.url})
    notes = folder / "notes"
    notes.mkdir()
    shutil.copy(EXAMPLES / "policies" / "leave.md", notes / "leave.md")
    (notes / "gpu-errors.txt").write_text(MARKUP_TEXT + "\n")
    (notes / "weather.txt").write_text(CHINESE_TEXT + "\n", encoding="utf-8")
    (notes / "gearbox.html").write_text(SITE_PAGE, encoding="utf-8")
    model = FakeTEI()
    down = folder / "down.db"
    try:
        with Base(down, create=True) as base:
            base.configure(embedding={"provider": "tei", "url": model.url, "timeout_s": 1})
            base.add_source(notes)
            assert base.index().without_vector == 0
    finally:
        model.stop()  # from now on the embedding model does not answer
    return handbook, down


@pytest.fixture(scope="module")
def service(bases) -> Iterator[Service]:
    served = Service(*bases)
    yield served
    served.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser.start() as started:
        yield started


@pytest.fixture
def page(browser, service) -> Browser:
    """The browser on the console's Search page at desktop size, the page started."""
    browser.viewport(*DESKTOP)
    open_console(browser, service.url)
    return browser


def open_console(browser: Browser, url: str, hash_: str = "") -> None:
    browser.get(f"{url}/{hash_}")
    browser.wait_for("return document.documentElement.dataset.ready === 'true'", what="start")


def search(browser: Browser, question: str, *, bases: tuple[str, ...] = ("handbook",)) -> None:
    """Pick the bases, type the question and press Enter (the keyboard's way)."""
    browser.execute(
        "for (const box of document.querySelectorAll('input[name=bases]'))"
        " { if (box.checked !== arguments[0].includes(box.value)) box.click(); }",
        list(bases),
    )
    browser.type("#question", question + "\n")
    browser.wait_for(
        "return !document.querySelector('#answer').hasAttribute('aria-busy')"
        " && document.querySelector('#answer-meta').textContent !== 'Searching…'",
        what="an answer",
    )


def shoot(browser: Browser, name: str, *, full_page: bool = True) -> None:
    """desktop and phone screenshots of the page as it is; the phone one checks the page fits."""
    size = browser.execute("return [window.outerWidth, window.outerHeight]")
    browser.screenshot(ARTIFACTS / f"{name}-desktop.png", full_page=full_page)
    browser.viewport(*PHONE)
    overflow = browser.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    browser.screenshot(ARTIFACTS / f"{name}-phone.png", full_page=full_page)
    browser.size(*size)
    assert overflow <= 0, f"{name}: the page is {overflow} px wider than a phone"


def in_view(browser: Browser, css: str) -> bool:
    """Whether the first element matching `css` lies wholly inside the window."""
    return browser.execute(
        "const r = document.querySelector(arguments[0]).getBoundingClientRect();"
        "return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight",
        css,
    )


def marked(browser: Browser, css: str) -> set[str]:
    """The words of what is marked in the elements matching `css`, as the words index reads them."""
    texts = browser.execute(
        "return [...document.querySelectorAll(arguments[0])].map(m => m.textContent)", css
    )
    return {word for text in texts for word in tokens(text)}


def first(*values):
    """The first value that is not None (a missing rank is None)."""
    return next((v for v in values if v is not None), None)


def marks_expected(result: dict) -> set[str]:
    """What the console should mark in a result: the forms of the words it holds that are not
    common in its base (the answer's own account, checked in tests/test_snippet.py)."""
    return {form for w in result["words"] if not w["common"] for form in w["forms"]}


def page_problems(browser: Browser) -> list[str]:
    """Script errors and CSP refusals in the browser's log, and the page's own error message."""
    log = browser.log()
    problems = [
        entry["message"]
        for entry in log
        if entry["source"] in ("javascript", "security")
        or "Content Security Policy" in entry["message"]
    ]
    shown = browser.execute("return document.querySelector('#answer-error').textContent")
    if "went wrong in the page" in shown:
        problems.append(shown)
    return problems


def base_status(url: str, name: str) -> dict:
    statuses = httpx.get(f"{url}/v1/bases", timeout=30).json()["bases"]
    return next(status for status in statuses if status["name"] == name)


def api_search(
    url: str, mode: str, *, base: str = "handbook", question: str = QUESTION, **options
) -> dict:
    body = {"question": question, "mode": mode, "top_k": 10, **options}
    answer = httpx.post(f"{url}/v1/bases/{base}/search", json=body, timeout=30)
    answer.raise_for_status()
    return answer.json()


# -- the tests --------------------------------------------------------------------------------------


def test_a_search_shows_results_with_score_lines_citations_and_timings(page, service):
    search(page, QUESTION)
    expected = api_search(service.url, "hybrid")["results"]
    assert page.texts("#results .result .doc") == [
        f"{r['citation']['source']}/{r['citation']['document']}" for r in expected
    ]
    lines = page.texts("#results .scores")
    assert lines and all(SCORE_LINE.match(line) for line in lines), lines
    assert any(line.startswith("meaning ") and " · words " in line for line in lines), lines
    assert all(
        line.endswith(f"reranker {r['scores']['rerank']:.3f}")
        for line, r in zip(lines, expected, strict=True)
    )
    first = expected[0]["citation"]
    crumbs = page.texts("#results .result:first-child .crumbs li")
    assert crumbs == first["headings"]
    place = page.text("#results .result:first-child .place")
    assert place == (f"page {first['page']}" if first["page"] else f"line {first['line']}")
    for n, result in enumerate(expected, start=1):
        shown = marked(page, f"#results .result:nth-child({n}) .text:not(.whole) mark")
        snippet_words = set(tokens(result["citation"]["snippet"]))
        assert shown == marks_expected(result) & snippet_words, (n, shown)
    everything = marked(page, "#results .text:not(.whole) mark")
    assert "gets" in everything  # "get" with an ending: the vacation passage's "gets 25 days"
    assert "do" not in everything  # held by a quarter of the handbook's chunks: it says nothing
    assert any("do" in tokens(r["citation"]["snippet"]) for r in expected)  # yet it is there
    meta = page.text("#answer-meta")
    for part in ("results", "hybrid", "reranked", "embed", "meaning", "words", "fuse", "rerank"):
        assert part in meta
    assert page.execute("return getComputedStyle(document.activeElement).outlineStyle") == "solid"
    assert page_problems(page) == []
    shoot(page, "search")


def test_the_empty_search_page_fits_the_window_at_both_sizes(browser, service):
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        browser.viewport(*size)
        open_console(browser, service.url)
        heights = browser.execute(
            "return [document.documentElement.scrollHeight, innerHeight, innerWidth]"
        )
        assert heights[0] <= heights[1] and heights[2] == size[0], (name, heights)
        browser.screenshot(ARTIFACTS / f"home-{name}.png", full_page=False)


def test_on_a_phone_the_answer_is_scrolled_into_view(browser, service):
    """Below the form, a phone shows no result: after Search the page scrolls to the answer, so
    the first result's title and snippet are on screen."""
    browser.viewport(*PHONE)
    open_console(browser, service.url)
    below = browser.execute("return document.querySelector('#answer').getBoundingClientRect().top")
    assert below > PHONE[1] / 2  # the answer starts low: a result would be cut by the fold
    search(browser, QUESTION)
    browser.wait("#results .result:not(.skeleton)")
    assert in_view(browser, "#results .result:first-child .result-title")
    assert in_view(browser, "#results .result:first-child .text")
    browser.screenshot(ARTIFACTS / "search-fold-phone.png", full_page=False)


def test_with_the_filters_open_a_warning_is_in_view(browser, service):
    """Open Filters push the answer below the fold: a search whose filters keep nothing must
    still be seen to answer, with its warning on screen."""
    for name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        browser.viewport(*size)
        open_console(browser, service.url)
        browser.click("#filters summary")
        browser.type("#prefix", "nowhere/")
        search(browser, "vacation")
        browser.wait("#warnings .warning")
        assert browser.text("#warnings .warning").endswith("no document matches the filters")
        assert in_view(browser, "#warnings .warning"), name
        browser.screenshot(ARTIFACTS / f"filters-warning-{name}.png", full_page=False)


def test_snippets_read_as_text_and_mark_what_the_words_matched(page, service):
    """A Markdown table's row reads as its cells, code as its text; the marks are the words the
    search matched, with their endings, never a common word."""
    page.execute("document.querySelector('#mode').value = 'keyword'")
    search(page, "hotel per night Lisbon")
    snippets = page.texts("#results .result .text:not(.whole)")
    table = next(text for text in snippets if "Lisbon · €140 · €45." in text)
    assert "|" not in table and "--" not in table, table
    search(page, "proxy lumen internal porta")
    snippets = page.texts("#results .result .text:not(.whole)")
    wholes = page.execute(
        "return [...document.querySelectorAll('#results .text.whole')].map(p => p.textContent)"
    )
    assert any("`" in text for text in wholes)  # the passages hold code spans…
    assert snippets and not any("`" in text for text in snippets), snippets  # …their snippets not
    answer = api_search(service.url, "keyword", question="proxy lumen internal porta")["results"]
    for n, result in enumerate(answer, start=1):
        shown = marked(page, f"#results .result:nth-child({n}) .text:not(.whole) mark")
        assert shown <= marks_expected(result), (n, shown)
    assert page_problems(page) == []
    shoot(page, "snippets")


def test_filters_narrow_the_search_and_the_address_keeps_it(page):
    page.click("#filters summary")
    page.type("#prefix", "policies/")
    page.click("label[for=kinds-md]")
    search(page, QUESTION)
    documents = page.texts("#results .result .doc")
    assert documents and all(
        d.startswith("handbook/policies/") and d.endswith(".md") for d in documents
    )
    assert page.text("#filters-summary") == "· policies/ · md"
    address = page.execute("return location.href")
    assert "prefix=policies%2F" in address and "kinds=md" in address
    page.get(address)  # a bookmarked search is asked again
    page.wait("#results .result:not(.skeleton)")
    assert page.texts("#results .result .doc") == documents
    assert page.execute("return document.querySelector('#question').value") == QUESTION


def test_compare_lists_every_passage_with_its_three_ranks_and_why(page, service):
    page.click("#compare")
    search(page, QUESTION)
    page.wait(".compare-table")
    headers = page.texts(".compare-table thead th")
    assert headers == ["Passage", "Both", "Meaning", "Words", "Why it came up"]
    answers = {
        mode: api_search(service.url, mode)["results"] for mode in ("hybrid", "dense", "keyword")
    }
    expected = {}
    for column, mode in enumerate(("hybrid", "dense", "keyword")):
        for rank, result in enumerate(answers[mode], start=1):
            key = (result["citation"]["document"], result["text"])
            expected.setdefault(key, ["—", "—", "—"])[column] = f"#{rank}"
    rows = page.execute(
        "return [...document.querySelectorAll('.compare-table tbody tr')].map(tr =>"
        " [tr.querySelector('.doc').textContent, ...[...tr.querySelectorAll('td.num')]"
        ".map(td => td.textContent), tr.querySelector('.why').textContent])"
    )
    shown = sorted((doc.split("/", 1)[1], *ranks) for doc, *ranks, _ in rows)
    assert shown == sorted((document, *ranks) for (document, _), ranks in expected.items())
    whys = [why for *_, why in rows]
    assert all(WHY.match(why) for why in whys), whys
    for _, *ranks, why in rows:
        # The row's passage as each answer holds it, and the ranks its two lists gave it.
        found = {
            mode: answers[mode][int(rank[1:]) - 1]
            for mode, rank in zip(("hybrid", "dense", "keyword"), ranks, strict=True)
            if rank != "—"
        }
        h, d, k = (found.get(mode) for mode in ("hybrid", "dense", "keyword"))
        m = first(h and h["scores"].get("dense_rank"), d and d["scores"].get("dense_rank"))
        w = first(h and h["scores"].get("keyword_rank"), k and k["scores"].get("keyword_rank"))
        result = next(iter(found.values()))
        held = [x for x in result["words"] if x["exact"]]
        terms = [x["word"] for x in held if not x["common"]]
        near = m is not None and w is not None and m <= NEAR_THE_TOP and w <= NEAR_THE_TOP
        assert ("— both agree" in why) is near, (m, w, why)
        if "names a term of the question exactly" in why:
            assert terms and why.startswith(f"shares words (#{w}: “{'”, “'.join(terms)}”)"), why
        if "the words it shares are common in the base" in why:
            assert held and not terms, why
    assert any("— both agree" in why for why in whys)
    far = [
        r
        for r in answers["hybrid"]
        if {"dense_rank", "keyword_rank"} <= set(r["scores"])
        and max(r["scores"]["dense_rank"], r["scores"]["keyword_rank"]) > NEAR_THE_TOP
    ]
    assert far, "no passage that both lists found, one of them far down"  # what the rule is for
    for result in far:
        ranks = (result["scores"]["dense_rank"], result["scores"]["keyword_rank"])
        assert not any(
            f"(#{ranks[0]}) and shares words (#{ranks[1]}) — both agree" in why for why in whys
        )
    assert page_problems(page) == []
    shoot(page, "compare")
    # Words held by a quarter of the handbook or more ("do" 13 of 46 chunks, "the", "days"):
    # sharing them names no term of the question, and nothing is marked for them.
    search(page, "do the days")
    page.wait(".compare-table")
    whys = page.texts(".compare-table tbody .why")
    assert not any("names a term" in why for why in whys), whys
    assert any("— the words it shares are common in the base" in why for why in whys), whys
    assert page.find_all(".compare-table mark") == []


def test_the_fallback_to_words_is_shown_when_the_embedding_model_is_down(page):
    search(page, "Xid 79 gpu", bases=("down",))
    warnings = page.texts("#warnings .warning")
    assert len(warnings) == 1 and warnings[0].endswith(": results by keywords only"), warnings
    assert page.find_all("#results .result")
    lines = page.texts("#results .scores")
    assert lines and all(line.startswith("words ") for line in lines), lines
    # Text from a document is shown as text, never parsed as HTML.
    assert MARKUP_TEXT[:20] in page.text("#results .result .text")
    assert page.find_all("#results img, #injected, #results b") == []
    shoot(page, "fallback")
    search(page, "Xid 79 gpu", bases=("handbook", "down"))  # several bases: /v1/search
    assert any(w.startswith("Warning down: ") for w in page.texts("#warnings .warning"))
    assert set(page.texts("#results .badge")) == {"handbook", "down"}
    page.execute("document.querySelector('#mode').value = 'dense'")
    search(page, "Xid 79 gpu", bases=("down",))
    refused = page.text("#answer-error")
    assert "needs its embedding model" in refused and "EMBEDDING_MODEL_UNAVAILABLE" in refused
    assert page.find_all("#results .result") == []


def test_the_bases_page_shows_each_base(page, service):
    api_search(service.url, "keyword")
    open_console(page, service.url, "#/bases")
    page.wait(".base-card")
    statuses = {b["name"]: b for b in httpx.get(f"{service.url}/v1/bases").json()["bases"]}
    assert page.texts(".base-card h2") == list(statuses)
    for card, name in enumerate(statuses, start=1):
        status = statuses[name]
        text = page.text(f".base-card:nth-child({card})")
        terms = page.texts(f".base-card:nth-child({card}) dt")
        facts = dict(zip(terms, page.texts(f".base-card:nth-child({card}) dd"), strict=True))
        assert status["state"] in text
        assert facts["Documents"] == str(status["documents"])
        assert facts["Chunks"] == str(status["chunks"])
        assert facts["Chunks without a vector"] == str(status["chunks_without_vector"])
        assert facts["Embedding model"] == status["embedding"]
        assert facts["Reranker"] == (status["reranker"] or "none")
        today = sum(status["searches_per_day"].values())
        assert f"{today} in the last 14 days" in text
    assert sum(statuses["handbook"]["searches_per_day"].values()) > 0
    assert page.execute("return document.title") == "Metis → Bases"
    assert page_problems(page) == []
    shoot(page, "bases")
    runs = statuses["down"]["last_indexing"]["id"]
    page.click("[data-focus-key=index-down]")  # the base reads its sources again: 202
    deadline = time.monotonic() + INDEX_AGAIN_S
    while base_status(service.url, "down")["last_indexing"]["id"] == runs:
        assert time.monotonic() < deadline, "Index now did not index the base again"
        time.sleep(0.1)
    assert page.text("#bases-meta") == "2 bases served here."


def test_a_read_only_reader_shows_its_base_as_read_only_without_index_now(browser, bases, tmp_path):
    copy = tmp_path / "down.db"
    publish(bases[1], copy)
    reader = Service(f"down={copy}", flags=("--read-only",))
    try:
        browser.viewport(*DESKTOP)
        open_console(browser, reader.url, "#/bases")
        browser.wait(".base-card")
        card = browser.text(".base-card")
        assert "Read-only" in card and "Waiting" in card
        assert browser.find_all("[data-focus-key=index-down]") == []  # nothing to index here
        title = browser.execute("return document.querySelector('.state-read-only').title")
        assert title.startswith("a copy published ") and "never indexed or written" in title
        assert page_problems(browser) == []
    finally:
        reader.stop()


def test_the_page_asks_for_a_token_and_keeps_it_in_the_session_only(browser, bases):
    tokens_json = json.dumps({"tokens": [{"token": TOKEN, "bases": ["*"]}]})
    guarded = Service(bases[0], env={"METIS_TOKENS": tokens_json})
    try:
        browser.size(*DESKTOP)
        browser.get(f"{guarded.url}/")
        browser.wait("#token-dialog[open]")
        assert browser.active() == "token"
        browser.screenshot(ARTIFACTS / "token-desktop.png", full_page=False)
        browser.type("#token", "not-the-token-at-all\n")
        browser.wait_for(
            "return document.querySelector('#token-message').textContent.includes('refused')",
            what="the refusal",
        )
        browser.type("#token", TOKEN + "\n")
        browser.wait("#bases-options input[value=handbook]")
        assert browser.find_all("#token-dialog[open]") == []
        browser.execute("document.querySelector('#mode').value = 'keyword'")  # no model to load
        search(browser, QUESTION)
        assert browser.find_all("#results .result")
        stored = browser.execute(
            "return [sessionStorage.length, localStorage.length, document.cookie]"
        )
        assert stored == [1, 0, ""]
    finally:
        guarded.stop()


def test_an_unreachable_service_is_said_plainly(browser, bases):
    gone = Service(bases[0])
    browser.size(*DESKTOP)
    open_console(browser, gone.url)
    gone.stop()
    search(browser, QUESTION)
    banner = browser.text("#service")
    assert "cannot be reached" in banner and gone.url in banner
    assert "could not be reached" in browser.text("#answer-error")
    assert browser.find_all("#results .result") == []
    shoot(browser, "unreachable")


# -- what a person does next: open the document, try again, use the keyboard -------------------


def test_a_result_opens_its_document_at_the_cited_passage(page, service):
    """Every line of the passage is marked, not only its first; the page scrolls to it and its
    head (the Back link, the document's name) stays in view above it."""
    page.execute("document.querySelector('#mode').value = 'keyword'")
    search(page, "claim expenses receipt")
    first = api_search(service.url, "keyword", question="claim expenses receipt")["results"][0]
    lines = page.texts("#results .scores")  # by words only: no meaning, nothing fused
    assert lines and all(line.startswith("words ") and "fused" not in line for line in lines)
    meta = page.text("#answer-meta")
    assert "(words " in meta and not {"embed", "meaning", "fuse"} & set(re.findall(r"\w+", meta))
    link = page.execute("return document.querySelector('#results a.doc').getAttribute('href')")
    assert link.startswith("#/document?"), "the first result does not link to its document"
    page.click("#results a.doc")
    page.wait("#document-body .lines")
    citation = first["citation"]
    path, line = citation["document"], citation["line"]
    on_disk = (EXAMPLES / path).read_text(encoding="utf-8").splitlines()
    passage = first["text"].split("\n")
    assert len(passage) > 3  # a passage of several lines, deep in its file
    cited = page.execute(
        "return [...document.querySelectorAll('#document-body li.cited')]"
        ".map(li => [li.value, li.textContent.replace('\u200b', '')])"  # a blank line's stand-in
    )
    assert [n for n, _ in cited] == list(range(line, line + len(passage)))
    assert [text.strip() for _, text in cited] == [on_disk[n - 1].strip() for n, _ in cited]
    assert [text.strip() for _, text in cited] == [text.strip() for text in passage]
    assert page.execute("return scrollY") > 0  # it had to scroll to show the passage
    assert in_view(page, "#document-back") and in_view(page, "#document-heading")
    below_head = page.execute(
        "const head = document.querySelector('#document-head').getBoundingClientRect();"
        "const first = document.querySelector('li.cited').getBoundingClientRect();"
        "return first.top >= head.bottom && first.top < innerHeight"
    )
    assert below_head, "the passage's first line is hidden under the head or below the window"
    assert page.text("#document-heading") == f"handbook/{path}"
    assert page.text("#document-meta") == f"handbook · lines {line}–{line + len(passage) - 1}"
    assert page.execute("return document.title") == "Metis → Document"
    assert page_problems(page) == []
    shoot(page, "document", full_page=False)
    page.viewport(*PHONE)  # the head stays in view however far a phone's reader scrolls
    for where in ("0", "document.documentElement.scrollHeight"):
        page.execute(f"window.scrollTo(0, {where})")
        assert in_view(page, "#document-back") and in_view(page, "#document-heading"), where
    page.viewport(*DESKTOP)
    page.click("#document-back")
    page.wait("#results .result:not(.skeleton)")


def test_an_html_document_is_shown_whole_and_never_run(page, service):
    """The frame is as tall as the page in it, so its last line shows; no script runs in it."""
    page.execute("document.querySelector('#mode').value = 'keyword'")
    search(page, "Xid 79 nvidia-smi")
    href = page.execute(
        "return [...document.querySelectorAll('#results a.doc')].map(a => a.getAttribute('href'))"
        ".find(h => h.includes('gpu-troubleshooting.html'))"
    )
    assert href, "no result links to the GPU troubleshooting page"
    for size in (DESKTOP, PHONE):
        page.viewport(*size)
        page.get(f"{service.url}/{href}")
        fitted = page.wait_for(
            "const f = document.querySelector('#document-body iframe');"
            "const d = f && f.contentDocument;"
            "if (!d || d.readyState !== 'complete' || !d.body || !d.body.lastElementChild) return null;"
            "const last = [...d.body.querySelectorAll('*')].pop().getBoundingClientRect();"
            "return f.clientHeight >= d.documentElement.scrollHeight"
            " && last.bottom <= f.clientHeight && [f.sandbox.value, f.clientHeight, last.bottom];",
            what="the frame fitted to its page",
        )
        assert fitted[0] == "allow-same-origin", fitted  # no allow-scripts, no forms, no popups
        ran = page.execute(
            "const w = document.querySelector('#document-body iframe').contentWindow;"
            "return [w.analytics !== undefined, w.document.scripts.length]"
        )
        assert ran == [False, 2]  # its two scripts are there, and the first did not run
        shown = page.execute(
            "return document.querySelector('#document-body iframe').contentDocument.body.innerText"
        )
        assert "Xid 79" in shown, shown  # the page's content, without its site's header,
        assert "Lumen intranet" not in shown and "Last reviewed" not in shown  # nav and footer
        logged = [e["message"] for e in page.log() if e["source"] in ("javascript", "security")]
        assert all("about:srcdoc" in m for m in logged), logged  # only the frame's own, refused
        name = "document-html-desktop" if size == DESKTOP else "document-html-phone"
        page.screenshot(ARTIFACTS / f"{name}.png")


def test_an_html_result_opens_at_its_heading_without_the_sites_navigation(page, service):
    cited = api_search(service.url, "keyword", base="down", question="sprocket retried")
    citation = cited["results"][0]["citation"]
    assert (citation["document"], citation.get("anchor")) == ("gearbox.html", "retries")
    page.execute("document.querySelector('#mode').value = 'keyword'")
    search(page, "sprocket retried", bases=("down",))
    page.click("#results a.doc")
    shown = page.wait_for(
        "const f = document.querySelector('#document-body iframe');"
        "const d = f && f.contentDocument; const h = d && d.getElementById('retries');"
        "if (!h || d.readyState !== 'complete' || scrollY === 0) return null;"
        "const head = document.querySelector('#document-head').getBoundingClientRect().bottom;"
        "const top = f.getBoundingClientRect().top + h.getBoundingClientRect().top;"
        "return [top >= head && top < innerHeight / 2, d.body.innerText, top, head];",
        what="the page scrolled to its cited heading",
    )
    assert shown[0], shown[2:]
    assert "Sprocket retries" in shown[1]
    assert not {"SITENAV", "SITEBAR", "SITEFOOT"} & set(shown[1].split())  # without its site
    assert page.text("#document-meta") == "down · #retries"


def test_a_pdf_result_links_to_its_page_in_the_browsers_viewer(page, service):
    answer = api_search(service.url, "keyword", filters={"kinds": ["pdf"]})
    pdf = answer["results"][0]["citation"]
    page.execute("document.querySelector('#mode').value = 'keyword'")
    page.click("#filters summary")
    page.click("label[for=kinds-pdf]")
    search(page, QUESTION)
    href = page.execute("return document.querySelector('#results a.doc').getAttribute('href')")
    assert (
        href == f"/v1/bases/handbook/documents/{pdf['source']}/{pdf['document']}#page={pdf['page']}"
    )
    served = httpx.get(service.url + href.split("#")[0], timeout=30)
    assert served.status_code == 200
    assert served.headers["content-type"] == "application/pdf"
    assert served.content == (EXAMPLES / pdf["document"]).read_bytes()


def test_the_document_route_serves_only_indexed_files_inside_sources(service, bases, tmp_path):
    url = f"{service.url}/v1/bases/handbook/documents/handbook"
    html = httpx.get(f"{url}/it/gpu-troubleshooting.html", timeout=30)
    assert html.status_code == 200
    assert "sandbox" in html.headers["content-security-policy"]
    assert html.headers["x-content-type-options"] == "nosniff"
    for bad in ("../handbook.db", "%2e%2e/%2e%2e/etc/passwd", "it/missing.md", "it"):
        answer = httpx.get(f"{url}/{bad}", timeout=30)
        assert answer.status_code == 404, bad  # ".." is dropped by the client: no such route
        assert answer.json()["error"]["code"] in ("DOCUMENT_NOT_FOUND", "NOT_FOUND"), bad
    other = httpx.get(f"{service.url}/v1/bases/down/documents/handbook/welcome.md", timeout=30)
    assert other.status_code == 404


def test_the_document_route_needs_a_token_for_that_base(bases):
    tokens_json = json.dumps(
        {
            "tokens": [
                {"token": TOKEN, "bases": ["down"]},
                {"token": TOKEN + "h", "bases": ["handbook"]},
            ]
        }
    )
    guarded = Service(*bases, env={"METIS_TOKENS": tokens_json})
    try:
        url = f"{guarded.url}/v1/bases/handbook/documents/handbook/welcome.md"
        assert httpx.get(url, timeout=30).status_code == 401
        wrong = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        assert wrong.status_code == 403
        right = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}h"}, timeout=30)
        assert right.status_code == 200
        assert right.content == (EXAMPLES / "welcome.md").read_bytes()
    finally:
        guarded.stop()


def test_nothing_found_says_what_to_try(page):
    page.execute("document.querySelector('#mode').value = 'keyword'")
    page.click("#filters summary")
    page.type("#prefix", "purchasing/")
    search(page, "vacation")
    hint = page.text("#results .no-result")
    assert hint.startswith("Nothing was found for “vacation”")
    assert "Filters in force: folder purchasing/" in hint
    assert "Search hybrid" in hint and "Search by meaning only" in hint
    shoot(page, "no-result")
    page.execute(
        "[...document.querySelectorAll('.no-result a')].find(a => a.textContent === 'Search without them').click()"
    )
    page.wait("#results .result:not(.skeleton):not(.no-result)")
    assert page.execute("return document.querySelector('#prefix').value") == ""


def test_the_rerank_box_is_there_only_for_a_base_with_a_reranker(page):
    def shown(*names: str) -> bool:
        page.execute(
            "for (const box of document.querySelectorAll('input[name=bases]'))"
            " { if (box.checked !== arguments[0].includes(box.value)) box.click(); }",
            list(names),
        )
        return page.execute("return !document.querySelector('#rerank-field').hidden")

    assert shown("handbook") and shown("handbook", "down")
    assert not shown("down")


def test_slash_goes_to_the_question_and_enter_searches(page):
    page.execute("document.querySelector('#mode').value = 'keyword'")
    page.click("#filters summary")  # the focus is elsewhere now
    page.execute("document.activeElement.blur()")
    page.press("/")
    assert page.active() == "question"
    page.press("vacation\n")
    page.wait("#results .result:not(.skeleton)")
    assert page.execute("return location.hash").startswith("#/search?q=vacation")
    page.type("#prefix", "x")  # "/" typed in a field is a character, not a shortcut
    page.press("/")
    assert page.execute("return document.querySelector('#prefix').value") == "x/"


def test_words_of_a_language_without_spaces_are_highlighted_as_the_index_reads_them(page):
    """天气 is one bigram of the words index: its two characters are marked wherever they
    stand together, not the whole sentence (a run with no space) and not 天 alone."""
    page.execute("document.querySelector('#mode').value = 'keyword'")
    search(page, "明天的天气", bases=("down",))
    marked = page.execute(
        "return [...document.querySelectorAll('#results .result:first-child .text:not(.whole) mark')]"
        ".map(m => m.textContent)"
    )
    assert "weather.txt" in page.text("#results .result:first-child .doc")
    assert marked == ["的天气", "的天气"], marked


def test_a_passage_read_by_ocr_is_marked_ocr(page):
    citation = {"source": "scans", "document": "card.png", "kind": "image", "headings": []}
    page.execute(
        "window.shown = null; import('./results.js').then((m) => { window.shown = "
        "[true, false].map((ocr) => m.citationNodes({citation: {...arguments[0], ocr}, "
        "text: ''}, false, 'handbook')[0].querySelector('.ocr')?.textContent ?? ''); });",
        citation,
    )
    marks = page.wait_for("return window.shown", what="the citations drawn")
    assert marks == ["OCR", ""]


def test_the_other_places_of_a_results_text_are_listed_with_links(page):
    def place(document, page_number=None):
        return {
            "citation": {"source": "docs", "document": document, "kind": "md", "headings": []}
            | ({"page": page_number, "kind": "pdf"} if page_number else {})
        }

    result = {
        "citation": place("spawn.md")["citation"],
        "text": "",
        "also_in": [place("popen2.md"), place("notice.pdf", 3)],
    }
    page.execute(
        "window.shown = null; import('./results.js').then((m) => { const node = "
        "m.alsoIn(arguments[0], false, 'handbook'); const none = m.alsoIn({...arguments[0], "
        "also_in: []}, false, 'handbook'); window.shown = [node.textContent, "
        "[...node.querySelectorAll('a')].map((a) => a.getAttribute('href')), none]; });",
        result,
    )
    text, links, none = page.wait_for("return window.shown", what="the places drawn")
    assert text == "Also in docs/popen2.md, docs/notice.pdf (page 3)"
    assert links[0].startswith("#/document?") and "path=popen2.md" in links[0]
    assert none is None
