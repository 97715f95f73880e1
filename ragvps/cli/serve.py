"""`ragvps serve` (HTTP API, web page, MCP at /mcp) and `ragvps mcp` (the MCP tools over stdio)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from ragvps.cli.common import settings_from


def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option(help="Address to listen on (default 127.0.0.1; setting host). "
                                                  "Anything but loopback needs an API key.")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8765; setting port).")] = None,
) -> None:
    """Serve the knowledge base: POST /search and /ask, the page at /, MCP at /mcp; the model loads once."""
    from ragvps.serve.http import serve as run

    settings = settings_from(ctx, host=host, port=port)
    logging.getLogger("ragvps").setLevel(logging.INFO)
    run(settings)


def mcp(ctx: typer.Context) -> None:
    """The MCP tools (search, ask) over stdin/stdout, for an AI assistant on this machine."""
    try:
        import mcp as _  # noqa: F401
    except ImportError:
        from ragvps.errors import ConfigError

        raise ConfigError("the MCP tools need the mcp extra: pip install 'ragvps[mcp]'") from None
    from ragvps.serve.mcp import run_stdio

    logging.basicConfig(stream=sys.stderr)  # stdout carries the protocol
    run_stdio(settings_from(ctx))


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command("mcp")(mcp)
