"""The MCP edge, driven by the official SDK's own client: a real `metis-lite mcp` process over
stdio, and a real `metis-lite serve` with tokens at /mcp (the streamable HTTP transport); and
the stdio process fed what no client should send (a 50 MB line, 5,000-digit numbers, wrong
types, not JSON) line by line: each is answered with a JSON-RPC error, in bounded memory.

Bases search by words (their embedding model refuses at once), except the one whose model
accepts and never answers (its deadline is the test) and the shipped example with the
embedded model."""

from __future__ import annotations

import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx2
import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, words_only_base
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from metis_lite.agents import mcp_server
from metis_lite.base import passages
from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest
from metis_lite.records import Citation, Filters

QUESTION = "quokka7319 proxy"
"""A question no file holds: it must not turn up in a base file or a log."""

SILENT_TIMEOUT_S = 2
TOOLS = {"search", "remember", "facts", "status", "list_bases"}


# -- bases and servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: a model that hangs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.fixture(scope="module")
def bases(tmp_path_factory, silent_port) -> dict[str, Path]:
    """handbook (documents), team (a memory) and slow (vectors, and a model that hangs)."""
    top = tmp_path_factory.mktemp("mcp")
    paths = {name: top / f"{name}.db" for name in ("handbook", "team", "slow")}
    with words_only_base(paths["handbook"], EXAMPLES) as base:
        base.index()
    with words_only_base(paths["team"]) as base:
        base.configure(kind="memory")
        base.remember("Ana works on the billing service", key="ana/work", subject="Ana")
    with words_only_base(paths["slow"], EXAMPLES) as base:
        base.index()
        hanging = {"provider": "tei", "url": f"http://127.0.0.1:{silent_port}"}
        base.configure(embedding={**hanging, "timeout_s": SILENT_TIMEOUT_S})
        ids = base.store.filtered_chunk_ids(Filters()).tolist()
        rng = np.random.default_rng(7)
        base.store.put_vectors(base.model_label, [(i, rng.normal(size=8)) for i in ids])
    return paths


