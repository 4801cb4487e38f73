"""JSON-RPC lines read bounded (metis_lite.agents.jsonrpc): lines cut whatever the chunks, a long one
said once and never held, and every message that cannot be read answered with the error a
client reads — for its id when a request's id can be read. tests/test_mcp.py feeds the same to a
real `metis-lite mcp` process."""

from __future__ import annotations

import json

import pytest

from metis_lite.agents.jsonrpc import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    LineFramer,
    Refusal,
    read_message,
)


@pytest.mark.parametrize(
    ("chunks", "lines"),
    [
        ([b"ab\ncd\n"], [b"ab", b"cd"]),
        ([b"a", b"b\nc", b"d\n"], [b"ab", b"cd"]),
        ([b"x" * 11 + b"\nok\n"], [None, b"ok"]),
        ([b"x" * 6, b"x" * 6, b"x" * 6, b"\nok\n"], [None, b"ok"]),  # said once, when seen
        ([b"x" * 6, b"x" * 6 + b"\n"], [None]),
        ([b"x" * 10 + b"\n"], [b"x" * 10]),
        ([b"\n\n"], [b"", b""]),
    ],
)
def test_lines_are_cut_and_a_long_one_said_once(chunks, lines):
    framer = LineFramer(10)
    assert [line for chunk in chunks for line in framer.feed(chunk)] == lines
    framer.feed(b"tail")
    assert framer.close() == [b"tail"] and framer.close() == []


def test_a_long_line_is_never_held():
    framer = LineFramer(10)
    for _ in range(1000):
        framer.feed(b"y" * 4096)
        assert len(framer._line) <= 10
    assert framer.feed(b"\nok\n") == [b"ok"]


DIGITS = "1" + "0" * 4999


@pytest.mark.parametrize(
    ("line", "code", "id_"),
    [
        (b"{not json", PARSE_ERROR, None),
        (b"\xff\xfe{}", PARSE_ERROR, None),
        (b'{"x": NaN}', PARSE_ERROR, None),
        (b"[" * 5000, PARSE_ERROR, None),
        (b"[1]", INVALID_REQUEST, None),
        (b"null", INVALID_REQUEST, None),
        (f'{{"jsonrpc": "2.0", "id": {DIGITS}, "method": "m"}}'.encode(), INVALID_REQUEST, None),
        (b'{"jsonrpc": "2.0", "id": 9223372036854775808, "method": "m"}', INVALID_REQUEST, None),
        (b'{"jsonrpc": "2.0", "id": true, "method": "m"}', INVALID_REQUEST, None),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "m"}', INVALID_REQUEST, None),
        (b'{"jsonrpc": "2.0", "id": null, "method": "m"}', INVALID_REQUEST, None),
        (
            f'{{"jsonrpc": "2.0", "id": 3, "method": "m", "params": {{"n": {DIGITS}}}}}'.encode(),
            INVALID_PARAMS,
            3,
        ),
        (
            b'{"jsonrpc": "2.0", "id": "a", "method": "m", "params": {"n": 1e999}}',
            INVALID_PARAMS,
            "a",
        ),
        (b'{"jsonrpc": "2.0", "method": "m", "params": [[-1e400]]}', INVALID_PARAMS, None),
        (
            f'{{"jsonrpc": "2.0", "id": 4, "result": {{"n": {DIGITS}}}}}'.encode(),
            INVALID_PARAMS,
            None,
        ),
    ],
)
def test_a_message_that_cannot_be_read_is_refused_for_its_id(line, code, id_):
    refusal = read_message(line)
    assert isinstance(refusal, Refusal)
    answer = json.loads(refusal.line())
    assert answer["jsonrpc"] == "2.0" and answer["id"] == id_
    assert answer["error"]["code"] == code
    assert answer["error"]["message"] == f"INVALID_REQUEST: {answer['error']['data']['message']}"
    assert answer["error"]["data"]["code"] == "INVALID_REQUEST"


def test_what_can_be_read_is_read_as_sent():
    line = (
        b'{"jsonrpc": "2.0", "id": -9223372036854775808, "method": "tools/call",'
        b' "params": {"top_k": 9223372036854775807, "x": 0.5, "s": "\\ud800"}}'
    )
    message = read_message(line)
    assert message == {
        "jsonrpc": "2.0",
        "id": -(2**63),
        "method": "tools/call",
        "params": {"top_k": 2**63 - 1, "x": 0.5, "s": "\ud800"},
    }
