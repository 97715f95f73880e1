"""The Ollama-compatible /api/chat and /api/tags (what Open WebUI's Ollama connection speaks), through the
official `ollama` Python client against a real `ragvps serve`."""

from __future__ import annotations

from typing import Any

import pytest
from serve_server import Server

ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency: pip install -e '.[test]'")

FIRST = "how do I stop the embedded database?"


def client(server: Server, key: str | None = None) -> Any:
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {key or server.key}"}, timeout=60)


def test_tags_list_the_knowledge_base(server: Server):
    models = client(server).list().models
    assert [m.model for m in models] == ["ragvps:latest"]


def test_chat_answers_whole_and_streamed_alike(server: Server):
    messages = [{"role": "user", "content": FIRST}]
    whole = client(server).chat(model="ragvps", messages=messages, stream=False)
    assert whole.done and whole.message.role == "assistant"
    assert "ragvps server stop" in whole.message.content and "**Sources**" in whole.message.content
    pieces = list(client(server).chat(model="ragvps:latest", messages=messages, stream=True))
    assert pieces[-1].done and all(not p.done for p in pieces[:-1])
    assert "".join(p.message.content for p in pieces) == whole.message.content
    with server.client() as c:  # the client's types drop the extra `ragvps` field: read it raw
        follow = c.post("/api/chat", json={"model": "ragvps", "stream": False, "messages": [
            *messages, {"role": "assistant", "content": whole.message.content},
            {"role": "user", "content": "and what starts it again?"}]}).json()
    assert follow["done"] and follow["message"]["content"]
    assert follow["ragvps"]["rewrite"] == "rule" and "embedded" in follow["ragvps"]["standalone_question"]


def test_errors_are_the_clients_response_errors(server: Server):
    with pytest.raises(ollama.ResponseError) as caught:
        client(server, key="not-the-key-0123456789").chat(model="ragvps", messages=[{"role": "user",
                                                                                       "content": FIRST}])
    assert caught.value.status_code == 401
    with pytest.raises(ollama.ResponseError) as caught:
        client(server).chat(model="llama3", messages=[{"role": "user", "content": FIRST}], stream=False)
    assert caught.value.status_code == 404 and "ragvps:latest" in caught.value.error
