"""Context a chat client retrieved or attached itself, taken out of the message it came in.

Open WebUI puts its RAG template around an attached file's text (or its own retrieval's) in the last user
message (or the system message): `### Task: ... <context><source id="1" name="f.pdf">TEXT</source></context>`,
the question before it or, in older releases, inside `<user_query>`. ragvps retrieves with the question alone;
the client's text becomes one more source of the prompt (generate/budget.py keeps it within the window).
With native function calling it also puts an `<attached_files><file .../></attached_files>` list before a user
message's text (utils/middleware.py add_file_context), in chats and in the history its tasks quote: markup, not
words of the conversation (`without_file_list`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_CONTEXT = re.compile(r"<context>(.*?)</context>", re.DOTALL | re.IGNORECASE)
_QUERY = re.compile(r"<user_query>(.*?)</user_query>", re.DOTALL | re.IGNORECASE)
_SOURCE = re.compile(r"<source\b([^>]*)>(.*?)</source>", re.DOTALL | re.IGNORECASE)
_ATTR = re.compile(r"(\w+)\s*=\s*\"([^\"]*)\"")
_INNER = re.compile(r"<source_id>(.*?)</source_id>|</?source_context>", re.DOTALL | re.IGNORECASE)
_TEMPLATE_START = re.compile(r"^\s*#{2,4}\s*Task:", re.MULTILINE | re.IGNORECASE)
_FILE_LIST = re.compile(r"<attached_files>.*?</attached_files>\s*", re.DOTALL | re.IGNORECASE)
DEFAULT_NAME = "attached context"


def without_file_list(text: str) -> str:
    """The text without Open WebUI's `<attached_files>` list of the files attached to it."""
    return _FILE_LIST.sub("", text) if "<attached_files>" in text.lower() else text


@dataclass(frozen=True)
class Attached:
    """One piece of the client's context: its name (the file's, when the client says) and its text."""

    name: str
    text: str


@dataclass(frozen=True)
class Split:
    question: str  # the message without the template ("" when the message was only the template)
    attached: tuple[Attached, ...]


def split(message: str) -> Split | None:
    """The question and the client's context, or None when the message carries no `<context>` block."""
    found = _CONTEXT.search(message)
    if found is None:
        return None
    attached = tuple(_pieces(found.group(1)))
    asked = _QUERY.search(message)
    if asked:
        return Split(asked.group(1).strip(), attached)
    before, after = message[: found.start()], message[found.end() :]
    start = _TEMPLATE_START.search(before)
    if start:
        before = before[: start.start()]
    return Split((before.strip() + "\n" + after.strip()).strip(), attached)


def _pieces(context: str) -> list[Attached]:
    pieces = []
    for attrs, body in _SOURCE.findall(context):
        named = dict(_ATTR.findall(attrs))
        inner_id = re.search(r"<source_id>(.*?)</source_id>", body, re.DOTALL)
        name = named.get("name") or (inner_id.group(1).strip() if inner_id else "") or DEFAULT_NAME
        text = _INNER.sub("", body).strip()
        if text:
            pieces.append(Attached(name, text))
    if not pieces and context.strip():
        pieces.append(Attached(DEFAULT_NAME, context.strip()))
    return pieces


def joined(attached: tuple[Attached, ...]) -> Attached | None:
    """The client's context as one source: its first name, every piece's text."""
    if not attached:
        return None
    names = list(dict.fromkeys(a.name for a in attached))
    name = names[0] if len(names) == 1 else f"{names[0]} (+{len(names) - 1} more)"
    return Attached(name, "\n\n".join(a.text for a in attached))
