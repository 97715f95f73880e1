"""/v1/chat/completions with an LLM configured (the stand-in in support/llm_server.py), through the official `openai`
SDK against the server (in this process, tests/support/asgi_server.py): the follow-up rewriting call (cached, counted in
usage), earlier turns before the new sources in the prompt, temperature and max_tokens passed through, the answer
cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.asgi_server import InProcess, in_process
from support.llm_server import REWRITE_SYSTEM, FakeLLM

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")

FIRST = "what happens when I run ingest twice?"
FOLLOW_UP = "and how do I undo that?"


@pytest.fixture(scope="module")
def llm_srv(serve_env: dict[str, str], llm_server: FakeLLM) -> Iterator[InProcess]:
    env = serve_env | {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm_server.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
        "RAGVPS_GENERATOR_RETRIES": "0",
    }
    with in_process(env) as srv:
        yield srv


def client(server: InProcess) -> Any:
    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key="unused-0123456789abcdef",
        max_retries=0,
        timeout=60,
        http_client=server.keyless(),
    )


def extra(completion: Any) -> dict[str, Any]:
    return dict((completion.model_extra or {})["ragvps"])


def conversation(server: InProcess, first_answer: str | None = None) -> list[dict[str, str]]:
    if first_answer is None:
        done = client(server).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": FIRST}])
        first_answer = done.choices[0].message.content
    return [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": first_answer},
        {"role": "user", "content": FOLLOW_UP},
    ]


def test_a_first_turn_is_one_llm_call_with_its_usage(llm_srv: InProcess, llm: FakeLLM):
    done = client(llm_srv).chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], extra_body={"temperature": 0.3}
    )
    calls = llm.llm_requests()
    assert len(calls) == 1 and not calls[0]["system"].startswith(REWRITE_SYSTEM)
    info = extra(done)
    assert info["extractive"] is False and info["rewrite"] == "none" and info["answered"]
    assert "**Sources**" in done.choices[0].message.content
    assert done.usage.prompt_tokens == calls[0]["prompt_tokens"] and done.usage.completion_tokens > 0


def test_a_follow_up_is_rewritten_once_and_the_rewrite_is_cached_and_counted(llm_srv: InProcess, llm: FakeLLM):
    messages = conversation(llm_srv)
    llm.requests.clear()
    done = client(llm_srv).chat.completions.create(model="ragvps", messages=messages)
    calls = llm.llm_requests()
    assert [c["system"].startswith(REWRITE_SYSTEM) for c in calls] == [True, False]
    rewrite, answer = calls
    assert FIRST in rewrite["user"] and rewrite["user"].rstrip().endswith(FOLLOW_UP)
    assert "**Sources**" not in rewrite["user"]  # the earlier answer's source list is taken off
    info = extra(done)
    assert info["rewrite"] == "llm" and info["rewrite_cache"] == "miss"
    assert info["standalone_question"] == f"{FOLLOW_UP} (following: {FIRST})"
    assert answer["user"].endswith("Question: " + info["standalone_question"])
    # the earlier turns come before the new sources, the answer without its [n] markers and source list
    sent = answer["body"]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[1]["content"] == FIRST and "[1]" not in sent[2]["content"] and "**Sources**" not in sent[2]["content"]
    assert sent[3]["content"].startswith("Sources:")
    assert done.usage.prompt_tokens == rewrite["prompt_tokens"] + answer["prompt_tokens"]
    assert info["rewrite_usage"]["prompt_tokens"] == rewrite["prompt_tokens"]

    llm.requests.clear()
    again = client(llm_srv).chat.completions.create(model="ragvps", messages=messages)
    assert llm.llm_requests() == []  # the rewrite and the answer both from the cache
    info = extra(again)
    assert info["rewrite_cache"] == "hit" and info["cache"] == "hit"
    assert again.choices[0].message.content == done.choices[0].message.content
    assert again.usage.prompt_tokens == 0


def test_temperature_and_max_tokens_pass_through(llm_srv: InProcess, llm: FakeLLM):
    c = client(llm_srv)
    c.chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], temperature=0.7, max_tokens=100
    )
    body = llm.llm_requests()[-1]["body"]
    assert body["temperature"] == 0.7 and body["max_tokens"] == 100
    c.chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], max_completion_tokens=77, temperature=0.7
    )
    assert llm.llm_requests()[-1]["body"]["max_tokens"] == 77  # another length: another cache key, another call
    n = len(llm.llm_requests())
    c.chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], temperature=0.7, max_tokens=100
    )
    assert len(llm.llm_requests()) == n  # the same settings again: the answer cache


def test_a_streamed_follow_up_says_what_the_whole_one_says(llm_srv: InProcess, llm: FakeLLM):
    messages = conversation(llm_srv)
    whole = client(llm_srv).chat.completions.create(model="ragvps", messages=messages)
    chunks = list(
        client(llm_srv).chat.completions.create(
            model="ragvps", messages=messages, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None


def test_a_failing_llm_is_an_openai_error_with_its_status(llm_srv: InProcess, llm: FakeLLM, tmp_path: Path):
    llm.fail(500, "upstream broke")
    with pytest.raises(openai.InternalServerError) as caught:
        client(llm_srv).chat.completions.create(
            model="ragvps", messages=[{"role": "user", "content": FIRST}], temperature=1.1
        )  # a new cache key: the LLM is asked
    assert caught.value.status_code == 503 and caught.value.body["type"] == "server_error"  # type: ignore[index]
    llm.fail(500, "upstream broke")
    with pytest.raises(openai.InternalServerError) as caught:  # before the stream's first byte: the same error
        client(llm_srv).chat.completions.create(
            model="ragvps", messages=[{"role": "user", "content": FIRST}], temperature=1.2, stream=True
        )
    assert caught.value.status_code == 503 and "upstream broke" in caught.value.message
    llm.cut_after = 2
    with pytest.raises(openai.APIError):  # after the stream started: one error event, which the SDK raises
        list(
            client(llm_srv).chat.completions.create(
                model="ragvps", messages=[{"role": "user", "content": FIRST}], temperature=1.3, stream=True
            )
        )


def test_a_client_task_goes_to_the_llm_unchanged_and_is_counted(llm_srv: InProcess, llm: FakeLLM):
    from support import client_bodies as cb

    llm.reply = '{"title": "Ingest Twice"}'
    body = cb.owui_task_body(cb.owui_title(cb.history(("user", FIRST))))
    done = client(llm_srv).chat.completions.create(**body)
    calls = llm.llm_requests()
    assert len(calls) == 1 and calls[0]["body"]["messages"] == body["messages"]  # no rules, no sources, no search
    assert done.choices[0].message.content == '{"title": "Ingest Twice"}'
    assert done.usage.prompt_tokens == calls[0]["prompt_tokens"] > 0
    assert extra(done)["task"] == "title" and extra(done)["citations"] == [] and extra(done)["sources"] == []
    llm.requests.clear()
    llm.reply = "Ingest Twice"
    title = cb.librechat_title(FIRST, "It skips unchanged files [1].")  # one system message only
    done = client(llm_srv).chat.completions.create(**title)
    sent = llm.llm_requests()[0]["body"]
    assert sent["messages"] == title["messages"] and sent["max_tokens"] == 16 and sent["temperature"] == 0.2
    assert done.choices[0].message.content == "Ingest Twice"


def test_an_attached_file_is_a_numbered_source_of_the_prompt(llm_srv: InProcess, llm: FakeLLM):
    from support import client_bodies as cb

    notes = "The blue widget ships in boxes of twelve."
    done = client(llm_srv).chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": cb.owui_rag(notes, FIRST, "notes.txt", user_query=True)}]
    )
    sent = llm.llm_requests()[-1]
    assert sent["user"].endswith("Question: " + FIRST) and "<context>" not in sent["user"]
    number = len(extra(done)["sources"])
    assert f"[{number}] notes.txt\n{notes}" in sent["user"]


def test_tools_pass_through_and_the_tool_call_comes_back_in_openais_shape(llm_srv: InProcess, llm: FakeLLM):
    from support import client_bodies as cb

    llm.tool_call = ("builtin_read_file", '{"filepath": "docs/serve.md"}')
    done = client(llm_srv).chat.completions.create(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], tools=cb.CONTINUE_TOOLS, tool_choice="required"
    )
    sent = llm.llm_requests()[-1]["body"]
    assert sent["tools"] == cb.CONTINUE_TOOLS and sent["tool_choice"] == "required"
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.id == "call_1" and call.function.name == "builtin_read_file"
    assert call.function.arguments == '{"filepath": "docs/serve.md"}'
    # streamed (Continue's agent request: tools offered, an assistant turn of " ")
    chunks = list(client(llm_srv).chat.completions.create(**cb.continue_agent(FIRST)))
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert deltas[-1].finish_reason == "tool_calls"
    called = [d.delta.tool_calls[0] for d in deltas if d.delta.tool_calls]
    assert called and called[0].function.name == "builtin_read_file"
    # the tool's result last: the LLM goes on from the messages as the client sent them
    llm.requests.clear()
    llm.tool_call, llm.reply = None, "The file says to run ragvps serve."
    history = [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "# Serving\nrun `ragvps serve`"},
    ]
    done = client(llm_srv).chat.completions.create(model="ragvps", messages=history, tools=cb.CONTINUE_TOOLS)
    sent = llm.llm_requests()[-1]["body"]
    assert sent["messages"] == history and sent["tools"] == cb.CONTINUE_TOOLS
    assert done.choices[0].message.content == "The file says to run ragvps serve."


def test_structured_output_passes_through_and_parses(llm_srv: InProcess, llm: FakeLLM):
    from pydantic import BaseModel

    class Reply(BaseModel):
        answer: str

    llm.reply = '{"answer": "it skips unchanged files"}'
    done = client(llm_srv).chat.completions.parse(
        model="ragvps", messages=[{"role": "user", "content": FIRST}], response_format=Reply
    )
    assert done.choices[0].message.parsed == Reply(answer="it skips unchanged files")
    assert llm.llm_requests()[-1]["body"]["response_format"]["type"] == "json_schema"
