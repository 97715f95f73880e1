"""A conversation stays on its question (issue 43): a new topic after others is searched as itself, a follow-up
with its history, and the answer names its sources whatever tools the client offers, through the official `openai`
and `ollama` clients against the server in this process (no LLM configured: extractive answers)."""

from __future__ import annotations

from typing import Any

import pytest
from support import client_bodies as cb
from support.asgi_server import InProcess

from ragvps.generate import rewrite

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")
ollama = pytest.importorskip("ollama", reason="the ollama client is a test dependency: pip install -e '.[test]'")

KEYS = "how do I rotate the API keys?"
FORMATS = "what file formats can I ingest?"


def oa(api: InProcess) -> Any:
    return openai.OpenAI(
        base_url=api.url + "/v1", api_key=api.key, max_retries=0, timeout=60, http_client=api.keyless()
    )


def ol(api: InProcess) -> Any:
    return ollama.Client(
        host=api.url, headers={"Authorization": f"Bearer {api.key}"}, timeout=60, transport=api.transport()
    )


@pytest.mark.parametrize(
    "question",
    [
        FORMATS,
        "Where does ragvps keep its data directory?",
        "How do I create a key that can only read one knowledge base?",
        "What happens to a file that cannot be parsed?",
    ],
)
def test_a_question_that_stands_alone_is_searched_as_itself(question: str):
    history = [("user", KEYS), ("assistant", "Keys are listed in api_key_file.")]
    assert rewrite.stands_alone(question)
    assert rewrite.rule(history, question) == question


@pytest.mark.parametrize(
    "question",
    [
        "How do I stop it?",
        "And what should a team use instead?",
        "Is that private, then?",
        "How do I see what did not fit?",
        "How long does a batch wait for one that died?",
        "Which API shapes does it speak?",
    ],
)
def test_a_question_that_leans_on_the_history_goes_after_it(question: str):
    history = [
        ("user", "How does the embedded PostgreSQL start?"),
        ("assistant", "On first use."),
        ("user", "Can I watch it?"),
        ("assistant", "Yes."),
    ]
    assert not rewrite.stands_alone(question)
    # back to the latest user turn that stands alone, in order
    assert rewrite.rule(history, question) == f"How does the embedded PostgreSQL start? Can I watch it? {question}"


def test_a_new_topic_after_another_gets_the_answer_it_gets_alone(api: InProcess):
    first = oa(api).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": KEYS}])
    alone = oa(api).chat.completions.create(model="ragvps", messages=[{"role": "user", "content": FORMATS}])
    after = oa(api).chat.completions.create(
        model="ragvps",
        messages=[
            {"role": "user", "content": KEYS},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": FORMATS},
        ],
    )
    info = dict((after.model_extra or {})["ragvps"])
    assert info["standalone_question"] == FORMATS
    assert after.choices[0].message.content == alone.choices[0].message.content
    assert "formats.md" in after.choices[0].message.content


def sources_named(text: str) -> bool:
    body, _, listed = text.partition("\n\n**Sources**\n")
    return "[1]" in body and listed.startswith("- [1] `") and ".md`" in listed


@pytest.mark.parametrize("stream", [False, True])
def test_open_webuis_ten_tools_leave_the_sources_listed(api: InProcess, stream: bool):
    asked = [{"role": "user", "content": KEYS}]
    done = oa(api).chat.completions.create(model="ragvps", messages=asked, tools=cb.owui_tools(10), stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in done if c.choices)
    else:
        assert done.choices[0].finish_reason == "stop" and not done.choices[0].message.tool_calls
        text = done.choices[0].message.content
    assert sources_named(text), text


def test_continues_agent_mode_leaves_the_sources_listed(api: InProcess):
    chunks = list(oa(api).chat.completions.create(**cb.continue_agent(KEYS)))
    assert sources_named("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))


def test_the_ollama_connections_36_tools_leave_the_sources_listed(api: InProcess):
    asked = [{"role": "user", "content": KEYS}]
    whole = ol(api).chat(model="ragvps", messages=asked, tools=cb.owui_tools(36), stream=False)
    assert sources_named(whole.message.content) and not whole.message.tool_calls
    streamed = "".join(
        p.message.content for p in ol(api).chat(model="ragvps", messages=asked, tools=cb.owui_tools(36), stream=True)
    )
    assert streamed == whole.message.content


def test_a_json_response_format_still_gets_no_list():
    from ragvps.app.chat import wants_json

    assert wants_json('{"response_format": {"type": "json_object"}}')
    assert not wants_json('{"tools": [{"type": "function"}]}') and not wants_json("")


NOTES = (
    "Meeting notes, 3 March. The blue widget ships in boxes of twelve. Marketing wants a new colour for the "
    "spring catalogue, and the warehouse asked for labels in two languages."
)
WIDGETS = "how many blue widgets does a box hold?"


def task(api: InProcess, content: str) -> Any:
    import json

    done = oa(api).chat.completions.create(**cb.owui_task_body(content))
    return json.loads(done.choices[0].message.content)


def test_an_attached_files_list_is_no_part_of_the_question(api: InProcess):
    body = [{"role": "user", "content": cb.owui_files(cb.owui_rag(NOTES, WIDGETS))}]
    done = oa(api).chat.completions.create(model="ragvps", messages=body)
    info = dict((done.model_extra or {})["ragvps"])
    assert info["question"] == WIDGETS and info["standalone_question"] == WIDGETS
    assert "twelve" in done.choices[0].message.content


def test_open_webuis_tasks_about_an_attached_file_work_on_the_conversations_text(api: InProcess):
    body = [{"role": "user", "content": cb.owui_files(cb.owui_rag(NOTES, WIDGETS))}]
    answer = oa(api).chat.completions.create(model="ragvps", messages=body).choices[0].message.content
    assert "`notes.txt`" in answer
    turns = cb.history(("user", cb.owui_files(WIDGETS)), ("assistant", answer))
    assert task(api, cb.owui_queries(turns)) == {"queries": [WIDGETS]}
    assert task(api, cb.owui_title(turns)) == {"title": "Blue Widgets Box Hold"}
    tags = task(api, cb.owui_tags(turns))["tags"]
    assert tags and all(t in ("Blue", "Widgets", "Box") for t in tags), tags  # its words, not the docs' headings
    follow = task(api, cb.owui_follow_ups(turns))["follow_ups"]
    assert follow and all("notes.txt" in q and "widgets" in q for q in follow), follow
    assert not any("<attached_files>" in str(v) for v in (tags, follow))
