"""The chat use case: a conversation's messages in, an answer to its last question out, with no server state.

The follow-up is made standalone first (one short, cached LLM call when a generator is configured; a cheap
rule otherwise), then the ask use case answers it: the same retrieval, evidence gate, answer cache (keyed
on the standalone question and the chunks sent) and citations. With an LLM, the earlier turns go into the
prompt before the new sources. The answer ends with a short Markdown list of the sources it cites, which
a client sends back with the next turn; it is taken off again here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ragvps.app.ports import App, OnSources, OnToken, ignore
from ragvps.app.requests import AskRequest, CacheStatus, ChatAnswer, ChatRequest, RewriteHow
from ragvps.app.task_answers import answer_task, plain_answer
from ragvps.errors import InputTooLongError, UsageError
from ragvps.generate import cache, rewrite
from ragvps.generate.client_context import split, without_file_list
from ragvps.generate.client_tasks import detect
from ragvps.generate.llm.tools import passed
from ragvps.generate.records import Citation, Usage
from ragvps.retrieve.search import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from ragvps.generate.prompt import Turn

# system/developer: the client's own instructions, unused; tool: a tool's result, read as the assistant's words
ROLES = ("user", "assistant", "system", "developer", "tool")
SOURCES_HEADING = "**Sources**"
_FOOTER = re.compile(r"\n*\*\*Sources\*\*\n(?:- \[\d+\][^\n]*(?:\n|$))+\s*$")
_MARKERS = re.compile(r"\s?\[\d{1,4}(?:\s*,\s*\d{1,4})*\]")


def conversation(messages: Sequence[tuple[str, str]]) -> tuple[list[Turn], str]:
    """The earlier turns (user/assistant, alternating, source lists taken off) and the last user question."""
    if not messages:
        raise UsageError("messages is empty: send at least one message with role user")
    for role, _ in messages:
        if role not in ROLES:
            raise UsageError(f"message role {role!r} is not one of: {', '.join(ROLES)}")
    talk = [
        ("assistant" if role == "tool" else role, text)
        for role, text in messages
        if role in ("user", "assistant", "tool")
    ]
    if not talk or talk[-1][0] != "user" or not talk[-1][1].strip():
        raise UsageError("the last message must be the user's question (role user, with text)")
    turns: list[Turn] = []
    for role, text in talk[:-1]:
        text = clean_turn(text) if role == "assistant" else text.strip()
        if not text:
            continue
        if turns and turns[-1][0] == role:  # two turns of one role in a row read as one
            turns[-1] = (role, turns[-1][1] + "\n\n" + text)
        else:
            turns.append((role, text))
    if turns and turns[0][0] == "assistant":  # a conversation starts with the user (some providers insist)
        turns.insert(0, ("user", "(earlier conversation)"))
    return turns, talk[-1][1].strip()


def check_conversation(messages: Sequence[tuple[str, str]], llm: bool = False) -> None:
    """Raise what `chat` would raise for these messages before anything is answered (or streamed). With an
    `llm`, a tool's result may come last (the LLM goes on from it)."""
    if llm and messages and messages[-1][0] == "tool":
        return
    if detect(messages) is None:
        _, question = conversation(take_context(messages)[0])
        if len(question) > MAX_QUERY_CHARS:
            raise InputTooLongError(
                f"the question is {len(question):,} characters long; ask in at most "
                f"{MAX_QUERY_CHARS:,} (context sent with it, such as an attached file, may be "
                "longer)"
            )


def take_context(messages: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], tuple[tuple[str, str], ...]]:
    """The messages without the client's own context (Open WebUI's RAG template around an attached file), and
    that context (name, text) from the last user message and the system messages; earlier turns' is dropped."""
    last_user = max((i for i, (role, _) in enumerate(messages) if role == "user"), default=-1)
    out: list[tuple[str, str]] = []
    attached: list[tuple[str, str]] = []
    for i, (role, text) in enumerate(messages):
        text = without_file_list(text) if role == "user" else text
        found = split(text) if role in ("user", "system", "developer") else None
        if found is None:
            out.append((role, text))
            continue
        out.append((role, found.question))
        if i == last_user or role != "user":
            attached.extend((a.name, a.text) for a in found.attached)
    return out, tuple(attached)


def clean_turn(text: str) -> str:
    """An earlier answer as the model should see it: without its source list and its [n] markers, whose
    numbers named that turn's sources, not this one's."""
    return _MARKERS.sub("", _FOOTER.sub("", text)).strip()


def source_list(citations: Sequence[Citation]) -> str:
    """The Markdown list a chat client shows under the answer: each cited source's path and heading."""
    if not citations:
        return ""
    lines = [f"\n\n{SOURCES_HEADING}"]
    for c in citations:
        heading = " \u203a " + c.heading_path.replace(" > ", " \u203a ") if c.heading_path else ""
        lines.append(f"- [{c.number}] `{c.path}`{heading}")
    return "\n".join(lines)


