"""ragvps's OpenAI-compatible generator against a real LLM server: llama.cpp's (support/llama_cpp_server.py, Gemma 3
270M). Slow and optional: skipped unless `llama-cpp-python[server]` and the model package are installed. It checks
the plumbing no stand-in proves: the answer streams in pieces, max_tokens cuts it (finish "length"), usage is
counted when the server sends none, and a refusal the model writes is detected. It does not judge answers (this
model cannot answer); the prefix cache's time to first token is measured by bench/llama_cache.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.llama_cpp_server import MODEL, llama_server, missing

from ragvps.config import Settings
from ragvps.generate import budget, citations
from ragvps.generate.llm.base import LLM
from ragvps.generate.prompt import REFUSAL, Source
from ragvps.generate.registry import make_generator

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing() is not None, reason=missing() or "")]

TEXTS = [
    "Backups run every night at 02:00. They are kept for 30 days on the second disk.",
    "The API key rotates when you run `ragvps keys rotate`. Old keys stop working after one hour.",
]
SOURCES = [Source(0, f"doc{i}.md#0", f"doc{i}.md", "Operations", 0, len(t), 0.03, t) for i, t in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with llama_server(tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


def generator(url: str, **flat: object) -> tuple[LLM, Settings]:
    settings = Settings.of(
        **(
            {
                "generator": "openai",
                "generator_url": url,
                "generator_model": MODEL,
                "generator_retries": 0,
                "context_window": 4096,
                "answer_reserve": 64,
            }
            | flat
        )
    )
    gen = make_generator(settings, lambda: None)  # type: ignore[arg-type,return-value]
    assert isinstance(gen, LLM)
    return gen, settings


def test_the_answer_streams_is_cut_at_max_tokens_and_its_usage_is_counted(llama: str):
    gen, settings = generator(llama, answer_reserve=24)
    fit = budget.fit("When do backups run?", SOURCES, settings.generate)
    pieces: list[tuple[float, str]] = []
    start = time.perf_counter()
    done = gen.generate(fit, lambda piece: pieces.append((time.perf_counter() - start, piece)))
    assert len(pieces) > 5 and "".join(p for _, p in pieces) == done.text  # token by token, as it came
    assert pieces[-1][0] - pieces[0][0] > 0.01  # spread over time, not one buffered write
    assert done.finish == "length"  # answer_reserve is the request's max_tokens
    u = done.usage
    assert u.counted and u.prompt_tokens == fit.prompt_tokens and 10 <= u.completion_tokens <= 40


def test_a_refusal_the_model_writes_is_detected(llama: str):
    """A base model continues a pattern: two earlier turns answered with the refusal make it the likely reply."""
    gen, settings = generator(llama)
    history = [
        ("user", "Who wrote the backup policy?"),
        ("assistant", REFUSAL),
        ("user", "What colour is the second disk?"),
        ("assistant", REFUSAL),
    ]
    fit = budget.fit("Which city is the data centre in?", SOURCES, settings.generate, history)
    reply = gen.generate(fit, lambda _: None).text
    assert citations.is_refusal(reply), reply
    parsed = citations.parse(reply + " [1]", list(fit.prompt.sources))
    assert not parsed.answered and parsed.citations == [] and parsed.text == REFUSAL
