"""MCP tools for AI assistants (the optional extra `ragvps[mcp]`, the official `mcp` SDK 2.x).

Two tools: `search` (chunks with path, heading path, chunk id, score) and `ask` (an answer with
citations). Two transports: stdio (`ragvps mcp`, for an assistant on this machine) and streamable HTTP,
mounted at /mcp on `ragvps serve` behind the same API key.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer  # Context: the tools' annotation, resolved at run time
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError, create_model

from ragvps.app import App, Mode, json_object
from ragvps.app.keys import ANYONE
from ragvps.config import Settings
from ragvps.errors import RagvpsError, UsageError, redact
from ragvps.serve.shared.convert import ask_request, search_request
from ragvps.serve.shared.lifecycle import Ready, for_serving
from ragvps.version import package_version

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from pydantic import BaseModel

    from ragvps.app import Answer, SearchResult
    from ragvps.app.keys import Principal

T = TypeVar("T")
P = ParamSpec("P")

if TYPE_CHECKING:
    ToolContext = Context[object, object]  # the lifespan value and the request, which tools read as they need
    RequestContext = ServerRequestContext[object, object]
    # what a middleware's `call_next` gives: a result model, a result as a dict, or None (a notification)
    Result = BaseModel | dict[str, object] | None
    CallNext = Callable[[RequestContext], Awaitable[Result]]
else:
    ToolContext = Context  # the SDK finds a tool's context argument by its class, so no type argument at run time

INSTRUCTIONS = (
    "Search and ask the user's own knowledge base (their documents, ingested by ragvps). Use `search` "
    "for passages to read and quote, `ask` for a short answer that cites its sources as [n]."
)


# What the `ask` tool returns of an answer, in this order.
ASK_FIELDS = (
    "answer",
    "answered",
    "evidence",
    "min_evidence",
    "citations",
    "quotes",
    "invalid_citations",
    "sources",
    "generator",
    "model",
)


def build_server(ready: Ready, max_k: int = 100) -> MCPServer[object]:
    """An MCPServer whose tools call the App of the knowledge base asked for (`kb`, default the server's own),
    if the caller's key may read it; tools/list names the knowledge bases the caller may read."""
    server = MCPServer(name="ragvps", instructions=INSTRUCTIONS, version=package_version())
    models = {"search": add_search_tool(server, ready, max_k), "ask": add_ask_tool(server, ready, max_k)}
    server.middleware.append(ReadableArguments(models))
    server.middleware.append(ListsKnowledgeBases(ready))
    return server


def add_search_tool(server: MCPServer[object], ready: Ready, max_k: int) -> type[BaseModel]:
    """The `search` tool; returns its arguments as a model (for ReadableArguments)."""

    @server.tool(
        description="Find the chunks of the knowledge base that best match a query (hybrid: vector + "
        "BM25 keyword search). Returns each chunk's text, source path, heading path, chunk id "
        "and score, best first."
    )
    async def search(
        query: str, ctx: ToolContext, k: int = 8, mode: Mode = "hybrid", path_prefix: str = "", kb: str | None = None
    ) -> list[dict[str, object]]:
        def run() -> SearchResult:
            return app_for(ready, ctx, kb).search(search_request(query, k, mode, path_prefix, {}, max_k))

        result = await call(run)
        return [
            {
                "rank": h.rank,
                "chunk_id": h.chunk_id,
                "path": h.path,
                "heading_path": h.heading_path,
                "score": h.score,
                "text": h.text,
            }
            for h in result.hits
        ]

    return _arguments_model("search", search)


def add_ask_tool(server: MCPServer[object], ready: Ready, max_k: int) -> type[BaseModel]:
    """The `ask` tool; returns its arguments as a model (for ReadableArguments)."""

    @server.tool(
        description="Answer a question from the knowledge base, citing the chunks it used as [n]; "
        "`citations` lists them (n, chunk id, path). Says so when the documents do not "
        "answer it, with `answered` false: when `evidence` (0..1) is below `min_evidence` "
        "nothing was close enough (no sources); when it is not, sources were found but no "
        "sentence of them answers directly, and the answer says so and names the closest."
    )
    async def ask(
        question: str,
        ctx: ToolContext,
        k: int | None = None,
        mode: Mode = "hybrid",
        path_prefix: str = "",
        kb: str | None = None,
    ) -> dict[str, object]:
        def run() -> Answer:
            return app_for(ready, ctx, kb).ask(ask_request(question, k, mode, path_prefix, {}, max_k))

        answer = json_object(await call(run))
        return {key: answer.get(key) for key in ASK_FIELDS if key in answer}

    return _arguments_model("ask", ask)


async def call(fn: Callable[[], T]) -> T:
    """`fn` in a worker thread; a ragvps error becomes the tool's error (redacted)."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except RagvpsError as exc:
        raise ToolError(redact(str(exc))) from None


def app_for(ready: Ready, ctx: ToolContext, kb: str | None) -> App:
    """The App of knowledge base `kb` (default: default_kb) for the caller, if its key may read it."""
    principal = principal_in(ctx)
    return ready.kb(kb or default_kb(ready, principal), principal)


def default_kb(ready: Ready, principal: Principal) -> str:
    """The knowledge base a call without `kb` asks: the server's own if the key may read it, else the key's only
    one; a key that may read several but not the server's own must name one (the error says which)."""
    own = ready.settings.database.kb
    names = ready.visible(principal)
    if own in names or not names:
        return own
    if len(names) == 1:
        return names[0]
    raise UsageError(
        f"name the knowledge base (argument kb): this key may read {', '.join(names)}, not the server's own ({own!r})"
    )


def principal_in(ctx: ToolContext) -> Principal:
    """The caller's principal: what the HTTP request's key grants; over stdio, the local user: everything."""
    request = ctx.request_context.request
    principal = getattr(getattr(request, "state", None), "principal", None)
    return ANYONE if request is None else principal if principal is not None else ANYONE


class ListsKnowledgeBases:
    """MCP middleware: tools/list says, in each tool's description and its `kb` argument, which knowledge bases
    the caller may read (and which one is asked without `kb`)."""

    def __init__(self, ready: Ready):
        self.ready = ready

    async def __call__(self, ctx: RequestContext, call_next: CallNext) -> Result:
        result = await call_next(ctx)
        if ctx.method != "tools/list":
            return result
        request = getattr(ctx, "request", None)
        principal = getattr(getattr(request, "state", None), "principal", None)
        if principal is None:
            principal = ANYONE
        try:
            names = await anyio.to_thread.run_sync(lambda: self.ready.visible(principal))
        except RagvpsError:
            return result
        own = self.ready.settings.database.kb
        default = own if own in names or not names else names[0] if len(names) == 1 else None
        said = f"default {default!r}" if default else "name one: there is no default for this key"
        note = f" Knowledge bases you may read (argument `kb`, {said}): {', '.join(names) or 'none'}."
        tools = result.get("tools", []) if isinstance(result, dict) else getattr(result, "tools", [])
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict):
                tool["description"] = (tool.get("description") or "") + note
            else:
                setattr(tool, "description", (getattr(tool, "description", None) or "") + note)  # noqa: B010
        return result


