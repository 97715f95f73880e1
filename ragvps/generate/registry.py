"""The factory of each generator that ragvps.backends.GENERATORS names (setting `generator`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ragvps import backends
from ragvps.config import Settings
from ragvps.generate.llm.base import LLM

if TYPE_CHECKING:
    from ragvps.embed import Embedder
    from ragvps.generate.budget import Fit
    from ragvps.generate.llm.base import Generation
    from ragvps.generate.llm.tools import Unsupported


class Generator(Protocol):
    name: str
    model: str
    extractive: bool
    version: str  # part of the answer cache key

    def generate(self, fit: Fit, on_token: Callable[[str], None]) -> Generation:
        """The answer to the fitted prompt, each piece passed to `on_token` as it arrives."""
        ...

    def unsupported(self, tools: str) -> Unsupported | None:
        """The field of a chat client's tools, tool_choice and response_format (JSON text) this generator
        cannot honour, or None: checked before any work, answered as 400 unsupported_parameter."""
        ...


Factory = Callable[[Settings, Callable[[], "Embedder"]], Generator]


def extractive(settings: Settings, embedder: Callable[[], Embedder]) -> Generator:
    from ragvps.generate.extractive import Extractive  # lazy: a backend loads only when the settings choose it

    return Extractive(embedder, settings.embed.model_name)


def openai(settings: Settings, embedder: Callable[[], Embedder]) -> Generator:
    from ragvps.generate.llm.openai import OpenAIChat  # lazy: a backend loads only when the settings choose it

    return LLM(OpenAIChat(), settings.generate)


def anthropic(settings: Settings, embedder: Callable[[], Embedder]) -> Generator:
    # lazy: a backend loads only when the settings choose it
    from ragvps.generate.llm.anthropic import AnthropicMessages

    return LLM(AnthropicMessages(), settings.generate)


def ollama(settings: Settings, embedder: Callable[[], Embedder]) -> Generator:
    from ragvps.generate.llm.ollama import OllamaChat  # lazy: a backend loads only when the settings choose it

    return LLM(OllamaChat(settings.embed.keep_alive), settings.generate)


def make_generator(settings: Settings, embedder: Callable[[], Embedder]) -> Generator:
    factory: Factory = backends.GENERATORS[settings.generate.kind].load()
    return factory(settings, embedder)
