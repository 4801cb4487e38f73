"""The agent tools (agents.py) over the Model Context Protocol: over two descriptors (`stdio`,
which `metis-lite mcp` runs on stdin and stdout: cli/serve.py claims them and starts the event
loop), and streamable HTTP for `metis-lite serve` at /mcp, through `McpHttp`.

Built on the official SDK's low-level server (`mcp.server.lowlevel.Server`) rather than its
MCPServer: the tools' JSON schemas are written by hand in agents.py, for agents to read (their
descriptions, enums and bounds), their arguments are checked there once, and MCPServer would
also set up the process's logging (a root handler at INFO) when made.

Errors carry our public codes. A tool that fails answers a tool error (`isError`) whose text
starts with the code (`EMBEDDING_MODEL_UNAVAILABLE: …`) and whose structured content is the
HTTP API's `{"error": {"code", "message"}}`; an unknown tool, and a passage that cannot be
read, are JSON-RPC errors (-32602 for the request's fault, -32603 for the server's) with the
code at the start of the message and the error object as data. A model that does not answer
does not fail a search: the base's own deadline (MODEL_DEADLINE_S) turns it into a search by
words with its warning (docs/how-search-works.md, "Warnings"). Nothing here logs a question
or a fact.

On stdio the SDK's own transport read a line whole however long it was, and left a message it
could not read unanswered: one 50 MB line took the process to 21.6 GB, and a 5,000-digit id got
no reply at all, so its client waited forever. `metis-lite mcp` runs the SDK's server on a
transport of its own (`stdio`, below) that:

- reads stdin READ_BYTES at a time and holds at most MAX_MESSAGE_BYTES of one line, the cap of
  a request to /mcp: a longer line is answered as soon as it is seen, and the rest of it is
  read and dropped up to its newline;
- answers each message it cannot hand on with a JSON-RPC error (jsonrpc.py reads each line):
  not JSON (-32700), not one JSON-RPC message, a request whose id is not a string or an integer
  (-32600), an integer beyond 64 bits or a number that is not finite (-32600 in the id, else
  -32602). The error carries the request's id when it can be read, else null, with the code
  first in its message and the error object as data, as above. What the SDK then refuses (an
  unknown method, wrong params) it answers itself;
- reads nothing more while MAX_PENDING requests wait for their answers, so that a flood holds
  at most MAX_PENDING messages;
- writes every answer, one the SDK cannot write as UTF-8 (a lone surrogate quoted back) with
  escapes; at the end of stdin it waits up to EOF_WAIT_S for the answers still owed.

It reads and writes the descriptors it is given; which ones, and that stray output of any
library never lands in the protocol, is the entry point's (cli/serve.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import threading
from collections import Counter
from collections.abc import Mapping, MutableMapping, Sequence
from contextlib import nullcontext
from typing import Any

import anyio
import anyio.to_thread
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from metis_lite import __version__
from metis_lite.agents import tools as agents
from metis_lite.agents.jsonrpc import INVALID_REQUEST, LineFramer, Refusal, read_message, request_id
from metis_lite.agents.tools import Agent, Hold, Scope
from metis_lite.base import passages
from metis_lite.base.core import Base
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.settings import MODEL_DEADLINE_S, REQUEST_BODY_MAX_BYTES

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


class McpHttp:
    """The streamable HTTP transport (stateless, JSON answers) for a threaded HTTP server.

    The SDK's app runs on an event loop in a thread of its own; `handle` is called from any
    of the server's worker threads with one request to /mcp and returns its answer. Only POST
    reaches the SDK (a stateless server keeps no stream open): GET and DELETE answer 405.
    The caller checks tokens, Host and Origin first (the SDK's DNS-rebinding check is off, as
    the service's own Host check is the one), and says which bases the request may name.
    The bases stay the caller's: `close` stops the loop, not them. Each tool call holds them
    with `hold` (a read-only service's pins) from its start to its end, also past ANSWER_S,
    when the request has been answered 503 and its hold let go: a copy replaced meanwhile is
    not closed under a search still running.
    """

    def __init__(
        self, bases: Mapping[str, Base], *, answer_s: float = ANSWER_S, hold: Hold = nullcontext
    ) -> None:
        self._agent = Agent(bases, hold=hold)
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


# -- stdio, bounded -------------------------------------------------------------------------

MAX_MESSAGE_BYTES = REQUEST_BODY_MAX_BYTES
"""The longest line read as a message: the same cap as a request's body at /mcp."""

READ_BYTES = 64 * 1024
"""Bytes read from stdin at a time."""

MAX_PENDING = 32
"""Requests handed on and not yet answered; past it stdin waits (the SDK's own bound on what
it runs at once is its thread pool, 40)."""

EOF_WAIT_S = 4 * MODEL_DEADLINE_S
"""At the end of stdin, how long the answers still owed are waited for (as McpHttp's ANSWER_S:
a search waits at most one deadline for each of its models)."""


def validated(value: dict[str, Any]) -> types.JSONRPCMessage | Refusal:
    """The SDK's message, or a Refusal saying what of the envelope is wrong."""
    try:
        return types.jsonrpc_message_adapter.validate_python(value, by_name=False)
    except ValidationError as exc:
        shape = _shape(value)
        errors = [e for e in exc.errors() if e["loc"][:1] == (shape,)] or exc.errors()
        where = ".".join(str(part) for part in errors[0]["loc"][1:]) or "the message"
        said = f"not a JSON-RPC 2.0 message: {where}: {errors[0]['msg']}"
        return Refusal(request_id(value), INVALID_REQUEST, "INVALID_REQUEST", said)


def _shape(value: dict[str, Any]) -> str:
    """Which of the four JSON-RPC messages this one means to be (whose errors to report)."""
    if "method" in value:
        return "JSONRPCRequest" if "id" in value else "JSONRPCNotification"
    return "JSONRPCError" if "error" in value else "JSONRPCResponse"


def encoded(message: types.JSONRPCMessage) -> bytes:
    """One line of JSON; a lone surrogate (which UTF-8 cannot carry) is written escaped."""
    try:
        return message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
    except (ValueError, UnicodeError):  # PydanticSerializationError is a ValueError
        dumped = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return json.dumps(dumped, separators=(",", ":")).encode() + b"\n"


class _Pending:
    """Requests handed on and not yet answered, by id (a Counter: a client may reuse one)."""

    def __init__(self) -> None:
        self._ids: Counter[tuple[bool, Any]] = Counter()
        self._changed = anyio.Event()

    def __len__(self) -> int:
        return self._ids.total()

    def asked(self, value: Any) -> None:
        self._ids[(isinstance(value, str), value)] += 1

    def settled(self, value: Any) -> None:
        """Answered, or cancelled by the client (which then waits for no answer)."""
        key = (isinstance(value, str), value)
        if self._ids[key] > 0:
            self._ids[key] -= 1
            if not self._ids[key]:
                del self._ids[key]
            self._changed.set()
            self._changed = anyio.Event()

    async def below(self, limit: int) -> None:
        while len(self) >= limit:
            await self._changed.wait()


async def stdio(server: Server, *, stdin: int, stdout: int) -> None:
    """Serve `server` over the two descriptors until stdin ends (or stdout breaks)."""
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage](0)
    pending = _Pending()
    lock = anyio.Lock()

    async def write(data: bytes) -> None:
        async with lock:
            await anyio.to_thread.run_sync(_write_all, stdout, data, abandon_on_cancel=True)

    async def hand_on(line: bytes) -> None:
        value = read_message(line)
        message = validated(value) if isinstance(value, dict) else value
        if isinstance(message, Refusal):
            await write(message.line())
            return
        if isinstance(message, types.JSONRPCRequest):
            await pending.below(MAX_PENDING)
            pending.asked(message.id)
        elif isinstance(message, types.JSONRPCNotification):
            if message.method == "notifications/cancelled" and isinstance(message.params, dict):
                pending.settled(message.params.get("requestId"))
        await read_send.send(SessionMessage(message))

    async def read() -> None:
        framer = LineFramer(MAX_MESSAGE_BYTES)
        async with read_send:
            while True:
                data = await anyio.to_thread.run_sync(
                    os.read, stdin, READ_BYTES, abandon_on_cancel=True
                )
                for line in framer.feed(data) if data else framer.close():
                    if line is None:
                        await write(_too_long().line())
                    elif line.strip():
                        await hand_on(line)
                if not data:
                    with anyio.move_on_after(EOF_WAIT_S):
                        await pending.below(1)
                    return

    async def answer() -> None:
        async with write_recv:
            async for session_message in write_recv:
                message = session_message.message
                await write(encoded(message))
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    pending.settled(message.id)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read)
            group.start_soon(answer)
            await server.run(read_recv, write_send, server.create_initialization_options())
            await write_send.aclose()
    except* OSError:  # stdout closed under us: the client is gone
        pass


def _too_long() -> Refusal:
    return Refusal(
        None,
        INVALID_REQUEST,
        "PAYLOAD_TOO_LARGE",
        f"a message is at most {MAX_MESSAGE_BYTES} bytes on one line; this one is longer and"
        " was not read",
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
