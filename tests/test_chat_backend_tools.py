"""Tools and structured output through the Anthropic and Ollama generators: a chat client's OpenAI-shaped `tools`,
`tool_choice`, `response_format` and tool history go to each backend in its own protocol (the stand-in in
tests/support/llm_server.py speaks Anthropic's Messages SSE and Ollama's NDJSON, tool calls included), the calls come
back in OpenAI's shape, and what a backend cannot do is a 400 `unsupported_parameter` naming the field and the
backend. Through the official `openai` SDK against the server in this process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from support import client_bodies as cb
from support.asgi_server import InProcess, in_process
from support.llm_server import FakeLLM

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")

QUESTION = "what happens when I run ingest twice?"
ARGS = '{"filepath": "docs/serve.md"}'
USER = [{"role": "user", "content": QUESTION}]


def _server(serve_env: dict[str, str], llm: FakeLLM, kind: str) -> Iterator[InProcess]:
    env = serve_env | {
        "RAGVPS_GENERATOR": kind,
        "RAGVPS_GENERATOR_URL": llm.url,
        "RAGVPS_GENERATOR_MODEL": "m-1",
        "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
        "RAGVPS_GENERATOR_RETRIES": "0",
    }
    with in_process(env) as srv:
        yield srv


@pytest.fixture(scope="module")
def anthropic_srv(serve_env: dict[str, str], llm_server: FakeLLM) -> Iterator[InProcess]:
    yield from _server(serve_env, llm_server, "anthropic")


@pytest.fixture(scope="module")
def ollama_srv(serve_env: dict[str, str], llm_server: FakeLLM) -> Iterator[InProcess]:
    yield from _server(serve_env, llm_server, "ollama")


def client(server: InProcess) -> Any:
    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="unused-0123456789",
        max_retries=0,
        timeout=60,
        http_client=server.keyless(),
    )


def called(srv: InProcess, llm: FakeLLM, **asked: Any) -> tuple[Any, dict[str, Any]]:
    """A tool call asked for, the call as the SDK reads it and the body the backend got; streamed too."""
    llm.tool_call = ("builtin_read_file", ARGS)
    done = client(srv).chat.completions.create(model="ragvps", messages=USER, tools=cb.CONTINUE_TOOLS, **asked)
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.function.name == "builtin_read_file" and json.loads(call.function.arguments) == json.loads(ARGS)
    sent = llm.llm_requests()[-1]["body"]
    chunks = list(
        client(srv).chat.completions.create(
            model="ragvps", messages=USER, tools=cb.CONTINUE_TOOLS, stream=True, **asked
        )
    )
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert deltas[-1].finish_reason == "tool_calls"
    streamed = [d.delta.tool_calls[0] for d in deltas if d.delta.tool_calls]
    assert streamed and json.loads(streamed[0].function.arguments) == json.loads(ARGS)
    return call, sent


def go_on(srv: InProcess, llm: FakeLLM, call: Any) -> dict[str, Any]:
    """The tool's result last: the backend gets the conversation in its own shapes and goes on."""
    llm.tool_call, llm.reply = None, "The file says to run ragvps serve."
    history = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": call.id, "content": "# Serving\nrun `ragvps serve`"},
    ]
    done = client(srv).chat.completions.create(model="ragvps", messages=history, tools=cb.CONTINUE_TOOLS)
    assert done.choices[0].message.content == "The file says to run ragvps serve."
    return dict(llm.llm_requests()[-1]["body"])


def parsed(srv: InProcess, llm: FakeLLM) -> dict[str, Any]:
    from pydantic import BaseModel

    class Reply(BaseModel):
        answer: str

    llm.tool_call, llm.reply = None, '{"answer": "it skips unchanged files"}'
    done = client(srv).chat.completions.parse(model="ragvps", messages=USER, response_format=Reply)
    assert done.choices[0].message.parsed == Reply(answer="it skips unchanged files")
    return dict(llm.llm_requests()[-1]["body"])


def refused(srv: InProcess, field: str, **asked: Any) -> str:
    with pytest.raises(openai.BadRequestError) as raised:
        client(srv).chat.completions.create(model="ragvps", messages=USER, **asked)
    assert raised.value.code == "unsupported_parameter" and raised.value.param == field
    return str(raised.value.message)


def test_anthropic_takes_tools_in_its_own_shapes(anthropic_srv: InProcess, llm: FakeLLM):
    call, sent = called(anthropic_srv, llm, tool_choice="required", parallel_tool_calls=False)
    assert call.id == "toolu_1"
    function = cb.CONTINUE_TOOLS[0]["function"]
    assert sent["tools"] == [
        {"name": function["name"], "description": function["description"], "input_schema": function["parameters"]}
    ]
    assert sent["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    named = {"type": "function", "function": {"name": "builtin_read_file"}}
    assert called(anthropic_srv, llm, tool_choice=named)[1]["tool_choice"] == {
        "type": "tool",
        "name": "builtin_read_file",
    }
    body = go_on(anthropic_srv, llm, call)
    assistant, result = body["messages"][-2:]
    assert assistant == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "builtin_read_file", "input": json.loads(ARGS)}],
    }
    assert result["role"] == "user" and result["content"][0]["type"] == "tool_result"
    assert result["content"][0]["tool_use_id"] == "toolu_1" and "ragvps serve" in result["content"][0]["content"]


def test_anthropic_structured_output_and_what_it_cannot_take(anthropic_srv: InProcess, llm: FakeLLM):
    body = parsed(anthropic_srv, llm)
    schema = body["output_config"]["format"]
    assert schema["type"] == "json_schema" and schema["schema"]["properties"] == {
        "answer": {"title": "Answer", "type": "string"}
    }
    said = refused(anthropic_srv, "response_format", response_format={"type": "json_object"})
    assert "generator=anthropic" in said and "json_schema" in said
    assert llm.llm_requests()[-1]["body"].get("output_config")  # the refused request never reached it


def test_ollama_takes_tools_and_formats_in_its_own_shapes(ollama_srv: InProcess, llm: FakeLLM):
    call, sent = called(ollama_srv, llm, tool_choice="auto")
    assert sent["tools"] == cb.CONTINUE_TOOLS and "tool_choice" not in sent
    body = go_on(ollama_srv, llm, call)
    assistant, result = body["messages"][-2:]
    assert assistant["tool_calls"] == [{"function": {"name": "builtin_read_file", "arguments": json.loads(ARGS)}}]
    assert result == {"role": "tool", "content": "# Serving\nrun `ragvps serve`", "tool_name": "builtin_read_file"}
    assert parsed(ollama_srv, llm)["format"]["properties"] == {"answer": {"title": "Answer", "type": "string"}}
    requests = len(llm.llm_requests())
    said = refused(ollama_srv, "tool_choice", tools=cb.CONTINUE_TOOLS, tool_choice="required")
    assert "generator=ollama" in said and "tool_choice auto" in said and len(llm.llm_requests()) == requests


def test_a_lone_instruction_reaches_anthropic_as_the_question(anthropic_srv: InProcess, llm: FakeLLM):
    llm.reply = "Stopping the database"
    done = client(anthropic_srv).chat.completions.create(**cb.librechat_title(QUESTION, "Run `ragvps server stop`."))
    sent = llm.llm_requests()[-1]["body"]
    assert sent["system"] == [] and sent["messages"][0]["role"] == "user"
    assert QUESTION in sent["messages"][0]["content"][0]["text"]
    assert done.choices[0].message.content == "Stopping the database"