class ReadableArguments:
    """MCP middleware: a tool call whose arguments do not fit the tool is answered with one line per field
    (`k: Input should be a valid integer (got 'x')`), not pydantic's report with its documentation URL."""

    def __init__(self, models: dict[str, type[BaseModel]]):
        self.models = models  # each tool's arguments as a model (_arguments_model)

    async def __call__(self, ctx: RequestContext, call_next: CallNext) -> Result:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        model = self.models.get(params.get("name", "")) if ctx.method == "tools/call" else None
        if model is not None:
            try:
                model.model_validate(params.get("arguments") or {})
            except ValidationError as exc:
                return CallToolResult(
                    content=[TextContent(type="text", text=arguments_message(params["name"], exc))], is_error=True
                )
        return await call_next(ctx)


def arguments_message(tool: str, exc: ValidationError) -> str:
    parts = []
    for e in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in e.get("loc", ())) or "arguments"
        got = f" (got {e['input']!r:.60})" if e.get("type") != "missing" and "input" in e else ""
        parts.append(f"{where}: {e.get('msg', 'invalid')}{got}")
    return f"the arguments of {tool} are not valid: " + "; ".join(parts) + " (its input schema lists them)"


def _arguments_model(name: str, fn: Callable[P, object]) -> type[BaseModel]:
    fields: dict[str, tuple[object, object]] = {
        p.name: (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
        for p in inspect.signature(fn, eval_str=True).parameters.values()
        if p.name != "ctx"
    }
    model: type[BaseModel] = create_model(f"{name}_arguments", **fields)  # type: ignore[call-overload]  # fields: object
    return model


def run_stdio(settings: Settings) -> None:
    """`ragvps mcp`: the tools over stdin/stdout until the assistant closes them. Logs go to stderr."""
    with App.open(for_serving(settings), pooled=True) as app:
        server = build_server(Ready(settings, app), settings.serve.max_k)
        anyio.run(server.run_stdio_async)
