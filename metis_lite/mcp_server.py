"""The agent tools (agents.py) over the Model Context Protocol: stdio for `metis-lite mcp`, and
streamable HTTP for `metis-lite serve` at /mcp, through `McpHttp`.

Built on the official SDK's low-level server (`mcp.server.lowlevel.Server`) rather than its
MCPServer: the tools' JSON schemas are written by hand in agents.py, for agents to read (their
descriptions, enums and bounds), their arguments are checked there once, and MCPServer would
also set up the process's logging (a root handler at INFO) when made.

Errors carry our public codes. A tool that fails answers a tool error (`isError`) whose text
starts with the code (`EMBEDDING_MODEL_UNAVAILABLE: …`) and whose structured content is the
HTTP API's `{"error": {"code", "message"}}`; an unknown tool, and a passage that cannot be
read, are JSON-RPC errors (-32602 for the request's fault, -32603 for the server's) with the
code at the start of the message and the error object as data. A model that does not answer
does not fail a search: the base's own deadline (MODEL_DEADLINE_S) turns it into the spec's
warnings. Nothing here logs a question or a fact.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError

from metis_lite import __version__, agents, passages
from metis_lite.agents import Agent, Scope
from metis_lite.base import Base
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.settings import MODEL_DEADLINE_S

INSTRUCTIONS = (
    "Searches the user's document bases and memories. Call list_bases, then search; each "
    "result cites its source and document with a line or page, and its `uri` reads the "
    "passage around it (resources/read). Warnings say when an answer is by words only. "
    "remember adds a fact; facts lists them, newest first."
)

SCOPE_KEY = "metis_lite.bases"
"""Where McpHttp puts a request's scope in the ASGI scope's `state`, for the tools to read."""

_NO_SCOPE = frozenset[str]()

ANSWER_S = 4 * MODEL_DEADLINE_S
"""McpHttp's longest wait for one answer: a search waits at most one deadline for its
embedding model and one for its reranker; past four, something else is stuck (503)."""

START_S = 10.0
"""How long McpHttp waits for its event loop to start."""


def build_server(agent: Agent, *, scoped: bool) -> Server:
    """An MCP server over `agent`. `scoped`: every request carries its scope (McpHttp's); one
    that carries none may name no base. Unscoped (stdio), every base may be named."""
    tools = [
        types.Tool(
            name=name,
            title=spec["title"],
            description=spec["description"],
            input_schema=spec["inputSchema"],
            annotations=types.ToolAnnotations(
                read_only_hint=spec["readOnly"],
                destructive_hint=False,
                idempotent_hint=spec["readOnly"],
                open_world_hint=False,
            ),
        )
        for name, spec in agents.TOOLS.items()
    ]
    template = types.ResourceTemplate(
        name="passage",
        title="A document's passage",
        uri_template=passages.TEMPLATE,
        description=(
            "A document of a base, read back: add #line=N (md, txt) or #page=N (pdf) for the "
            "passage there. Search results give each one's address as `uri`."
        ),
        mime_type="text/plain",
    )

    def scope_of(ctx: Any) -> Scope:
        if not scoped:
            return None
        state = getattr(getattr(ctx, "request", None), "scope", {}).get("state") or {}
        return state.get(SCOPE_KEY, _NO_SCOPE)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in agents.TOOLS:
            raise _protocol_error(InvalidRequest(f"unknown tool {params.name!r}"))
        try:
            answer = await anyio.to_thread.run_sync(
                agent.call, params.name, params.arguments or {}, scope_of(ctx)
            )
        except MetisError as exc:
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=f"{exc.code}: {exc.message}")],
                structured_content=exc.to_json(),
                is_error=True,
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=answer.text)],
            structured_content=answer.data,
        )

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # documents are reached by address

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(
        ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            passage = await anyio.to_thread.run_sync(agent.read, params.uri, scope_of(ctx))
        except MetisError as exc:
            raise _protocol_error(exc) from None
        meta = {
            "first_line": passage.first_line,
            "last_line": passage.last_line,
            "page": passage.page,
            "truncated": passage.truncated or None,
        }
        contents = types.TextResourceContents(
            uri=params.uri,
            mime_type=passage.mime_type,
            text=passage.text,
            _meta={k: v for k, v in meta.items() if v is not None} or None,
        )
        return types.ReadResourceResult(contents=[contents])

    return Server(
        "metis-lite",
        version=__version__,
        title="metis-lite",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=lambda name: agents.TOOLS.get(name, {}).get("inputSchema"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


def _protocol_error(exc: MetisError) -> MCPError:
    code = types.INVALID_PARAMS if exc.status < 500 else types.INTERNAL_ERROR
    return MCPError(code=code, message=f"{exc.code}: {exc.message}", data=exc.to_json()["error"])


def serve_stdio(bases: Mapping[str, Base]) -> None:
    """Answer MCP on stdin and stdout until the client closes stdin."""
    agent = Agent(bases)
    server = build_server(agent, scoped=False)

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        agent.close()


class McpHttp:
    """The streamable HTTP transport (stateless, JSON answers) for a threaded HTTP server.

    The SDK's app runs on an event loop in a thread of its own; `handle` is called from any
    of the server's worker threads with one request to /mcp and returns its answer. Only POST
    reaches the SDK (a stateless server keeps no stream open): GET and DELETE answer 405.
    The caller checks tokens, Host and Origin first (the SDK's DNS-rebinding check is off, as
    the service's own Host check is the one), and says which bases the request may name.
    The bases stay the caller's: `close` stops the loop, not them.
    """

    def __init__(self, bases: Mapping[str, Base], *, answer_s: float = ANSWER_S) -> None:
        self._agent = Agent(bases)
        self._answer_s = answer_s
        self._manager = StreamableHTTPSessionManager(
            app=build_server(self._agent, scoped=True),
            json_response=True,
            stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="mcp-http", daemon=True)
        self._thread.start()
        if not self._started.wait(START_S):
            raise RuntimeError("the MCP transport did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        async with self._manager.run():
            self._started.set()
            await self._stop.wait()

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(START_S)
        self._agent.close()
        if not self._thread.is_alive():
            self._loop.close()

    def handle(
        self,
        method: str,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes,
        *,
        allowed_bases: frozenset[str] | None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request to /mcp: (status, headers, body) to send back. `headers` as received
        (names in any case); `allowed_bases` the bases the request may name (None: all; `*`
        in the set: all); a tool naming another base answers FORBIDDEN."""
        if method.upper() != "POST":
            return _json(405, {"error": "the MCP endpoint takes POST"}, [("allow", "POST")])
        future = asyncio.run_coroutine_threadsafe(
            self._exchange(headers, body, allowed_bases), self._loop
        )
        try:
            return future.result(self._answer_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return _json(503, {"error": "no answer in time"})

    async def _exchange(
        self, headers: Sequence[tuple[bytes, bytes]], body: bytes, allowed: frozenset[str] | None
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/mcp",
            "raw_path": b"/mcp",
            "root_path": "",
            "query_string": b"",
            "headers": [(name.lower(), value) for name, value in headers],
            "client": None,
            "server": None,
            "state": {SCOPE_KEY: allowed},
        }
        answered = asyncio.Event()
        delivered = False
        status, out_headers, chunks = 500, [], []

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await answered.wait()
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status, out_headers
            if message["type"] == "http.response.start":
                status = message["status"]
                out_headers = [
                    (k.decode("latin-1"), v.decode("latin-1")) for k, v in message["headers"]
                ]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    answered.set()

        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            answered.set()
        return status, out_headers, b"".join(chunks)


def _json(
    status: int, value: object, headers: Sequence[tuple[str, str]] = ()
) -> tuple[int, list[tuple[str, str]], bytes]:
    body = json.dumps(value).encode()
    return status, [("content-type", "application/json"), *headers], body
