"""The token budget: which retrieved chunks go into the prompt, counted offline with tiktoken.

The prompt may take the context window minus the answer reserve. Chunks go in by rank while they fit, at
most `answer_chunks`; the prompt is counted again whole at the end, so a prompt the server would have to
truncate is never sent. What was left out is counted by reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragvps import tokens
from ragvps.config import GenerateSettings
from ragvps.errors import ConfigError, InputTooLongError
from ragvps.generate import prompt as layout
from ragvps.generate.prompt import Prompt, Source

# Chat formats wrap each message in a few tokens of their own (OpenAI documents 3 per message plus 3 to
# prime the reply); counted as a fixed margin so the estimate stays on the safe side.
MESSAGE_OVERHEAD = 12
DEFAULT_WINDOW = 8192

# (model name prefix, context window, tiktoken encoding); the first match wins, so longer prefixes first.
KNOWN_MODELS: tuple[tuple[str, int, str], ...] = (
    ("gpt-4o", 128_000, "o200k_base"),
    ("gpt-4.1", 1_047_576, "o200k_base"),
    ("gpt-5", 400_000, "o200k_base"),
    ("o1", 200_000, "o200k_base"),
    ("o3", 200_000, "o200k_base"),
    ("o4", 200_000, "o200k_base"),
    ("gpt-4-turbo", 128_000, "cl100k_base"),
    ("gpt-4", 8_192, "cl100k_base"),
    ("gpt-3.5-turbo", 16_385, "cl100k_base"),
    ("claude", 200_000, "cl100k_base"),
    ("llama3.1", 131_072, "cl100k_base"),
    ("llama3.2", 131_072, "cl100k_base"),
    ("llama3", 8_192, "cl100k_base"),
    ("qwen2.5", 32_768, "cl100k_base"),
    ("qwen3", 40_960, "cl100k_base"),
    ("mistral", 32_768, "cl100k_base"),
    ("gemma2", 8_192, "cl100k_base"),
    ("gemma3", 131_072, "cl100k_base"),
    ("phi3", 4_096, "cl100k_base"),
)


def _known(model: str) -> tuple[int, str] | None:
    name = model.lower().rsplit("/", 1)[-1]  # "openai/gpt-4o" on OpenRouter
    for prefix, window, encoding in KNOWN_MODELS:
        if name.startswith(prefix):
            return window, encoding
    return None


def encoding_for(settings: GenerateSettings) -> str:
    """The setting token_encoding, else the model's own encoding when known, else cl100k_base."""
    known = _known(settings.model)
    return settings.token_encoding or (known[1] if known else "cl100k_base")


def window_for(settings: GenerateSettings) -> int:
    """The setting context_window, else the model's known window, else 8,192."""
    known = _known(settings.model)
    return settings.context_window or (known[0] if known else DEFAULT_WINDOW)


def count_prompt(p: Prompt, encoding: str) -> int:
    turns = sum(tokens.count_llm(text, encoding) + MESSAGE_OVERHEAD // 3 for _, text in p.history)
    return tokens.count_llm(p.system, encoding) + tokens.count_llm(p.user, encoding) + MESSAGE_OVERHEAD + turns


@dataclass
class Fit:
    """The prompt that fits, what it costs, and what was left out (reason -> count)."""

    prompt: Prompt
    prompt_tokens: int
    system_tokens: int  # the stable prefix's share of prompt_tokens
    window: int
    reserve: int
    encoding: str
    settings: GenerateSettings  # the generator's settings with the request's temperature and answer length
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def room(self) -> int:
        return self.window - self.reserve


def fit(
    question: str, candidates: Sequence[Source], settings: GenerateSettings, history: Sequence[layout.Turn] = ()
) -> Fit:
    """Sources in rank order while they fit the window minus the answer reserve, at most answer_chunks.

    Earlier turns of a conversation may take half the room; the oldest go first when they would take more.
    """
    encoding, window, reserve = encoding_for(settings), window_for(settings), settings.answer_reserve
    room = window - reserve
    if room <= 0:
        raise ConfigError(
            f"answer_reserve={reserve} leaves no room for a prompt in context_window={window}: "
            "lower answer_reserve or raise context_window",
            settings=("answer_reserve", "context_window"),
        )
    left: Counter[str] = Counter()
    history = list(history)
    base = count_prompt(layout.build(question, [], history), encoding)
    while history and base > room // 2:
        history = history[2:] if len(history) > 1 else []  # a user turn and its answer go together
        left["history"] += 1
        base = count_prompt(layout.build(question, [], history), encoding)
    if base > room:
        raise InputTooLongError(
            f"the question alone takes {base:,} tokens, more than the {room:,} the prompt may use (context_window "
            f"{window:,} minus answer_reserve {reserve:,}): ask a shorter question or raise context_window",
            settings=("context_window", "answer_reserve"),
        )
    chosen: list[Source] = []
    used = base
    for i, cand in enumerate(candidates):
        if len(chosen) >= settings.answer_chunks:
            left["answer_chunks"] += len(candidates) - i
            break
        cost = tokens.count_llm("\n\n" + cand.block(), encoding)
        if used + cost > room:
            left["context_window"] += len(candidates) - i
            break
        chosen.append(cand)
        used += cost
    p = layout.build(question, chosen, history)
    n = count_prompt(p, encoding)
    while n > room and chosen:  # token merges at the joins can make the whole a little longer than its parts
        chosen.pop()
        left["context_window"] += 1
        p = layout.build(question, chosen, history)
        n = count_prompt(p, encoding)
    return Fit(
        prompt=p,
        prompt_tokens=n,
        system_tokens=tokens.count_llm(p.system, encoding),
        window=window,
        reserve=reserve,
        encoding=encoding,
        settings=settings,
        left_out=dict(left),
    )


def clip(text: str, settings: GenerateSettings, share: int = 2) -> str:
    """A client's own context cut to at most 1/share of the prompt's room, so it never crowds the rest out."""
    room = window_for(settings) - settings.answer_reserve
    return tokens.clip_llm(text, max(0, room // share), encoding_for(settings))


def as_is(p: Prompt, settings: GenerateSettings) -> Fit:
    """A prompt sent as it is (a chat client's own task, passed through): counted, refused when it cannot fit."""
    encoding, window, reserve = encoding_for(settings), window_for(settings), settings.answer_reserve
    n = count_prompt(p, encoding)
    if n > window - reserve:
        raise InputTooLongError(
            f"the request takes {n:,} tokens, more than the {window - reserve:,} the prompt may use "
            f"(context_window {window:,} minus answer_reserve {reserve:,}): send a shorter one",
            settings=("context_window", "answer_reserve"),
        )
    return Fit(
        prompt=p,
        prompt_tokens=n,
        system_tokens=tokens.count_llm(p.system, encoding),
        window=window,
        reserve=reserve,
        encoding=encoding,
        settings=settings,
    )
