"""MCP tools for AI assistants (the optional extra `ragvps[mcp]`, the official `mcp` SDK 2.x).

Two tools: `search` (chunks with path, heading path, chunk id, score) and `ask` (an answer with
citations). Two transports: stdio (`ragvps mcp`, for an assistant on this machine) and streamable HTTP,
mounted at /mcp on `ragvps serve` behind the same API key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ragvps.app import Mode
from ragvps.config import Settings
from ragvps.errors import RagvpsError, redact

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ragvps.app import Answer, App, SearchResult

T = TypeVar("T")

INSTRUCTIONS = ("Search and ask the user's own knowledge base (their documents, ingested by ragvps). Use `search` "
                "for passages to read and quote, `ask` for a short answer that cites its sources as [n].")


def build_server(get_app: Callable[[], App], max_k: int = 100) -> MCPServer:
    """An MCPServer whose tools call the App that `get_app` returns (raising while it is not ready)."""
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from ragvps.app import json_object
    from ragvps.serve.convert import ask_request, search_request

    server = MCPServer(name="ragvps", instructions=INSTRUCTIONS, version=package_version())

    async def call(fn: Callable[[], T]) -> T:
        try:
            return await anyio.to_thread.run_sync(fn)
        except RagvpsError as exc:
            raise ToolError(redact(str(exc))) from None

    @server.tool(description="Find the chunks of the knowledge base that best match a query (hybrid: vector + "
                             "BM25 keyword search). Returns each chunk's text, source path, heading path, chunk id "
                             "and score, best first.")
    async def search(query: str, k: int = 8, mode: Mode = "hybrid",
                     path_prefix: str = "") -> list[dict[str, object]]:
        def run() -> SearchResult:
            return get_app().search(search_request(query, k, mode, path_prefix, {}, max_k))

        result = await call(run)
        return [{"rank": h.rank, "chunk_id": h.chunk_id, "path": h.path, "heading_path": h.heading_path,
                 "score": h.score, "text": h.text} for h in result.hits]

    @server.tool(description="Answer a question from the knowledge base, citing the chunks it used as [n]; "
                             "`citations` lists them (n, chunk id, path). Says so when the documents do not "
                             "answer it: `answered` is false and `evidence` (0..1) is below `min_evidence`.")
    async def ask(question: str, k: int | None = None, mode: Mode = "hybrid",
                  path_prefix: str = "") -> dict[str, object]:
        def run() -> Answer:
            return get_app().ask(ask_request(question, k, mode, path_prefix, {}, max_k))

        answer = json_object(await call(run))
        return {key: answer.get(key) for key in ("answer", "answered", "evidence", "min_evidence", "citations",
                                                 "quotes", "invalid_citations", "sources", "generator", "model")
                if key in answer}

    server.middleware.append(ReadableArguments({"search": search, "ask": ask}))
    return server


class ReadableArguments:
    """MCP middleware: a tool call whose arguments do not fit the tool is answered with one line per field
    (`k: Input should be a valid integer (got 'x')`), not pydantic's report with its documentation URL."""

    def __init__(self, tools: dict[str, Callable[..., Any]]):
        self.models = {name: _arguments_model(name, fn) for name, fn in tools.items()}

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Any]) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        model = self.models.get(params.get("name", "")) if ctx.method == "tools/call" else None
        if model is not None:
            from mcp.types import CallToolResult, TextContent
            from pydantic import ValidationError

            try:
                model.model_validate(params.get("arguments") or {})
            except ValidationError as exc:
                return CallToolResult(content=[TextContent(type="text", text=arguments_message(params["name"], exc))],
                                      is_error=True)
        return await call_next(ctx)


def arguments_message(tool: str, exc: Any) -> str:
    parts = []
    for e in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in e.get("loc", ())) or "arguments"
        got = f" (got {e['input']!r:.60})" if e.get("type") != "missing" and "input" in e else ""
        parts.append(f"{where}: {e.get('msg', 'invalid')}{got}")
    return f"the arguments of {tool} are not valid: " + "; ".join(parts) + " (its input schema lists them)"


def _arguments_model(name: str, fn: Callable[..., Any]) -> Any:
    import inspect

    from pydantic import create_model

    fields: dict[str, Any] = {
        p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
        for p in inspect.signature(fn, eval_str=True).parameters.values()}
    return create_model(f"{name}_arguments", **fields)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ragvps")
    except PackageNotFoundError:
        return "0"


def run_stdio(settings: Settings) -> None:
    """`ragvps mcp`: the tools over stdin/stdout until the assistant closes them. Logs go to stderr."""
    import anyio

    from ragvps.app import App
    from ragvps.serve.lifecycle import for_serving

    with App.open(for_serving(settings), pooled=True) as app:
        server = build_server(lambda: app, settings.serve.max_k)
        anyio.run(server.run_stdio_async)
