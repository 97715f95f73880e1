"""The prompt's fixed layout: a stable system block, then the numbered sources, then the question, last.

The system block holds everything that does not depend on the question (instructions, the citation rule,
the exact refusal sentence), so it is byte-identical for every question under one `PROMPT_VERSION`: a
provider's prompt cache (OpenAI's automatic prefix cache, Anthropic's `cache_control`, llama.cpp's
`cache_prompt`) reuses it. Change any byte of it and bump `PROMPT_VERSION`, which is part of the answer
cache key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from ragvps.records import cite_label

PROMPT_VERSION = "1"

REFUSAL = "I cannot answer this from the provided sources."

SYSTEM = (
    "You answer questions using only the numbered sources in the user's message.\n"
    "\n"
    "Rules:\n"
    "1. Use only what the sources say. Do not add outside knowledge.\n"
    "2. Cite the source of every claim by its number in square brackets, like [1], or [1][3] for several. "
    "Cite only numbers from the list of sources.\n"
    "3. If the sources do not contain the answer, reply with exactly this sentence and nothing else:\n"
    f"{REFUSAL}\n"
    "4. Be brief: a few sentences, in the language of the question."
)

QUESTION_LABEL = "Question: "


@dataclass(frozen=True)
class Source:
    """A retrieved chunk as it is sent to the model, numbered from 1 in the order sent."""

    number: int
    chunk_id: str
    path: str
    heading_path: str
    start: int
    end: int
    score: float
    text: str
    evidence: float = 0.0  # rank-independent relevance to the question, 0..1 (retrieve/evidence.py)
    pages: tuple[int, ...] = ()  # the PDF pages its text is on

    def block(self) -> str:
        where = cite_label(self.path, self.pages)
        head = f"[{self.number}] {where}" + (f" | {self.heading_path}" if self.heading_path else "")
        return f"{head}\n{self.text.strip()}"


Turn = tuple[str, str]  # (role "user" | "assistant", text): an earlier turn of a conversation


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    sources: tuple[Source, ...]
    question: str
    version: str = PROMPT_VERSION
    # Earlier turns of a conversation, sent between the system block and the sources: the prefix a
    # conversation shares from one turn to the next grows with it, which is what provider caches reuse.
    history: tuple[Turn, ...] = ()
    # A client's own messages (role, text), sent as they are: a chat client's background task passed through,
    # with no system block of ours and no sources.
    raw: tuple[Turn, ...] = ()
    # A chat client's tools, tool_choice and response_format (a JSON object's text), passed to the LLM as sent.
    tools: str = ""
    # The client's messages as it sent them (JSON text: content parts, tool calls and ids kept), for a
    # passed-through prompt to an OpenAI-compatible API.
    sent: str = ""
    # A follow-up's own words, when `question` was made standalone from the conversation, and what the earlier
    # answers said: an extractive answer quotes what answers this turn rather than the last answer's sentence.
    turn: str = ""
    said: tuple[str, ...] = ()

    def as_text(self) -> str:
        """The whole prompt as one text, for --show-prompt."""
        turns = "".join(f"--- {role} ---\n{text}\n" for role, text in self.history)
        return f"--- system ---\n{self.system}\n{turns}--- user ---\n{self.user}"

    def chat(self) -> list[dict[str, object]]:
        """Every message to send: the system block, the earlier turns, the sources and the question (or the
        client's own messages, as they came)."""
        if self.sent:
            return list(json.loads(self.sent))
        turns = self.raw or (("system", self.system), *((m["role"], m["content"]) for m in self.messages()))
        return [{"role": role, "content": text} for role, text in turns]

    def messages(self) -> list[dict[str, str]]:
        """The chat messages after the system block: the earlier turns, then the sources and the question."""
        return [{"role": role, "content": text} for role, text in self.history] + [
            {"role": "user", "content": self.user}
        ]


def system_block() -> str:
    """The stable prefix, the same bytes for every question (the model does not change it either)."""
    return SYSTEM


def user_message(question: str, sources: Sequence[Source]) -> str:
    blocks = "\n\n".join(s.block() for s in sources) if sources else "(no sources)"
    return f"Sources:\n\n{blocks}\n\n{QUESTION_LABEL}{question}"


def build(question: str, sources: Sequence[Source], history: Sequence[Turn] = ()) -> Prompt:
    """The prompt for `question` with these sources, numbered 1..n in the order given."""
    numbered = tuple(_numbered(s, i) for i, s in enumerate(sources, start=1))
    return Prompt(system_block(), user_message(question, numbered), numbered, question, history=tuple(history))


def passed_through(messages: Sequence[Turn]) -> Prompt:
    """A client's messages sent unchanged (its background task: a title, tags): no rules, no sources."""
    system = "\n\n".join(text for role, text in messages if role in ("system", "developer"))
    talk = [(role, text) for role, text in messages if role not in ("system", "developer")]
    if not talk:  # one instruction as a system message (LibreChat's title request): for Anthropic, the question
        return Prompt("", system, (), system, raw=tuple(messages))
    return Prompt(system, talk[-1][1], (), talk[-1][1], history=tuple(talk[:-1]), raw=tuple(messages))


def _numbered(source: Source, number: int) -> Source:
    if source.number == number:
        return source
    return Source(
        number,
        source.chunk_id,
        source.path,
        source.heading_path,
        source.start,
        source.end,
        source.score,
        source.text,
        source.evidence,
        source.pages,
    )
