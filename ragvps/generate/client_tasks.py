"""A chat client's background tasks, recognised from the text it sends and answered without an LLM.

Open WebUI sends its title, tags, follow-up, query, autocomplete, image-prompt and emoji tasks to the chat
model as ordinary completions (its `DEFAULT_*_PROMPT_TEMPLATE`s: `### Task:` ... `JSON format: { "title": ... }`
... `<chat_history>USER: ...`); LibreChat sends a title request (`Please generate a concise, 5-word-or-less
title ...` with `||>User:` / `||>Response:`, or `Provide a concise, 5-word-or-less title ...` with
`User: ...` / `AI: ...`). Such a request is not a question to search for: it is answered in the format it
asks for (JSON when it asks for JSON), from the conversation it carries. Pure functions over text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragvps.generate.client_context import split, without_file_list

TaskKind = Literal["title", "tags", "follow_ups", "queries", "autocomplete", "image_prompt", "emoji"]
Turn = tuple[str, str]

# The JSON key each Open WebUI template asks for, and the task it names (the first key found decides).
JSON_KEYS: dict[str, TaskKind] = {
    "title": "title",
    "tags": "tags",
    "follow_ups": "follow_ups",
    "queries": "queries",
    "text": "autocomplete",
    "prompt": "image_prompt",
}
_OWUI = re.compile(r"^\s*#{2,4}\s*Task:", re.IGNORECASE)
_JSON_KEY = re.compile(r"\{\s*\"(\w+)\"\s*:")
_EMOJI = re.compile(r"reflect the speaker's likely facial expression", re.IGNORECASE)
_LIBRECHAT_TITLE = re.compile(r"5-word-or-less title|title for (?:this|the) conversation|\|\|>Title:", re.IGNORECASE)
_HISTORY = re.compile(r"<chat_history>(.*?)</chat_history>", re.DOTALL | re.IGNORECASE)
_ROLE_LINE = re.compile(r"^(USER|ASSISTANT|AI|HUMAN|\|\|>User|\|\|>Response|User|Response)\s*:\s*(.*)$", re.IGNORECASE)
_TAG = re.compile(r"<(text|type)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_MESSAGE = re.compile(r"Message:\s*```(.*?)```", re.DOTALL)
_SOURCE_LINE = re.compile(r"^- \[\d+\] `([^`]+)`(?: \u203a (.+))?$", re.MULTILINE)
_WORD = re.compile(r"[^\W_][\w'-]*", re.UNICODE)
STOP = frozenset(
    re.findall(
        r"\S+",
        (
            "a an the and or but if of to in on at by for with from as is are was were be been being do does did i "
            "you we "
            "they he she it this that these those my your our their its what which who whom whose when where why how "
            "can "
            "could should would will shall may might must not no so than then there here about into over me us them "
            "any "
            "all each some such more most other only own same too very just also get got have has had please tell show "
            "explain want need know let lets i'm it's don't doesn't way ways thing things many much"
        ),
    )
)
FALLBACK_TITLE = "Knowledge Base Question"


@dataclass(frozen=True)
class Task:
    """A background task: what it asks for, the conversation it is about (oldest first), and its own text
    (autocomplete's unfinished text, the emoji task's message)."""

    kind: TaskKind
    wants_json: bool
    conversation: tuple[Turn, ...]
    text: str = ""


def detect(messages: Sequence[Turn]) -> Task | None:
    """The task these messages ask for, or None for an ordinary question. Looks at the last message only:
    a task is one instruction (user or system) carrying the conversation it is about."""
    if not messages:
        return None
    text = messages[-1][1]
    if _OWUI.match(text) or (_HISTORY.search(text) and _JSON_KEY.search(text)):
        return _open_webui(text)
    if _EMOJI.search(text):
        found = _MESSAGE.search(text)
        return Task("emoji", False, (), found.group(1).strip() if found else "")
    if _LIBRECHAT_TITLE.search(text) and (
        len(messages) == 1 or messages[-1][0] == "system" or "||>" in text or "\nAI:" in text
    ):
        return Task("title", "json" in text.lower(), tuple(history_turns(text)))
    return None


def _open_webui(text: str) -> Task | None:
    kind = next((JSON_KEYS[k] for k in _JSON_KEY.findall(text) if k in JSON_KEYS), None)
    if kind is None:
        return None
    found = _HISTORY.search(text)
    turns = tuple(history_turns(found.group(1))) if found else ()
    tags = {name.lower(): value.strip() for name, value in _TAG.findall(text)}
    return Task(kind, True, turns, tags.get("text", ""))


def history_turns(text: str) -> list[Turn]:
    """`USER: ...` / `ASSISTANT: ...` (Open WebUI), `||>User:` / `||>Response:` or `User:` / `AI:` (LibreChat)
    lines as (role, text) turns; a line without a role continues the turn before it."""
    turns: list[Turn] = []
    for line in text.splitlines():
        m = _ROLE_LINE.match(line.strip())
        if m:
            role = "user" if m.group(1).lower().lstrip("|>") in ("user", "human") else "assistant"
            turns.append((role, m.group(2)))
        elif turns:
            turns[-1] = (turns[-1][0], turns[-1][1] + "\n" + line)

    out = []
    for role, body in turns:
        text = _unquote(body.strip())
        if role == "user":  # the user's own words: no list of attached files, no RAG template around them
            text = without_file_list(text)
            found = split(text)
            text = found.question if found is not None else text
        out.append((role, text.strip()))
    return out


def _unquote(text: str) -> str:
    """LibreChat quotes each turn, the response as a JSON string."""
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            loaded = json.loads(text)
            return loaded if isinstance(loaded, str) else text[1:-1]
        except ValueError:
            return text[1:-1]
    return text


def first_question(task: Task) -> str:
    return next((text for role, text in task.conversation if role == "user" and text.strip()), task.text)


def last_question(task: Task) -> str:
    users = [text for role, text in task.conversation if role == "user" and text.strip()]
    return users[-1] if users else task.text


def cited_sections(task: Task) -> list[tuple[str, str]]:
    """(path, heading path) of each source listed under earlier answers (chat.source_list's lines)."""
    found: list[tuple[str, str]] = []
    for role, text in task.conversation:
        if role == "assistant":
            for path, heading in _SOURCE_LINE.findall(text):
                if (path, heading) not in found:
                    found.append((path, heading.replace(" \u203a ", " > ")))
    return found


def salient_words(text: str, most: int = 5) -> list[str]:
    """The question's content words, in order, without repeats or stop words."""
    seen: list[str] = []
    for word in _WORD.findall(text):
        if word.lower() not in STOP and word.lower() not in (w.lower() for w in seen) and len(word) > 1:
            seen.append(word)
    return seen[:most]


def title_of(question: str) -> str:
    """A 3-5 word title from the first question's salient words, in title case (code-like words kept)."""
    words = salient_words(question)
    if not words:
        return FALLBACK_TITLE
    return " ".join(w if not w.islower() or "_" in w or "-" in w else w.capitalize() for w in words)


def render(task: Task, values: Sequence[str]) -> str:
    """The task's answer in the format it asked for: `values` are the title, tags, questions, queries, text."""
    if task.kind == "emoji":
        return values[0] if values else "\U0001f642"
    key = {
        "follow_ups": "follow_ups",
        "tags": "tags",
        "queries": "queries",
        "autocomplete": "text",
        "image_prompt": "prompt",
        "title": "title",
    }[task.kind]
    many = task.kind in ("follow_ups", "tags", "queries")
    value: object = list(values) if many else (values[0] if values else "")
    if task.wants_json:
        return json.dumps({key: value}, ensure_ascii=False)
    return "\n".join(values) if many else str(value)


def follow_up(heading: str) -> str:
    """A follow-up question about a section, from its heading."""
    heading = heading.strip().rstrip("?.:")
    if heading[:1].isupper() and heading[1:2].islower():  # "Moving to ..." but not "API keys" or "`ragvps`"
        heading = heading[0].lower() + heading[1:]
    return f"What about {heading}?"