def wants_json(tools: str) -> bool:
    """Did the client ask for JSON (response_format json_object or json_schema), which a source list would break?
    Tools merely offered do not stop the list: only a tool call made instead of an answer does."""
    return (passed(tools).get("response_format") or {}).get("type") in ("json_object", "json_schema")


@dataclass(frozen=True)
class Standalone:
    """The question that is retrieved and answered, and how it was made standalone."""

    question: str
    how: RewriteHow
    cache: CacheStatus = "off"
    usage: Usage = Usage()


def standalone(app: App, turns: Sequence[Turn], question: str, use_cache: bool, history: bool = True) -> Standalone:
    """The follow-up made standalone: none (a first turn), by the rule (no LLM), or by one short LLM call."""
    if not history or not any(role == "user" for role, _ in turns):
        return Standalone(question, "none")
    gen = app.generator
    if gen.extractive:
        return Standalone(rewrite.rule(turns, question), "rule")

    fit = rewrite.rewrite_fit(turns, question, app.settings.generate)
    use_cache = use_cache and app.settings.generate.cache
    key = cache.key(
        fit.prompt.user,
        gen.name,
        gen.model,
        {"task": "rewrite", "version": rewrite.REWRITE_VERSION, "url": app.settings.generate.url},
        [],
    )
    if use_cache:
        hit = app.read(lambda r: cache.get(r.conn, key, count=r.replica is None))  # a replica's hit is not counted
        if hit is not None:
            return Standalone(hit.text, "llm", "hit")
    generation = gen.generate(fit, lambda _: None)
    text = rewrite.clean(generation.text, question)
    if use_cache:
        made = cache.Cached(text=text, usage=generation.usage)
        app.connections.write_behind(  # on the primary, or kept for it while it is away
            [lambda c: cache.put(c, key, fit.prompt.user, gen.name, gen.model, [], made)],
            app.kb.schema if app.kb is not None else None,
        )
    return Standalone(text, "llm", "miss" if use_cache else "off", generation.usage)


CLOSING = "Glad to help. Ask again whenever you need something from the documents."


def said(app: App, question: str, text: str, on_token: OnToken) -> ChatAnswer:
    """An answer that searched nothing: a closing for thanks or goodbye (not the last answer's quote again), or why
    the user may not ask this knowledge base."""
    on_token(text)
    return ChatAnswer(
        content=text,
        answer=plain_answer(app, text),
        question=question,
        standalone=question,
        rewrite="none",
        rewrite_cache="off",
        rewrite_usage=Usage(),
        usage=Usage(),
    )


def answers_given(turns: Sequence[Turn]) -> tuple[str, ...]:
    """The earlier answers, as the conversation shows them (source lists and markers off)."""
    return tuple(clean_turn(text) for role, text in turns if role == "assistant")


def again(turns: Sequence[Turn], question: str) -> tuple[list[Turn], str]:
    """The conversation as it stood when the previous question was asked, and that question; as it is when there
    was none."""
    for i in range(len(turns) - 1, -1, -1):
        role, text = turns[i]
        if role == "user" and text.strip() == rewrite.previous_question(turns[: i + 1]):
            return list(turns[:i]), text.strip()
    return list(turns), question


def chat(
    app: App, request: ChatRequest, on_sources: OnSources | None = None, on_token: OnToken | None = None
) -> ChatAnswer:
    """Answer the conversation's last question; `on_token` also receives the source list at the end. A chat
    client's background task (a title, tags) is answered as it asks instead (app/task_answers.py)."""
    task = detect(request.messages)
    after_tool = bool(request.messages) and request.messages[-1][0] == "tool" and not app.generator.extractive
    if task is not None or after_tool:  # a background task, or a tool's result for the LLM to go on from
        return answer_task(app, task, request, on_token or ignore)
    messages, attached = take_context(request.messages)
    turns, question = conversation(messages)
    if request.denied:  # a chat front end's user who may not read this knowledge base: why, and nothing searched
        return said(app, question, request.denied, on_token or ignore)
    if rewrite.is_closing(question):
        return said(app, question, CLOSING, on_token or ignore)
    if request.history and rewrite.asks_again(question):  # Open WebUI's "Add Details": the question before, again
        turns, question = again(turns, question)
    made = standalone(app, turns, question, request.use_cache, request.history)
    extractive = app.generator.extractive
    with_turns = tuple(turns) if request.history and not extractive else ()
    ask = AskRequest(
        made.question,
        request.overrides,
        use_cache=request.use_cache,
        history=with_turns,
        attached=attached,
        tools=request.tools,
        # a quote must answer this turn: its own words first, not the sentences the earlier answers gave
        turn=question if made.question != question else "",
        said=answers_given(turns) if extractive and made.how != "none" else (),
    )
    answer = app.ask(ask, on_sources, on_token)
    footer = "" if answer.tool_calls or wants_json(request.tools) else source_list(answer.citations)
    if footer and on_token is not None:
        on_token(footer)
    return ChatAnswer(
        content=answer.answer + footer,
        answer=answer,
        question=question,
        standalone=made.question,
        rewrite=made.how,
        rewrite_cache=made.cache,
        rewrite_usage=made.usage,
        usage=answer.usage + made.usage,
    )