def stdio(args: list[str], errlog) -> Client:
    command = StdioServerParameters(
        command=sys.executable,
        args=["-m", "metis_lite", "mcp", *args],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    return Client(stdio_client(command, errlog=errlog))


TOKENS = {
    "all-bases-token-0123": ["*"],
    "every-base-token-0123": ["handbook", "team"],
    "team-only-token-01234": ["team"],
}
"""As `serve` reads them from METIS_TOKENS: each token scoped to its bases."""


@contextmanager
def http_service(paths: dict[str, Path], folder: Path) -> Iterator[str]:
    """A real `metis-lite serve NAME=PATH…` with tokens; its /mcp address."""
    from serving import serve, stop

    tokens = json.dumps({"tokens": [{"token": t, "bases": b} for t, b in TOKENS.items()]})
    served = [f"{name}={path}" for name, path in paths.items()]
    service = serve(folder, *served, "--poll", "0", env={"METIS_TOKENS": tokens})
    try:
        yield f"{service.url}/mcp"
    finally:
        stop(service)
    assert QUESTION not in service.output()
    assert "Traceback" not in service.output()


@asynccontextmanager
async def http(url: str, token: str, mode: str = "auto") -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as transport:
        async with Client(streamable_http_client(url, http_client=transport), mode=mode) as client:
            yield client


async def tool(client: Client, name: str, **arguments) -> tuple[bool, dict, str]:
    result = await client.call_tool(name, arguments)
    return result.is_error, result.structured_content, result.content[0].text


# -- stdio -----------------------------------------------------------------------------------


def test_stdio_lists_each_tool_with_its_schema_and_answers_each(bases, tmp_path):
    handbook, team = f"handbook={bases['handbook']}", f"team={bases['team']}"

    async def scenario() -> None:
        async with stdio([handbook, team], errlog) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert set(listed) == TOOLS
            for t in listed.values():
                assert len(t.description) > 60 and t.input_schema["type"] == "object"
                assert t.input_schema["additionalProperties"] is False
            search = listed["search"].input_schema
            assert search["required"] == ["question"]
            assert search["properties"]["mode"]["enum"] == ["hybrid", "dense", "keyword"]
            assert listed["search"].annotations.read_only_hint is True
            assert listed["remember"].annotations.read_only_hint is False
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == [passages.TEMPLATE]

            error, answer, text = await tool(client, "search", question=QUESTION, top_k=3)
            assert not error and set(answer) >= {"mode", "warnings", "took", "results"}
            assert [w["code"] for w in answer["warnings"]] == ["NO_VECTORS"] * 2
            first = answer["results"][0]
            assert first["base"] == "handbook" and first["scores"]["keyword_rank"] == 1
            assert first["citation"]["document"] == "ti/configuração-do-proxy.md"
            assert first["uri"].startswith("metis://handbook/handbook/ti/configura")
            assert "#line=" in first["uri"] and first["uri"] in text
            assert text.startswith("3 results from handbook, team, hybrid")

            passage = (await client.read_resource(first["uri"])).contents[0]
            assert first["text"].splitlines()[0] in passage.text
            assert passage.meta["first_line"] <= first["citation"]["line"]
            whole = (await client.read_resource(first["uri"].split("#")[0])).contents[0]
            assert len(whole.text) > len(passage.text) and whole.mime_type == "text/markdown"
            for uri, code in (
                ("metis://handbook/handbook/../../etc/passwd", "DOCUMENT_NOT_FOUND"),
                ("metis://handbook/handbook/ti/nothing.md", "DOCUMENT_NOT_FOUND"),
                ("metis://nobody/handbook/ti/x.md", "BASE_NOT_FOUND"),
                ("file:///etc/passwd", "INVALID_REQUEST"),
            ):
                with pytest.raises(MCPError, match=code):
                    await client.read_resource(uri)

            error, answer, _ = await tool(
                client, "search", question="Ana", bases=["team"], filters={"kinds": ["note"]}
            )
            assert answer["results"][0]["fact"]["key"] == "ana/work"
            assert "uri" not in answer["results"][0]  # a fact has no file to read

            error, fact, text = await tool(
                client, "remember", base="team", text="Ana leads the billing team", key="ana/work"
            )
            assert not error and fact["holds"] and fact["base"] == "team"
            error, facts, _ = await tool(client, "facts", base="team")
            assert facts["total"] == 2 and facts["facts"][0]["id"] == fact["id"]
            assert facts["facts"][1]["replaced_by"] == fact["id"]

            error, status, text = await tool(client, "status", base="handbook")
            assert status["name"] == "handbook" and status["chunks"] > 10
            assert text.startswith("handbook (documents): Waiting")
            error, listing, _ = await tool(client, "list_bases")
            assert [b["name"] for b in listing["bases"]] == ["handbook", "team"]
            assert listing["bases"][1]["kind"] == "memory"

            for arguments, code in (
                ({"question": QUESTION, "top_k": "ten"}, "INVALID_REQUEST: top_k"),
                ({"question": QUESTION, "top_k": 0}, "INVALID_REQUEST: top_k"),
                ({"question": QUESTION, "mode": "psychic"}, "INVALID_REQUEST: mode"),
                ({"question": QUESTION, "filter": {}}, "INVALID_REQUEST: search takes no"),
                ({"question": 42}, "INVALID_REQUEST"),
                ({"question": QUESTION, "bases": ["nobody"]}, "BASE_NOT_FOUND"),
            ):
                error, answer, text = await tool(client, "search", **arguments)
                assert error and text.startswith(code), (arguments, text)
                assert answer["error"]["code"] == code.split(":")[0]
            error, _, text = await tool(client, "status")
            assert error and text.startswith(
                "INVALID_REQUEST: name the base: one of handbook, team"
            )
            with pytest.raises(MCPError, match="unknown tool"):
                await client.call_tool("delete_everything", {})

    with (tmp_path / "stderr.txt").open("w+") as errlog:
        anyio.run(scenario)
    log = (tmp_path / "stderr.txt").read_text()
    for path in bases["handbook"].parent.iterdir():
        assert QUESTION.encode() not in path.read_bytes(), path.name
    assert QUESTION not in log


def test_a_model_that_never_answers_gives_warnings_within_its_deadline(bases, tmp_path):
    async def scenario() -> None:
        async with stdio([str(bases["slow"])], errlog) as client:
            started = time.monotonic()
            error, answer, text = await tool(client, "search", question="proxy port")
            took = time.monotonic() - started
            assert not error and answer["results"], text
            codes = [w["code"] for w in answer["warnings"]]
            assert codes == ["EMBEDDING_MODEL_UNAVAILABLE"]
            assert SILENT_TIMEOUT_S - 0.5 < took < SILENT_TIMEOUT_S + 5
            error, answer, text = await tool(client, "search", question="proxy", mode="dense")
            assert error and text.startswith("EMBEDDING_MODEL_UNAVAILABLE: ")

    with (tmp_path / "stderr.txt").open("w+") as errlog:
        anyio.run(scenario)


def test_the_example_base_answers_by_meaning_with_the_embedded_model(example_base_file, tmp_path):
    async def scenario() -> None:
        async with stdio([str(example_base_file)], errlog) as client:
            _, answer, text = await tool(client, "search", question="how many holidays do I get")
            assert answer["warnings"] == []
            first = answer["results"][0]
            assert first["citation"]["document"] == "policies/leave.md"
            assert first["scores"]["dense_rank"] == 1
            assert text.splitlines()[1].startswith("1. Leave policy — handbook/policies/leave.md:")

    with (tmp_path / "stderr.txt").open("w+") as errlog:
        anyio.run(scenario)


def test_without_the_sdk_the_command_says_how_to_install_it(bases):
    blocked = (
        "import sys; sys.modules['mcp'] = None; from metis_lite.cli import main;"
        f" sys.exit(main(['mcp', {str(bases['team'])!r}]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "pip install 'metis-lite[mcp]'" in done.stderr


# -- stdio, as an attacker writes it ------------------------------------------------------------

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
"""What each request of a stateless client carries (the era `metis-lite mcp -h` shows)."""

LINE_S = 60
"""The longest a line's answer may take (the first search loads nothing: words only)."""


class RawStdio:
    """A real `metis-lite mcp` process, written to and read from line by line."""

    def __init__(self, *args: str, errlog) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "metis_lite", "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def ask(self, id_: object, method: str, **params: object) -> None:
        message = {
            "jsonrpc": "2.0",
            "id": id_,
            "method": method,
            "params": {**params, "_meta": ENVELOPE},
        }
        self.send(json.dumps(message).encode() + b"\n")

    def answer(self) -> dict:
        """The next line the process writes, as JSON (within LINE_S)."""
        deadline = time.monotonic() + LINE_S
        while b"\n" not in self._buffer:
            assert time.monotonic() < deadline, "no answer: the client would wait forever"
            if self._selector.select(timeout=1):
                chunk = os.read(self.process.stdout.fileno(), 65536)
                assert chunk, "the process closed its stdout"
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def peak_rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc")

    def close(self) -> int:
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=LINE_S)
        finally:
            self._selector.close()
            self.process.stdout.close()


def refused(answer: dict, code: int, public: str, id_: object) -> None:
    assert answer["jsonrpc"] == "2.0" and answer["id"] == id_, answer
    error = answer["error"]
    assert error["code"] == code and error["message"].startswith(f"{public}: "), error
    assert error["data"]["code"] == public


def test_a_50_mb_line_and_5000_digit_numbers_are_answered_in_bounded_memory(bases, tmp_path):
    with (tmp_path / "stderr.txt").open("w+b") as errlog:
        client = RawStdio(f"team={bases['team']}", errlog=errlog)
        try:
            client.ask(1, "tools/list")
            assert {t["name"] for t in client.answer()["result"]["tools"]} == TOOLS
            before = client.peak_rss_bytes()

            huge = b'{"jsonrpc": "2.0", "id": 2, "method": "tools/list", "pad": "' + b"x" * (
                50 * 1024 * 1024
            )
            writer = threading.Thread(target=client.send, args=(huge + b'"}\n',), daemon=True)
            writer.start()
            refused(client.answer(), -32600, "PAYLOAD_TOO_LARGE", None)  # seen before its end
            writer.join(LINE_S)
            assert not writer.is_alive(), "the whole line was read (and dropped)"
            grown = client.peak_rss_bytes() - before
            assert grown < 32 * 1024 * 1024, f"a 50 MB line took {grown / 2**20:.0f} MiB"

            digits = b"1" + b"0" * 4999
            client.send(b'{"jsonrpc": "2.0", "id": ' + digits + b', "method": "tools/list"}\n')
            refused(client.answer(), -32600, "INVALID_REQUEST", None)
            call = b'{"name": "search", "arguments": {"question": "Ana", "top_k": ' + digits + b"}}"
            client.send(
                b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": ' + call + b"}\n"
            )
            refused(client.answer(), -32602, "INVALID_REQUEST", 3)
            for line, code, id_ in (
                (b"{not json", -32700, None),
                (b"\xff\xfe{}", -32700, None),
                (b"[1, 2]", -32600, None),
                (b'"tools/list"', -32600, None),
                (b'{"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "x"}', -32600, 4),
                (b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', -32600, None),
                (b'{"jsonrpc": "2.0", "id": 5, "method": 7}', -32600, 5),
                (b'{"jsonrpc": "2.0", "id": 6, "method": "tools/list", "x": 1e999}', -32602, 6),
                (b'{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "x": NaN}', -32700, None),
                (b"[" * 100_000, -32700, None),  # 100 KB of nesting: too long, never parsed
                (b"[" * 60_000, -32700, None),  # nested past what JSON is read to
            ):
                client.send(line + b"\n")
                answer = client.answer()
                if len(line) > mcp_server.MAX_MESSAGE_BYTES:
                    refused(answer, -32600, "PAYLOAD_TOO_LARGE", None)
                else:
                    assert answer["id"] == id_ and answer["error"]["code"] == code, (line, answer)
            client.ask(8, "tools/call", name="search", arguments={"question": "Ana", "top_k": 1})
            answer = client.answer()
            assert answer["id"] == 8 and not answer["result"]["isError"]
            assert answer["result"]["structuredContent"]["results"][0]["base"] == "team"
            client.ask(9, "tools/call", name="search", arguments={"question": "\ud800 Ana"})
            assert client.answer()["id"] == 9, "a lone surrogate is answered, escaped"
        finally:
            code = client.close()
        assert code == 0
        errlog.seek(0)
        assert b"Traceback" not in errlog.read()


def test_a_flood_of_requests_then_the_end_of_stdin_gets_every_answer(bases, tmp_path):
    """More requests than are handed on at once (MAX_PENDING): stdin waits while they are
    answered, and those read when stdin ends are still answered before the process exits."""
    flood = 3 * mcp_server.MAX_PENDING
    with (tmp_path / "stderr.txt").open("w+b") as errlog:
        client = RawStdio(f"team={bases['team']}", errlog=errlog)
        client.ask(0, "tools/call", name="facts", arguments={"base": "team"})
        for n in range(1, flood + 1):
            client.ask(n, "tools/list")
        client.process.stdin.close()
        try:
            answers = [client.answer() for _ in range(flood + 1)]
        finally:
            code = client.close()
        assert sorted(a["id"] for a in answers) == list(range(flood + 1)) and code == 0
        facts = next(a for a in answers if a["id"] == 0)["result"]["structuredContent"]
        assert facts["facts"] and all("result" in a for a in answers)


# -- HTTP ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_http_scopes_every_tool_and_passage_to_the_token_bases(bases, mode, tmp_path):
    served = {name: bases[name] for name in ("handbook", "team")}

    async def scenario(url: str) -> None:
        async with http(url, "team-only-token-01234", mode) as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            _, listing, _ = await tool(client, "list_bases")
            assert [b["name"] for b in listing["bases"]] == ["team"]
            error, answer, _ = await tool(client, "search", question="Ana")
            assert not error and {r["base"] for r in answer["results"]} == {"team"}
            for name, arguments in (
                ("search", {"question": "proxy", "bases": ["handbook"]}),
                ("search", {"question": "proxy", "bases": ["team", "handbook"]}),
                ("status", {"base": "handbook"}),
                ("facts", {"base": "handbook"}),
                ("remember", {"base": "handbook", "text": "the proxy moved"}),
                ("status", {"base": "not-served"}),
            ):
                error, answer, text = await tool(client, name, **arguments)
                assert error and text.startswith("FORBIDDEN: "), (name, text)
            with pytest.raises(MCPError, match="FORBIDDEN"):
                await client.read_resource("metis://handbook/handbook/ti/configuração-do-proxy.md")
            error, _, text = await tool(client, "search", question="Ana", top_k=101)
            assert error and text.startswith("INVALID_REQUEST: top_k")

        async with http(url, "all-bases-token-0123", mode) as client:
            _, answer, _ = await tool(client, "search", question=QUESTION, bases=["handbook"])
            passage = await client.read_resource(answer["results"][0]["uri"])
            assert "proxy" in passage.contents[0].text

        async with http(url, "every-base-token-0123", mode) as client:
            _, listing, _ = await tool(client, "list_bases")
            assert [b["name"] for b in listing["bases"]] == ["handbook", "team"]

    with http_service(served, tmp_path) as url:
        anyio.run(scenario, url)
        plain = httpx2.Client(headers={"Authorization": "Bearer all-bases-token-0123"})
        with plain:
            assert plain.get(url).status_code == 405
            refused = plain.post(
                url,
                content=b"{not json",
                headers={
                    "Content-Type": "application/json",
                    "Accept": "application/json, text/event-stream",
                },
            )
            assert 400 <= refused.status_code < 500
        assert httpx2.post(url, json={}, timeout=30).status_code == 401  # no token
        wrong = {"Authorization": "Bearer not-a-token-of-this-service"}
        assert httpx2.post(url, json={}, headers=wrong, timeout=30).status_code == 401


# -- addresses ------------------------------------------------------------------------------


def test_an_address_names_base_source_path_and_line_or_page():
    cited = Citation("handbook", "ti/a b.md", "T", "md", (), "…", line=18)
    assert passages.address_of("h", cited) == "metis://h/handbook/ti/a%20b.md#line=18"
    address = passages.parse_address("metis://h/handbook/ti/a%20b.md#line=18")
    assert address == passages.Address("h", "handbook", "ti/a b.md", line=18)
    pdf = passages.parse_address("metis://h/docs/guide.pdf#page=3")
    assert (pdf.path, pdf.page, pdf.line) == ("guide.pdf", 3, None)
    for bad in ("metis://h/handbook", "metis://h/x/y#line=0", "metis://h/x/y#col=2", "x://h/a/b"):
        with pytest.raises(InvalidRequest):
            passages.parse_address(bad)


def test_a_pdf_page_is_read_as_the_base_read_it(bases):
    pdfs = sorted(EXAMPLES.rglob("*.pdf"))
    assert pdfs, "the example folder has a pdf"
    with Base(bases["handbook"]) as base:
        path = pdfs[0].relative_to(EXAMPLES).as_posix()
        passage = passages.read_passage(
            base, passages.Address("handbook", "handbook", path, page=1)
        )
        assert passage.page == 1 and passage.text.strip()
        with pytest.raises(InvalidRequest):
            passages.read_passage(base, passages.Address("handbook", "handbook", path, line=3))
