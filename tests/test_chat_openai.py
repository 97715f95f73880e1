"""A client nobody here wrote: the official `openai` SDK against the server (in this process: `api`, its HTTP
client over the application; no LLM configured: extractive answers), streaming and not, the model list, a
follow-up turn, and its typed errors."""

from __future__ import annotations

from typing import Any

import pytest
from support.asgi_server import InProcess

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")

FIRST = "what happens when I run ingest twice?"
FOLLOW_UP = "and how do I stop it from re-embedding?"


def client(server: InProcess, key: str | None = None, **kwargs: Any) -> Any:
    return openai.OpenAI(
        base_url=server.url + "/v1",
        api_key=key or server.key,
        max_retries=0,
        timeout=60,
        http_client=server.keyless(),
        **kwargs,
    )


def extra(completion: Any) -> dict[str, Any]:
    return dict((completion.model_extra or {})["ragvps"])


def test_models_lists_the_knowledge_base(api: InProcess):
    models = client(api).models.list()
    assert [m.id for m in models.data] == ["ragvps"]
    assert models.data[0].object == "model" and models.data[0].owned_by == "ragvps"
    assert client(api).models.retrieve("ragvps").id == "ragvps"
    with pytest.raises(openai.NotFoundError):
        client(api).models.retrieve("gpt-4o")


def test_a_completion_cites_and_lists_its_sources_and_is_marked_extractive(api: InProcess):
    done = client(api).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": FIRST}])
    assert done.object == "chat.completion" and done.model == "ragvps" and done.id.startswith("chatcmpl-")
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    text = choice.message.content
    assert text.startswith("Extractive answer") and "[1]" in text
    body, _, sources = text.partition("\n\n**Sources**\n")
    info = extra(done)
    assert info["extractive"] is True and info["answered"] is True and info["rewrite"] == "none"
    assert info["citations"] and info["sources"] and all("text" in s for s in info["sources"])
    listed = sources.splitlines()
    assert len(listed) == len(info["citations"])
    for line, c in zip(listed, info["citations"], strict=True):
        assert line.startswith(f"- [{c['number']}] `{c['path']}`")
    assert f"[{info['citations'][0]['number']}]" in body
    assert done.usage.prompt_tokens == done.usage.completion_tokens == 0  # no LLM: nothing spent


def test_streaming_follows_the_chunk_format_and_says_the_same(api: InProcess):
    messages = [{"role": "user", "content": FIRST}]
    whole = client(api).chat.completions.create(model="ragvps", messages=messages)
    stream = client(api).chat.completions.create(
        model="ragvps", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    with_choices = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in with_choices][-1] == "stop"
    assert all(c.choices[0].finish_reason is None for c in with_choices[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    assert extra(with_choices[-1])["citations"] == extra(whole)["citations"]


def test_streaming_without_usage_sends_no_usage_chunk(api: InProcess):
    chunks = list(
        client(api).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": FIRST}], stream=True)
    )
    assert chunks[-1].choices and chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)


def test_a_follow_up_is_retrieved_with_the_history(api: InProcess):
    c = client(api)
    first = c.chat.completions.create(model="ragvps", messages=[{"role": "user", "content": FIRST}])
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": FOLLOW_UP},
    ]
    done = c.chat.completions.create(model="ragvps", messages=messages)
    info = extra(done)
    assert info["question"] == FOLLOW_UP and info["rewrite"] == "rule"
    assert info["standalone_question"] == f"{FIRST} {FOLLOW_UP}"  # it leans on the first: searched after it
    # content parts, as some clients send them, read the same
    parts = messages[:-1] + [{"role": "user", "content": [{"type": "text", "text": FOLLOW_UP}]}]
    again = c.chat.completions.create(model="ragvps", messages=parts)
    assert extra(again)["standalone_question"] == info["standalone_question"]
    assert again.choices[0].message.content == done.choices[0].message.content


def test_a_wrong_or_missing_key_raises_authentication_error(api: InProcess):
    with pytest.raises(openai.AuthenticationError) as caught:
        client(api, key="not-the-key-0123456789").chat.completions.create(
            model="ragvps", messages=[{"role": "user", "content": FIRST}]
        )
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    assert "not valid" in caught.value.message
    with pytest.raises(openai.AuthenticationError):
        client(api, key="not-the-key-0123456789").models.list()
    r = api.keyless().get("/v1/models")  # no key at all
    assert r.status_code == 401 and r.json()["error"]["type"] == "invalid_request_error"


