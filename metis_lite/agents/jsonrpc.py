"""JSON-RPC 2.0 messages read one line at a time, bounded: what MCP's stdio carries.

`LineFramer` cuts bytes into lines and says once, as soon as it is seen, that a line is past its
limit (the rest of that line is dropped, never held). `read_message` reads one line as a JSON
object whose every number can be read: an integer beyond 64 bits or a number that is not finite
is refused before anything parses it further (Python refuses integers past 4,300 digits, and
pydantic past 64 bits; a 5,000-digit id once got no answer at all). Each refusal is a `Refusal`,
the JSON-RPC error that answers the message: for the request's id when it can be read, else for
null, with our public code first in its message and {"code", "message"} as its data. Nothing
here knows MCP; mcp_server.py hands on what passes to the SDK.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

INTEGER_LIMIT = 2**63
"""Integers are read from -2**63 to 2**63 - 1: every id a client makes and every number a tool
takes fits (SQLite's integers); Python itself refuses past 4,300 digits."""

INTEGER_DIGITS = len(str(INTEGER_LIMIT))

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
"""JSON-RPC 2.0's error codes."""


class LineFramer:
    """Cuts bytes into lines of at most `limit` bytes; a longer one is given once as None (as
    soon as it passes the limit) and its bytes are dropped up to its newline."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._line = bytearray()
        self._dropping = False

    def feed(self, data: bytes) -> list[bytes | None]:
        lines: list[bytes | None] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            self._take(data[start:end], lines)
            if not self._dropping:
                lines.append(bytes(self._line))
            self._line.clear()
            self._dropping = False
            start = end + 1
        self._take(data[start:], lines)
        return lines

    def close(self) -> list[bytes | None]:
        """The last line, when stdin ends without a newline."""
        last: list[bytes | None] = [bytes(self._line)] if self._line and not self._dropping else []
        self._line.clear()
        return last

    def _take(self, part: bytes, lines: list[bytes | None]) -> None:
        if self._dropping:
            return
        if len(self._line) + len(part) > self.limit:
            lines.append(None)
            self._line.clear()
            self._dropping = True
            return
        self._line += part


@dataclass(frozen=True)
class Refusal:
    """A message answered here: the JSON-RPC error, for the id it carried (None: null)."""

    id: str | int | None
    code: int
    public: str
    message: str

    def line(self) -> bytes:
        said = f"{self.public}: {self.message}"
        error = {
            "code": self.code,
            "message": said,
            "data": {"code": self.public, "message": self.message},
        }
        answer = {"jsonrpc": "2.0", "id": self.id, "error": error}
        return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


class _Unreadable:
    """Where a number stood that cannot be read (an integer beyond 64 bits, an infinity)."""


_UNREADABLE = _Unreadable()


def _integer(text: str) -> int | _Unreadable:
    if len(text.lstrip("-")) > INTEGER_DIGITS:
        return _UNREADABLE
    value = int(text)
    return value if -INTEGER_LIMIT <= value < INTEGER_LIMIT else _UNREADABLE


def _real(text: str) -> float | _Unreadable:
    value = float(text)
    return value if math.isfinite(value) else _UNREADABLE


def _constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_message(line: bytes) -> dict[str, Any] | Refusal:
    """One line as a JSON-RPC message (a JSON object, every number within bounds), or the
    Refusal that answers it."""
    try:
        value = json.loads(line, parse_int=_integer, parse_float=_real, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Refusal(None, PARSE_ERROR, "INVALID_REQUEST", f"the message is not JSON ({exc})")
    if not isinstance(value, dict):
        return Refusal(None, INVALID_REQUEST, "INVALID_REQUEST", "a message is one JSON object")
    if value.get("id") is _UNREADABLE:
        return Refusal(
            None, INVALID_REQUEST, "INVALID_REQUEST", "the id is an integer beyond 64 bits"
        )
    if "method" in value and "id" in value and request_id(value) is None:
        # else the SDK reads it as a notification (the id dropped) and nothing answers it
        return Refusal(
            None, INVALID_REQUEST, "INVALID_REQUEST", "a request's id is a string or an integer"
        )
    if _holds_unreadable(value):
        return Refusal(
            request_id(value),
            INVALID_PARAMS,
            "INVALID_REQUEST",
            "a number in the message is an integer beyond 64 bits or not finite",
        )
    return value


def request_id(value: dict[str, Any]) -> str | int | None:
    """The id of a request (a message with a method), when it is one an answer may carry."""
    if "method" not in value:
        return None
    found = value.get("id")
    if isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool)):
        return found
    return None


def _holds_unreadable(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if item is _UNREADABLE:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
