"""`ragvps serve` (HTTP API, web page, MCP at /mcp) and `ragvps mcp` (the MCP tools over stdio)."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Annotated, Any

import typer

from ragvps.cli.common import settings_from
from ragvps.errors import ConfigError


def exit_on_sigterm() -> None:
    """SIGTERM (systemd, docker, `kill`) ends the process as Ctrl-C does, through its exit handlers: the
    embedded PostgreSQL's handle is released, so `ragvps server stop` can stop it. (uvicorn shuts down
    gracefully first, then raises the signal again, which lands here.)"""

    def terminated(signum: int, frame: Any) -> None:
        logging.getLogger("ragvps").info("stopped by signal %d", signum)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminated)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None,
        typer.Option(
            help="Address to listen on (default 127.0.0.1; setting host). Anything but loopback needs an API key."
        ),
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765; setting port).")] = None,
    log_format: Annotated[
        str | None,
        typer.Option("--log-format", help="The request log's lines on stderr: text, json or off (setting log_format)."),
    ] = None,
) -> None:
    """Serve the knowledge base: POST /search and /ask, the page at /, MCP at /mcp; the model loads once."""
    # lazy: the server (fastapi, uvicorn) loads only for `serve` and `mcp`, and only once the address may be served
    from ragvps.serve.gate.bind import check_serving

    settings = settings_from(ctx, host=host, port=port, log_format=log_format)
    check_serving(settings, settings.serve.host)
    from ragvps.serve.http import serve as run  # lazy: as above

    logging.getLogger("ragvps").setLevel(logging.INFO)
    exit_on_sigterm()
    run(settings)


def mcp(ctx: typer.Context) -> None:
    """The MCP tools (search, ask) over stdin/stdout, for an AI assistant on this machine."""
    try:
        # lazy: the optional mcp extra, checked when `ragvps mcp` runs
        import mcp as _  # noqa: F401
    except ImportError:
        raise ConfigError("the MCP tools need the mcp extra: pip install 'ragvps[mcp]'") from None
    from ragvps.serve.mcp.tools import run_stdio  # lazy: the server (fastapi, uvicorn) loads only for `serve` and `mcp`

    logging.basicConfig(stream=sys.stderr)  # stdout carries the protocol
    exit_on_sigterm()
    run_stdio(settings_from(ctx))


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command("mcp")(mcp)
