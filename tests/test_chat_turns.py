"""What users hit in conversations without an LLM (issue 51 part 2): a follow-up quotes what answers it, not the
earlier answer's sentence again; a short question with its own subject stands alone; thanks gets a closing, not a
search; Open WebUI's "Add Details" and "More Concise" answer the previous question again; an explained refusal
cites nothing it does not list. Through the official `openai` client against the server in this process."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support import client_bodies as cb
from support.asgi_server import InProcess

from ragvps.generate import rewrite

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")

KEYS = "How do I rotate the API keys?"


def oa(api: InProcess) -> Any:
    return openai.OpenAI(
        base_url=api.url + "/v1", api_key=api.key or "none", max_retries=0, timeout=120, http_client=api.keyless()
    )


def say(api: InProcess, *turns: str) -> tuple[str, dict[str, Any]]:
    """Each turn asked after the answers to the ones before it, as a client sends them; the last answer."""
    messages: list[dict[str, str]] = []
    text, info = "", {}
    for turn in turns:
        messages.append({"role": "user", "content": turn})
        done = oa(api).chat.completions.create(model="ragvps", messages=messages)
        text, info = done.choices[0].message.content, dict((done.model_extra or {})["ragvps"])
        messages.append({"role": "assistant", "content": text})
    return text, info


def quoted(text: str) -> str:
    """The quoted sentences of an extractive answer, without the label and the source list."""
    return text.partition("\n\n**Sources**")[0].partition("\n")[2]


def test_the_follow_up_in_the_docs_quotes_the_sentence_that_answers_it(api: InProcess):
    first, _ = say(api, "how do I stop the embedded database?")
    then, info = say(api, "how do I stop the embedded database?", "and what starts it again?")
    assert "starts it again" in quoted(then), then
    assert quoted(then) != quoted(first)
    assert info["rewrite"] == "rule"


@pytest.mark.parametrize("short", ["who is on call?", "where do I park?", "how do I print?", "when is payday?"])
def test_a_short_question_with_its_own_subject_stands_alone(api: InProcess, short: str):
    assert rewrite.stands_alone(short, [("user", KEYS), ("assistant", "Keys come from RAGVPS_API_KEYS.")])
    alone, _ = say(api, short)
    after, info = say(api, KEYS, short)
    assert info["standalone_question"] == short
    assert after == alone


def test_a_short_question_about_what_was_just_said_still_leans_on_it():
    history = [("user", "How do I stop the embedded database?"), ("assistant", "Run `ragvps server stop`.")]
    assert not rewrite.stands_alone("what about the server?", history)
    assert not rewrite.stands_alone("why stop?", history)  # its one word is the conversation's
    assert rewrite.rule(history, "why stop?") == "How do I stop the embedded database? why stop?"


@pytest.mark.parametrize("closing", ["thanks, that's all", "Thank you!", "great, thanks a lot", "ok bye"])
def test_closing_words_get_a_closing_not_a_search(api: InProcess, closing: str):
    text, info = say(api, KEYS, closing)
    assert "[1]" not in text and "**Sources**" not in text and "Extractive answer" not in text, text
    assert info["sources"] == [] and info["answered"]
    assert rewrite.is_closing(closing) and not rewrite.is_closing("thanks, and how do I stop it?")


def test_no_follow_up_suggestions_after_thanks(api: InProcess):
    first, _ = say(api, KEYS)
    turns = cb.history(("user", KEYS), ("assistant", first), ("user", "thanks, that's all"))
    done = oa(api).chat.completions.create(**cb.owui_task_body(cb.owui_follow_ups(turns)))
    assert json.loads(done.choices[0].message.content) == {"follow_ups": []}


@pytest.mark.parametrize("variant", ["Add Details", "More Concise"])
def test_open_webuis_regenerate_variants_answer_the_previous_question_again(api: InProcess, variant: str):
    first, _ = say(api, KEYS)
    again, info = say(api, KEYS, variant)
    assert info["standalone_question"] == KEYS
    assert quoted(again) == quoted(first) and "serve.md" in again


def test_an_explained_refusal_cites_nothing_and_writes_headings_one_way(serve_env: dict[str, str]):
    from support.asgi_server import in_process

    with in_process(serve_env | {"RAGVPS_ANSWER_MIN_EVIDENCE": "0"}) as srv:
        text, info = say(srv, "What is the capital of France?")
    assert "answers this directly" in text and not info["citations"]
    assert "[1]" not in text and "**Sources**" not in text
    assert " > " not in text.partition("The closest:")[2], text  # › throughout, as the source list writes it


def test_the_getting_started_question_quotes_the_formats_sentence(api: InProcess):
    text, _ = say(api, "which file formats can ragvps read?")  # docs/getting-started.md's example (issue 51)
    assert "Markdown, plain text, HTML, PDF, Word, PowerPoint, Excel" in quoted(text), text
