"""Ollama's API emulated (/api/version, /api/tags, /api/show, /api/chat), through the official `ollama` Python
client against the server in this process (its httpx client over the application), with no LLM configured."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import client_bodies as cb
from support.asgi_server import InProcess
from support.serve_server import SECOND_KEY

ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency: pip install -e '.[test]'")

FIRST = "how do I stop the embedded database?"


def client(api: InProcess, key: str | None = None) -> Any:
    return ollama.Client(
        host=api.url, headers={"Authorization": f"Bearer {key or api.key}"}, timeout=60, transport=api.transport()
    )


def test_version_tags_and_show_describe_the_knowledge_base(api: InProcess):
    assert api.client().get("/api/version").json()["version"]
    models = client(api).list().models
    assert [m.model for m in models] == ["ragvps:latest"]
    assert models[0].details is not None and models[0].details.family == "ragvps"
    shown = client(api).show("ragvps")
    assert shown.capabilities == ["completion"] and shown.modelinfo["general.architecture"] == "ragvps"
    with pytest.raises(ollama.ResponseError) as caught:
        client(api).show("llama3")
    assert caught.value.status_code == 404 and "ragvps:latest" in caught.value.error


def test_chat_answers_whole_and_streamed_alike(api: InProcess):
    messages = [{"role": "user", "content": FIRST}]
    whole = client(api).chat(model="ragvps", messages=messages, stream=False)
    assert whole.done and whole.message.role == "assistant" and whole.done_reason == "stop"
    assert "[1]" in whole.message.content and "**Sources**" in whole.message.content
    pieces = list(client(api).chat(model="ragvps:latest", messages=messages, stream=True))
    assert pieces[-1].done and all(not p.done for p in pieces[:-1]) and len(pieces) >= 2
    assert "".join(p.message.content for p in pieces) == whole.message.content
    follow = api.client().post(
        "/api/chat",
        json={
            "model": "ragvps",
            "stream": False,
            "messages": [
                *messages,
                {"role": "assistant", "content": whole.message.content},
                {"role": "user", "content": "and what starts it again?"},
            ],
        },
    )
    info = follow.json()["ragvps"]  # the one extra field (the ollama client's types drop it)
    assert info["rewrite"] == "rule" and "embedded" in info["standalone_question"]


def test_open_webui_tasks_through_the_ollama_connection(api: InProcess):
    title = client(api).chat(
        model="ragvps", stream=False, messages=[{"role": "user", "content": cb.owui_title(cb.history(("user", FIRST)))}]
    )
    assert json.loads(title.message.content) == {"title": "Stop Embedded Database"}


def test_errors_are_the_clients_response_errors_before_any_line(api: InProcess):
    asked = [{"role": "user", "content": FIRST}]
    with pytest.raises(ollama.ResponseError) as caught:
        list(client(api, key="not-the-key-0123456789").chat(model="ragvps", messages=asked, stream=True))
    assert caught.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as caught:
        client(api).chat(model="llama3", messages=asked, stream=False)
    assert caught.value.status_code == 404 and "ragvps:latest" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:  # streamed: refused before the first line
        list(client(api).chat(model="ragvps", messages=[{"role": "user", "content": "why " * 6000}], stream=True))
    assert caught.value.status_code == 400 and "20,000" in caught.value.error  # as /v1 and Ollama answer it
    with pytest.raises(ollama.ResponseError) as caught:
        client(api).chat(model="ragvps", messages=asked, format="json", stream=False)
    assert caught.value.status_code == 400 and "format" in caught.value.error


def test_a_key_sees_only_its_knowledge_bases(api: InProcess):
    assert [m.model for m in client(api, SECOND_KEY).list().models] == ["ragvps:latest"]


def test_ollamas_own_curl_examples_are_answered(api: InProcess):
    """`curl http://localhost:11434/api/chat -d '{...}'` sends application/x-www-form-urlencoded (curl -d's default);
    Ollama reads the body as JSON anyway, and so does ragvps under /api (issue 51: it answered 415)."""
    body = b'{"model": "ragvps", "messages": [{"role": "user", "content": "how do I stop the embedded database?"}], '
    body += b'"stream": false}'
    with api.client() as c:
        for kind in ("application/x-www-form-urlencoded", None):
            headers = {"Content-Type": kind} if kind else {}
            done = c.post("/api/chat", content=body, headers=headers)
            assert done.status_code == 200, done.text
            assert "ragvps server stop" in done.json()["message"]["content"]
        shown = c.post("/api/show", content=b'{"model": "ragvps"}', headers={"Content-Type": "text/plain"})
        assert shown.status_code == 200, shown.text
        # elsewhere the wrong type is still a 415 that says what to send
        assert c.post("/search", content=b'{"query": "x"}', headers={"Content-Type": "text/plain"}).status_code == 415
