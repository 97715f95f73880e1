"""The MCP tools with the official SDK's own client: over stdio (`ragvps mcp`, a process) and streamable HTTP
(/mcp, the server in this process, the client on its event loop), compared with /search."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import pytest
from support.asgi_server import InProcess
from support.serve_server import REPO

from ragvps.generate.prompt import REFUSAL

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

QUESTION = "what happens when I run ingest twice?"
OFF_TOPIC = "What is the capital of France?"


async def _session_calls(read: Any, write: Any) -> dict[str, Any]:
    from mcp import ClientSession

    async with ClientSession(read, write) as session:
        init = await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        found = await session.call_tool("search", {"query": QUESTION, "k": 3})
        bad = await session.call_tool("search", {"query": "!!!"})
        invalid = await session.call_tool("search", {"k": "many", "mode": "fuzzy"})
        answer = await session.call_tool("ask", {"question": QUESTION, "k": 3})
        off = await session.call_tool("ask", {"question": OFF_TOPIC})
        return {
            "tools": tools,
            "search": found,
            "bad": bad,
            "ask": answer,
            "off": off,
            "invalid": invalid,
            "version": init.server_info.version,
        }


def _structured(result: Any) -> Any:
    assert not result.is_error, result.content
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data


def _check(calls: dict[str, Any], server: InProcess) -> None:
    assert {"search", "ask"} <= set(calls["tools"])
    assert "query" in calls["tools"]["search"].input_schema["properties"]
    hits = _structured(calls["search"])
    with server.client() as c:
        expected = c.post("/search", json={"query": QUESTION, "k": 3}).json()["hits"]
    assert [h["chunk_id"] for h in hits] == [h["chunk_id"] for h in expected]
    for hit in hits:
        assert {"chunk_id", "path", "heading_path", "score", "text"} <= set(hit)
    assert calls["bad"].is_error and "no words" in calls["bad"].content[0].text
    # Arguments that do not fit: one line per field, in words, without pydantic's report or its URL.
    invalid = calls["invalid"].content[0].text
    assert calls["invalid"].is_error and invalid.startswith("the arguments of search are not valid: "), invalid
    assert "query: Field required" in invalid and "(got 'many')" in invalid and "mode: " in invalid
    assert "pydantic" not in invalid and "http" not in invalid and "validation error" not in invalid
    from importlib.metadata import version

    assert calls["version"] == version("ragvps") != ""
    answer = _structured(calls["ask"])
    assert isinstance(answer["answer"], str) and isinstance(answer["citations"], list)
    assert answer["answered"] and answer["citations"] and answer["evidence"] >= answer["min_evidence"]
    off = _structured(calls["off"])  # the tool's description promises to say when the documents do not answer
    assert not off["answered"] and off["answer"] == REFUSAL and off["citations"] == []
    assert off["evidence"] < off["min_evidence"]


def _stdio(env: dict[str, str]) -> dict[str, Any]:
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "ragvps", "mcp"], env=env, cwd=str(REPO))

    async def run() -> dict[str, Any]:
        async with stdio_client(params) as (read, write):
            return await _session_calls(read, write)

    return asyncio.run(asyncio.wait_for(run(), 180))


def test_mcp_tools_over_stdio(api: InProcess):
    env = {k: v for k, v in api.env.items() if k != "RAGVPS_API_KEYS"}
    _check(_stdio(env), api)


def test_mcp_ask_takes_its_threshold_from_the_setting(api: InProcess):
    env = {k: v for k, v in api.env.items() if k != "RAGVPS_API_KEYS"} | {"RAGVPS_ANSWER_MIN_EVIDENCE": "1"}
    answer = _structured(_stdio(env)["ask"])
    assert not answer["answered"] and answer["answer"] == REFUSAL and answer["min_evidence"] == 1.0
    assert answer["evidence"] < 1.0


def test_mcp_tools_over_http_behind_the_key(api: InProcess):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async def run(headers: dict[str, str]) -> dict[str, Any]:
        # The SDK's client over the application itself, on the loop where its lifespan (the MCP session
        # manager) runs.
        async with (
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=api.asgi), headers=headers, timeout=60) as http,
            streamable_http_client(api.url + "/mcp", http_client=http) as (read, write),
        ):
            return await _session_calls(read, write)

    _check(api.call(lambda: asyncio.wait_for(run(api.headers), 120)), api)

    # Without the key the endpoint answers 401 before any MCP message is read, as a JSON-RPC error (which the
    # SDK's client shows: tests/test_chat_wrong_turns.py).
    r = api.keyless().post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream"},
    )
    assert r.status_code == 401 and r.json()["error"]["data"]["kind"] == "unauthorized"
    assert r.headers["www-authenticate"] == 'Bearer realm="ragvps"'


def test_the_mcp_sdk_loads_on_the_first_call_to_mcp_and_concurrent_first_calls_share_it(api: InProcess):
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    # Building the server's application imports no part of the SDK (about 0.45 s of a start, and its memory).
    probe = (
        "import sys; from ragvps.config import load_settings; from ragvps.serve.http import create_app; "
        "create_app(load_settings()); print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=api.env, cwd=str(REPO), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr[-2000:]

    # A server no MCP client has called yet: four clients call at once, and each gets the tools.
    fresh = InProcess(api.env).start()
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        accept = {"Accept": "application/json, text/event-stream"}

        def tools(_: int) -> tuple[int, list[str]]:
            with fresh.client() as c:
                r = c.post("/mcp", json=body, headers=accept, timeout=60)
            return r.status_code, sorted(t["name"] for t in r.json().get("result", {}).get("tools", []))

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(tools, range(4)))
    finally:
        fresh.stop()
    assert all(status == 200 and {"search", "ask"} <= set(names) for status, names in answers), answers
