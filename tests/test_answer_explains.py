"""Answers that say what they found (issue 43): a refusal after sources passed the evidence gate explains itself
and names the closest sources in chat (openai SDK) and MCP (the mcp SDK) alike, and an extractive answer to "how
do I revoke ...?" quotes the command that does it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.asgi_server import InProcess, in_process

from ragvps.generate.prompt import REFUSAL

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")
mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")

OFF_TOPIC = "What is the capital of France?"


@pytest.fixture(scope="module")
def lenient(serve_env: dict[str, str]) -> Any:
    """The served docs with no evidence line: every question passes the gate, so an off-topic one reaches the
    extractive answer, which finds no sentence to quote."""
    with in_process(serve_env | {"RAGVPS_ANSWER_MIN_EVIDENCE": "0"}) as srv:
        yield srv


def chat(srv: InProcess, question: str, **kw: Any) -> Any:
    c = openai.OpenAI(
        base_url=srv.url + "/v1", api_key=srv.key or "none", max_retries=0, timeout=60, http_client=srv.keyless()
    )
    return c.chat.completions.create(model="ragvps", messages=[{"role": "user", "content": question}], **kw)


def mcp_call(srv: InProcess, tool: str, arguments: dict[str, Any]) -> tuple[Any, Any]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> tuple[Any, Any]:
        async with (
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=srv.asgi), headers=srv.headers, timeout=60) as http,
            streamable_http_client(srv.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            return tools, await session.call_tool(tool, arguments)

    return srv.call(lambda: asyncio.wait_for(run(), 120))


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    data = result.structured_content
    if data is None:
        data = json.loads(result.content[0].text)
    return data.get("result", data) if isinstance(data, dict) and set(data) == {"result"} else data


def test_a_refusal_after_the_gate_explains_itself_in_chat(lenient: InProcess):
    for stream in (False, True):
        done = chat(lenient, OFF_TOPIC, stream=stream)
        text = (
            "".join(c.choices[0].delta.content or "" for c in done if c.choices)
            if stream
            else done.choices[0].message.content
        )
        assert text.startswith(REFUSAL) and "No sentence in the sources answers this directly" in text, text
        assert "evidence check" in text and ".md`" in text  # names the closest sources


def test_a_refusal_after_the_gate_explains_itself_in_mcp_as_its_description_says(lenient: InProcess):
    tools, result = mcp_call(lenient, "ask", {"question": OFF_TOPIC})
    answer = structured(result)
    assert not answer["answered"] and answer["evidence"] >= answer["min_evidence"] and answer["sources"]
    assert answer["answer"].startswith(REFUSAL) and "answers this directly" in answer["answer"]
    assert ".md`" in answer["answer"]
    assert "no sentence of them answers directly" in tools["ask"].description


def test_a_refusal_below_the_gate_stays_the_bare_sentence(api: InProcess):
    done = chat(api, OFF_TOPIC)
    assert done.choices[0].message.content == REFUSAL


def test_how_do_i_revoke_a_key_quotes_the_revoke_command(api: InProcess):
    text = chat(api, "how do I revoke an API key?").choices[0].message.content
    assert "ragvps key revoke" in text, text


def test_the_action_is_named_by_a_command_not_by_its_quoted_text():
    from ragvps.generate.extractive import Candidate, action_line, asked_action, names_action
    from ragvps.generate.prompt import Source

    assert asked_action("how do I revoke an API key?") == asked_action("How can I revoke keys") != ""
    assert asked_action("what is a key?") == ""
    fence = "ragvps key list   # names, roles\nragvps key revoke support-bot   # refused within 2 s\n"
    src = Source(1, "k#0", "k.md", "Keys", 0, len(fence), 1.0, fence)
    line = action_line(Candidate(src, 0, len(fence) - 1, fence.strip(), True), asked_action("how do I revoke one?"))
    assert line.text == "ragvps key revoke support-bot   # refused within 2 s" and fence[line.a : line.b] == line.text
    asked = 'ragvps ask "how do I rotate the keys?"'
    quoted = Candidate(Source(1, "a#0", "a.md", "", 0, len(asked), 1.0, asked), 0, len(asked), asked, True)
    assert not names_action(quoted, asked_action("how do I rotate the keys?"))