def test_an_over_long_request_raises_bad_request_error(api: InProcess):
    huge = "why is the index slow " * 5000  # over max_body_bytes (64 KiB)
    with pytest.raises(openai.BadRequestError) as caught:
        client(api).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": huge}])
    assert caught.value.status_code == 400 and caught.value.code == "context_length_exceeded"
    assert "max_body_bytes" in caught.value.message


@pytest.mark.parametrize("stream", [False, True])
def test_an_over_long_question_is_refused_before_the_stream_starts(api: InProcess, stream: bool):
    question = "why is the index slow " * 1000  # 22,000 characters: under max_body_bytes, over the question's limit
    with pytest.raises(openai.BadRequestError) as caught:
        client(api).chat.completions.create(
            model="ragvps", messages=[{"role": "user", "content": question}], stream=stream
        )
    assert caught.value.status_code == 400 and caught.value.code == "context_length_exceeded"
    assert "20,000" in caught.value.message


@pytest.mark.parametrize(
    ("messages", "says"),
    [
        ([{"role": "assistant", "content": "hello"}], "last message must be the user's question"),
        ([{"role": "user", "content": FIRST}, {"role": "assistant", "content": "an answer"}], "last message"),
        ([{"role": "user", "content": "   "}], "last message"),
        ([], "messages"),
        ([{"role": "tool", "content": "x"}], "last message must be the user's question"),
        ([{"role": "critic", "content": "x"}], "role"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_conversations_raise_bad_request_error(
    api: InProcess, messages: list[dict[str, Any]], says: str, stream: bool
):
    with pytest.raises(openai.BadRequestError) as caught:
        client(api).chat.completions.create(model="ragvps", messages=messages, stream=stream)  # type: ignore
    assert says in caught.value.message
    assert caught.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_an_unknown_model_raises_not_found_error(api: InProcess):
    with pytest.raises(openai.NotFoundError) as caught:
        client(api).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": FIRST}])
    assert caught.value.code == "model_not_found" and "ragvps" in caught.value.message


def test_the_ragvps_routes_keep_their_own_error_shape(api: InProcess):
    r = api.keyless().post("/search", json={"query": FIRST})
    assert r.status_code == 401 and r.json()["kind"] == "unauthorized"


def test_what_only_an_llm_gives_is_a_clear_400_naming_the_field(api: InProcess):
    from pydantic import BaseModel
    from support import client_bodies as cb

    class Reply(BaseModel):
        answer: str

    asked = [{"role": "user", "content": FIRST}]
    with pytest.raises(openai.BadRequestError) as caught:
        client(api).chat.completions.parse(model="ragvps", messages=asked, response_format=Reply)
    assert caught.value.code == "unsupported_parameter" and caught.value.param == "response_format"
    assert "language model" in caught.value.message
    for choice in ("required", {"type": "function", "function": {"name": "builtin_read_file"}}):
        with pytest.raises(openai.BadRequestError) as caught:
            client(api).chat.completions.create(
                model="ragvps", messages=asked, tools=cb.CONTINUE_TOOLS, tool_choice=choice, stream=True
            )
        assert caught.value.code == "unsupported_parameter" and caught.value.param == "tool_choice"
    # hints are accepted and ignored: tools offered, a text response_format, logprobs
    done = client(api).chat.completions.create(
        model="ragvps",
        messages=asked,
        tools=cb.CONTINUE_TOOLS,
        tool_choice="auto",
        response_format={"type": "text"},
        logprobs=True,
    )
    assert done.choices[0].finish_reason == "stop" and "[1]" in done.choices[0].message.content


def test_continues_agent_request_and_tool_history_read_as_conversation(api: InProcess):
    from support import client_bodies as cb

    chunks = list(client(api).chat.completions.create(**cb.continue_agent(FIRST)))
    assert "[1]" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    history = [
        {"role": "user", "content": FIRST},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "builtin_read_file",
                        "arguments": '{"filepath": "docs/incremental-ingest.md"}',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Re-running ingest skips unchanged files."},
        {"role": "user", "content": FOLLOW_UP},
    ]
    done = client(api).chat.completions.create(model="ragvps", messages=history)
    info = extra(done)
    assert info["question"] == FOLLOW_UP and info["rewrite"] == "rule" and "ingest" in info["standalone_question"]
