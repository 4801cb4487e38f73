"""The commands that serve: `serve` (bases over HTTP), `models serve` (the embedded models over
HTTP), `mcp` (bases to agents over MCP on stdin and stdout).

The HTTP servers are built and run by metis_lite/http/run.py (their flags too, shared with
`python -m metis_lite.http`); MCP's protocol and its bounded transport over two descriptors are
metis_lite/agents/mcp_server.py, which needs the extra `mcp`. This module wires them as commands, and
for `mcp` claims stdin and stdout for the protocol and runs the event loop.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from metis_lite.cli.common import add_command, epilog, usage
from metis_lite.errors import EXIT_USAGE

MODEL_PROTOCOLS = "TEI, OpenAI, Ollama and Cohere/Jina"
MODEL_ROUTES = (
    "TEI (/embed, /rerank), OpenAI (/v1/embeddings), Ollama (/api/embed)\nand Cohere/Jina"
    " (/v1/rerank, /v2/rerank)"
)
"""The protocols `models serve` answers (http/model_routes.py), as -h and the README name them."""

MCP_HELP = "answer agents over MCP (the Model Context Protocol) on stdin and stdout"
_ENVELOPE = (
    '"params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",'
    ' "io.modelcontextprotocol/clientCapabilities": {}}}'
)
MCP_EXAMPLES = (
    f"""echo '{{"jsonrpc": "2.0", "id": 1, "method": "server/discover", {_ENVELOPE}}}'"""
    " | metis-lite mcp hr=handbook.db   # what an agent's client learns first (base named hr)",
    f"""echo '{{"jsonrpc": "2.0", "id": 1, "method": "tools/list", {_ENVELOPE}}}'"""
    " | metis-lite mcp handbook.db   # the tools and their JSON schemas",
)
"""Each runs as written (tests/test_examples.py); an agent's MCP client starts the command itself,
keeps its stdin open and speaks the protocol on it (README, "Agents (MCP)")."""


def add_parser(commands: Any) -> None:
    from metis_lite.http import run as http_run

    serve = add_command(
        commands,
        "serve",
        http_run.run_from_args,
        "serve bases over HTTP: the JSON API and the web console",
        "metis-lite serve handbook.db   # then open http://127.0.0.1:8080/",
        "metis-lite serve hr=handbook.db --port 8090 --poll 0   # named hr, indexed only when asked",
    )
    http_run.add_arguments(serve)

    mcp = add_command(commands, "mcp", run_mcp, MCP_HELP, *MCP_EXAMPLES)
    mcp.add_argument(
        "bases",
        nargs="+",
        metavar="BASE",
        help="a base file to answer from, or NAME=PATH to name it (default name: the file's stem)",
    )

    models = add_command(
        commands,
        "models",
        lambda args: usage(models),
        f"serve the embedded models over the {MODEL_PROTOCOLS} protocols",
        "metis-lite models serve",
        "metis-lite models serve --embedding-model all-MiniLM-L6-v2 --port 8090",
    )
    model_commands = models.add_subparsers(dest="models_command", metavar="SUBCOMMAND")
    models_serve = model_commands.add_parser(
        "serve",
        help=f"serve the embedded model over the {MODEL_PROTOCOLS} protocols on loopback",
        description=f"serve the embedded model (and a cross-encoder, for rerank) over\n{MODEL_ROUTES}",
        epilog=epilog(
            (
                "metis-lite models serve   # multilingual-e5-small on http://127.0.0.1:8089",
                "metis-lite models serve --embedding-model all-MiniLM-L6-v2 --port 8090",
            )
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models_serve.set_defaults(handler=http_run.run_models_from_args)
    http_run.add_model_arguments(models_serve)


def run_mcp(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin; 2 without the MCP SDK (the extra `mcp`)."""
    try:
        from metis_lite.agents import mcp_server
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("metis_lite"):
            raise
        print(
            f"error: metis-lite mcp needs the MCP SDK ({exc.name} is missing): install it with"
            " pip install 'metis-lite[mcp]' (or scripts/install --dev in a clone)",
            file=sys.stderr,
        )
        return EXIT_USAGE  # a missing extra is bad usage
    import anyio  # the SDK's, there with it

    from metis_lite.agents.tools import Agent
    from metis_lite.service.bases import open_bases

    bases = open_bases(args.bases)
    agent = Agent(bases)
    server = mcp_server.build_server(agent, scoped=False)  # unscoped: every base may be named

    async def answer() -> None:
        with claimed_stdio() as (stdin, stdout):
            await mcp_server.stdio(server, stdin=stdin, stdout=stdout)

    try:
        anyio.run(answer)
    finally:
        agent.close()
        for base in bases.values():
            base.close()
    return 0


@contextmanager
def claimed_stdio() -> Iterator[tuple[int, int]]:
    """(stdin, stdout) for the protocol alone: copies of fds 0 and 1, while fd 0 reads
    /dev/null and fd 1 writes to stderr (as the SDK's own transport does), so that stray output
    of any library never lands in the protocol; both are put back at the end."""
    sys.stdout.flush()
    wire_in, wire_out = os.dup(0), os.dup(1)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)
