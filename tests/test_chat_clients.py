"""What the chat front ends send besides a question (support/client_bodies.py, after their source), against the server
in this process with no LLM: Open WebUI's background tasks and LibreChat's title answered in the format they ask
for, never the refusal and never a source list."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import client_bodies as cb
from support.asgi_server import InProcess

from ragvps.generate.prompt import REFUSAL

FIRST = "how do I stop the embedded database?"


def post(api: InProcess, body: dict[str, Any], **headers: str) -> dict[str, Any]:
    r = api.client().post("/v1/chat/completions", json=body, headers=headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


def content(done: dict[str, Any]) -> str:
    text = done["choices"][0]["message"]["content"]
    assert REFUSAL not in text and "**Sources**" not in text and "Extractive answer" not in text
    return str(text)


@pytest.fixture(scope="module")
def first_answer(api: InProcess) -> str:
    return content_of(post(api, {"model": "ragvps", "messages": [{"role": "user", "content": FIRST}]}))


def content_of(done: dict[str, Any]) -> str:
    return str(done["choices"][0]["message"]["content"])


def test_open_webui_title_is_json_from_the_first_question(api: InProcess, first_answer: str):
    turns = cb.history(("user", FIRST), ("assistant", first_answer))
    done = post(api, cb.owui_task_body(cb.owui_title(turns)), **cb.OWUI_HEADERS)
    title = json.loads(content(done))["title"]
    assert title == "Stop Embedded Database"
    assert done["ragvps"]["task"] == "title" and done["ragvps"]["citations"] == []
    assert done["usage"]["prompt_tokens"] == 0


def test_open_webui_tags_come_from_the_cited_sections(api: InProcess, first_answer: str):
    turns = cb.history(("user", FIRST), ("assistant", first_answer))
    tags = json.loads(content(post(api, cb.owui_task_body(cb.owui_tags(turns)))))["tags"]
    assert 1 <= len(tags) <= 3 and all(isinstance(t, str) and t for t in tags)
    assert any("Embedded" in t or "Database" in t for t in tags), tags


def test_open_webui_follow_ups_name_sibling_sections(api: InProcess, first_answer: str):
    assert "**Sources**" in first_answer
    turns = cb.history(("user", FIRST), ("assistant", first_answer))
    ups = json.loads(content(post(api, cb.owui_task_body(cb.owui_follow_ups(turns)))))["follow_ups"]
    assert 1 <= len(ups) <= 3 and all(q.endswith("?") for q in ups)
    assert not any("stop" in q.lower() and "database" in q.lower() for q in ups)  # not the section already cited


def test_open_webui_queries_autocomplete_and_emoji(api: InProcess, first_answer: str):
    turns = cb.history(("user", FIRST), ("assistant", first_answer), ("user", "and start it again?"))
    queries = json.loads(content(post(api, cb.owui_task_body(cb.owui_queries(turns)))))["queries"]
    assert queries == ["and start it again?"]
    text = json.loads(content(post(api, cb.owui_task_body(cb.owui_autocomplete(turns, "how do I ins")))))["text"]
    assert text == ""
    emoji = content(post(api, cb.owui_task_body(cb.owui_emoji("this finally works, thanks!"))))
    assert len(emoji) <= 2


def test_open_webui_tasks_stream_too(api: InProcess, first_answer: str):
    body = cb.owui_task_body(cb.owui_title(cb.history(("user", FIRST)))) | {"stream": True}
    with api.client().stream("POST", "/v1/chat/completions", json=body) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    text = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in lines[:-1])
    assert json.loads(text) == {"title": "Stop Embedded Database"}


@pytest.mark.parametrize("body", [cb.librechat_title, cb.librechat_agents_title])
def test_librechat_title_is_a_plain_title(api: InProcess, first_answer: str, body: Any):
    title = content(post(api, body(FIRST, first_answer)))
    assert title == "Stop Embedded Database"


NOTES = (
    "Meeting notes, 3 March. The blue widget ships in boxes of twelve. Marketing wants a new colour for the "
    "spring catalogue, and the warehouse asked for labels in two languages. "
)


@pytest.mark.parametrize(("size", "user_query"), [(3_000, False), (28_000, False), (3_000, True)])
def test_an_attached_file_is_one_more_source_and_the_question_is_asked_alone(
    api: InProcess, size: int, user_query: bool
):
    alone = post(api, {"model": "ragvps", "messages": [{"role": "user", "content": FIRST}]})
    context = (NOTES * (size // len(NOTES) + 1))[:size]
    body = cb.owui_chat_body([{"role": "user", "content": cb.owui_rag(context, FIRST, "notes.txt", user_query)}])
    with api.client().stream("POST", "/v1/chat/completions", json=body, headers=cb.OWUI_HEADERS) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    info = next(e["ragvps"] for e in events if "ragvps" in e)
    assert info["question"] == FIRST and info["standalone_question"] == FIRST
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == content_of(alone)  # answered as if asked alone: the notes do not answer it
    assert [s["path"] for s in info["sources"]][-1] == "notes.txt"
    attached = info["sources"][-1]
    assert attached["text"].startswith("Meeting notes") and len(attached["text"]) <= size
    assert [c["path"] for c in info["citations"]] == [c["path"] for c in alone["ragvps"]["citations"]]
    assert events[-1]["usage"] is not None  # stream_options.include_usage


def test_the_attached_file_can_answer_and_is_cited(api: InProcess):
    question = "how many blue widgets does a box hold?"
    body = {"model": "ragvps", "messages": [{"role": "user", "content": cb.owui_rag(NOTES, question)}]}
    done = post(api, body)
    info = done["ragvps"]
    assert info["standalone_question"] == question
    assert [c["path"] for c in info["citations"]] == ["notes.txt"]
    assert '"The blue widget ships in boxes of twelve." [1]' in content_of(done)
