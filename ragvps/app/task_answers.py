"""A chat client's background task (a title, tags, follow-ups, search queries, an autocompletion, an emoji;
generate/client_tasks.py recognises them): not a question to search for.

With an LLM configured the client's messages go to it unchanged: no retrieval, no sources, no citations, its
tokens counted in usage. Without one the task is answered here, in the format it asks for (JSON when it asks
for JSON): a title from the first question's salient words, tags from the headings of the sections the
conversation is about, follow-ups from their sibling sections; a conversation about an attached file (its
sections are not the knowledge base's) gets tags and follow-ups from its own words. Never the refusal sentence.
"""

from __future__ import annotations

import dataclasses

from ragvps.app.ports import App, OnToken
from ragvps.app.requests import Answer, ChatAnswer, ChatRequest, Retrieval, SearchRequest
from ragvps.db import store
from ragvps.errors import RagvpsError
from ragvps.generate import budget, client_tasks, rewrite
from ragvps.generate.prompt import PROMPT_VERSION, passed_through
from ragvps.generate.records import ToolCall, Usage

MOST_TAGS = 3
MOST_FOLLOW_UPS = 3
EMOJI = "\U0001f642"
SEP = " > "


def answer_task(app: App, task: client_tasks.Task | None, request: ChatRequest, on_token: OnToken) -> ChatAnswer:
    """The task's answer: the LLM's, from the client's messages as sent, or one made here without it. No task
    (a tool's result last): the LLM goes on from the messages as sent."""
    gen = app.generator
    calls: tuple[ToolCall, ...] = ()
    if task is not None and gen.extractive:
        text, usage = client_tasks.render(task, values(app, task)), Usage()
        on_token(text)
    else:
        prompt = dataclasses.replace(passed_through(request.messages), tools=request.tools, sent=request.sent)
        fit = budget.as_is(prompt, request.overrides.generation(app.settings.generate))
        generation = gen.generate(fit, on_token)
        text, usage, calls = generation.text, generation.usage, generation.tool_calls
    answer = plain_answer(app, text, usage, calls)
    question = client_tasks.last_question(task) if task else ""
    return ChatAnswer(
        content=text,
        answer=answer,
        question=question,
        standalone=question,
        rewrite="none",
        rewrite_cache="off",
        rewrite_usage=Usage(),
        usage=usage,
        task=task.kind if task else "tool_result",
    )


def plain_answer(app: App, text: str, usage: Usage | None = None, calls: tuple[ToolCall, ...] = ()) -> Answer:
    """An answer that searched nothing: no sources, no citations (a task's, a closing's)."""
    gen = app.generator
    return Answer(
        answer=text,
        answered=True,
        extractive=gen.extractive,
        citations=(),
        invalid_citations=0,
        retrieval=Retrieval(shown=(), left_out={}, evidence=0.0, retrieved=()),
        usage=usage or Usage(),
        cache="off",
        generator=gen.name,
        model=gen.model,
        prompt_version=PROMPT_VERSION,
        timings={},
        min_evidence=app.settings.generate.min_evidence,
        tool_calls=calls,
    )


def values(app: App, task: client_tasks.Task) -> list[str]:
    """What the task asks for, made without an LLM: the title, the tags, the questions, the text."""
    if task.kind == "title":
        return [client_tasks.title_of(client_tasks.first_question(task))]
    if task.kind == "tags":
        return tags(app, task)
    if task.kind == "follow_ups":
        return follow_ups(app, task)
    if task.kind == "queries":
        question = client_tasks.last_question(task)
        return [question] if client_tasks.salient_words(question) else []
    if task.kind == "image_prompt":
        return [client_tasks.first_question(task)]
    if task.kind == "emoji":
        return [EMOJI]
    return [""]  # autocomplete: Open WebUI's template asks for an empty text when unsure


def sections(app: App, task: client_tasks.Task) -> list[tuple[str, str]]:
    """(path, heading path) of the sections the conversation is about: those the earlier answers cited, else
    the best hits for its last question."""
    cited = client_tasks.cited_sections(task)
    if cited:
        return cited
    question = client_tasks.last_question(task)
    if not client_tasks.salient_words(question):
        return []
    try:
        found = app.search(SearchRequest(question, k=MOST_FOLLOW_UPS))
    except RagvpsError:  # an empty knowledge base, a question it cannot search: no sections, no failure
        return []
    return [(h.path, h.heading_path) for h in found.hits]


def tags(app: App, task: client_tasks.Task) -> list[str]:
    heads = [heading.split(SEP)[0] for _, heading in sections(app, task) if heading]
    if not heads:  # about an attached file, or nothing found: the conversation's own words
        asked = " ".join(text for role, text in task.conversation if role == "user")
        heads = client_tasks.salient_words(asked, MOST_TAGS)
    if not heads:
        heads = app.read(lambda r: store.top_headings(r.conn, MOST_TAGS))
    found: list[str] = []
    for head in heads:
        tag = client_tasks.title_of(" ".join(client_tasks.salient_words(head, 3)))
        if tag != client_tasks.FALLBACK_TITLE and tag not in found:
            found.append(tag)
    return found[:MOST_TAGS] or ["General"]


def follow_ups(app: App, task: client_tasks.Task) -> list[str]:
    """A question about each sibling section (same parent heading) of the sections the conversation is about."""
    if rewrite.is_closing(client_tasks.last_question(task)):
        return []  # the user said thanks or bye: nothing to suggest
    about = sections(app, task)
    asked = {heading for _, heading in about}
    questions: list[str] = []
    for path, heading in about:
        headings = app.read(lambda r, path=path: store.section_headings(r.conn, path))  # type: ignore[misc]
        parent = heading.rpartition(SEP)[0]
        siblings = [h for h in headings if h not in asked and h.rpartition(SEP)[0] == parent]
        children = [h for h in headings if h not in asked and h.startswith(heading + SEP)]
        for h in siblings + children:
            q = client_tasks.follow_up(h.rpartition(SEP)[2])
            if q not in questions:
                questions.append(q)
    if not questions:
        topic = " ".join(client_tasks.salient_words(client_tasks.last_question(task), 4))
        files = [path for path, heading in about if not heading]  # attached files the answers cited
        where = f"`{files[0]}`" if files else "the documentation"
        questions = [f"What else does {where} say about {topic}?" if topic else f"What does {where} cover?"]
    return questions[:MOST_FOLLOW_UPS]
