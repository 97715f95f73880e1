"""The answer stage without a database: prompt layout, budget, citations, and the three LLM clients
against the stand-in server (streaming, usage, every fault)."""

from __future__ import annotations

import hashlib
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.llm_server import FakeLLM

from ragvps import tokens
from ragvps.config import Settings
from ragvps.errors import GeneratorError
from ragvps.generate import budget, citations
from ragvps.generate import prompt as layout
from ragvps.generate.llm.base import LLM
from ragvps.generate.prompt import REFUSAL, Source
from ragvps.generate.registry import make_generator

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-test-SECRET-4242"

TEXTS = [
    "Backups run every night at 02:00. They are kept for 30 days on the second disk.",
    "The API key rotates when you run `ragvps keys rotate`. Old keys stop working after one hour.",
    "Logs go to /var/log/ragvps. They rotate daily and are compressed after a week.",
]


def sources(texts: list[str] = TEXTS) -> list[Source]:
    return [
        Source(0, f"doc{i}.md#0", f"doc{i}.md", f"Doc {i} > Section", i * 10, i * 10 + len(t), 0.03 - i * 0.001, t)
        for i, t in enumerate(texts)
    ]


def gen_settings(fake: FakeLLM, kind: str = "openai", **flat: object) -> Settings:
    url = {"openai": fake.url + "/v1", "anthropic": fake.url, "ollama": fake.url}[kind]
    values: dict[str, object] = {
        "generator": kind,
        "generator_url": url,
        "generator_model": "test-model",
        "generator_api_key": KEY,
        "generator_retries": 2,
    }
    return Settings.of(**(values | flat))


def client(settings: Settings, waits: list[float] | None = None) -> LLM:
    gen = make_generator(settings, lambda: None)  # type: ignore[arg-type,return-value]
    assert isinstance(gen, LLM)
    gen.sleep = (waits if waits is not None else []).append
    return gen


def fit(question: str = "When do backups run?", settings: Settings | None = None) -> budget.Fit:
    return budget.fit(question, sources(), (settings or Settings()).generate)


# --- prompt ----------------------------------------------------------------------------------------


def test_system_block_is_byte_identical_across_questions_and_processes():
    a, b = fit("When do backups run?"), fit("Where do the logs go?")
    assert a.prompt.system.encode() == b.prompt.system.encode()
    assert REFUSAL in a.prompt.system
    code = (
        "import hashlib; from ragvps.generate import budget; from ragvps.config import Settings; "
        "print(hashlib.sha256(budget.fit('How are keys rotated?', [], Settings().generate)"
        ".prompt.system.encode()).hexdigest())"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout.strip()
    assert other == hashlib.sha256(a.prompt.system.encode()).hexdigest()


def test_question_appears_once_and_last():
    q = "Which disk holds the nightly backups?"
    p = fit(q).prompt
    whole = p.system + p.user
    assert whole.count(q) == 1
    assert p.user.endswith(q)
    assert q not in p.system
    numbers = [s.number for s in p.sources]
    assert numbers == [1, 2, 3]
    assert all(f"[{s.number}] {s.path} | {s.heading_path}\n" in p.user for s in p.sources)


# --- budget ----------------------------------------------------------------------------------------


def test_budget_stops_at_answer_chunks_and_counts_what_is_left_out():
    s = Settings.of(answer_chunks=2).generate
    f = budget.fit("When do backups run?", sources(), s)
    assert [x.chunk_id for x in f.prompt.sources] == ["doc0.md#0", "doc1.md#0"]
    assert f.left_out == {"answer_chunks": 1}


def test_budget_never_exceeds_the_window_minus_the_reserve():
    long = [("word " * 300).strip() + "." for _ in range(10)]
    base = budget.count_prompt(layout.build("q?", []), "cl100k_base")
    window = base + 512 + 700  # room for two 300-word chunks, not three
    s = Settings.of(context_window=window, answer_reserve=512, answer_chunks=8).generate
    f = budget.fit("q?", sources(long), s)
    assert f.prompt_tokens <= window - 512
    assert f.prompt_tokens == budget.count_prompt(f.prompt, "cl100k_base")
    assert len(f.prompt.sources) == 2
    assert f.left_out == {"context_window": 8}


def test_encoding_and_window_by_model_or_setting():
    assert budget.encoding_for(Settings.of(generator_model="gpt-4o-mini").generate) == "o200k_base"
    assert budget.encoding_for(Settings.of(generator_model="llama3.1:8b").generate) == "cl100k_base"
    assert (
        budget.encoding_for(Settings.of(generator_model="gpt-4o", token_encoding="cl100k_base").generate)
        == "cl100k_base"
    )
    assert budget.window_for(Settings.of(generator_model="claude-sonnet-4-5").generate) == 200_000
    assert budget.window_for(Settings.of(generator_model="unknown").generate) == budget.DEFAULT_WINDOW
    assert budget.window_for(Settings.of(context_window=4096).generate) == 4096


# --- citations -------------------------------------------------------------------------------------


def test_citations_map_to_sources_and_invalid_markers_are_dropped():
    sent = layout.build("q", sources()).sources
    parsed = citations.parse("Backups run at 02:00 [1]. Keys rotate [2, 9]. Nonsense [0] and [17].", sent)
    assert [c.number for c in parsed.citations] == [1, 2]
    assert parsed.citations[1].chunk_id == "doc1.md#0" and parsed.citations[1].path == "doc1.md"
    assert (parsed.citations[0].start, parsed.citations[0].end) == (sent[0].start, sent[0].end)
    assert parsed.invalid == 3
    assert "[9]" not in parsed.text and "[17]" not in parsed.text and "[0]" not in parsed.text
    assert "[2]" in parsed.text and parsed.answered


def test_refusal_sentence_is_detected():
    assert not citations.parse(REFUSAL, []).answered
    assert not citations.parse(f"  {REFUSAL.replace(' ', '  ')}\n", []).answered
    assert citations.parse("Backups run nightly [1].", layout.build("q", sources()).sources).answered


# --- the three clients -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_each_provider_streams_an_answer_with_usage(llm: FakeLLM, kind: str):
    s = gen_settings(llm, kind)
    gen = client(s)
    pieces: list[str] = []
    f = fit("When do backups run?", s)
    first = gen.generate(f, pieces.append)
    assert first.text == "".join(pieces) and len(pieces) > 3
    assert first.text.startswith("Backups run every night at 02:00.") and first.text.endswith("[1]")
    served = llm.llm_requests()[-1]
    assert served["prompt_tokens"] + budget.MESSAGE_OVERHEAD >= f.prompt_tokens - 2  # the server's own count
    assert served["prompt_tokens"] <= f.room
    assert first.usage.prompt_tokens == served["prompt_tokens"]
    assert first.usage.completion_tokens == len(pieces)
    second = gen.generate(fit("Where do the logs go?", s), lambda _: None)
    system_tokens = tokens.count_llm(f.prompt.system)
    if kind == "openai":
        assert first.usage.cached_tokens == 0 and second.usage.cached_tokens == system_tokens
        assert served["body"]["stream_options"] == {"include_usage": True}
        assert served["headers"]["authorization"] == f"Bearer {KEY}"
    elif kind == "anthropic":
        assert first.usage.cache_creation_tokens > 0 and second.usage.cached_tokens == system_tokens
        assert served["body"]["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert served["headers"]["x-api-key"] == KEY and "anthropic-version" in served["headers"]
    else:
        assert served["body"]["options"]["num_ctx"] == f.window
        assert served["body"]["keep_alive"] and served["path"] == "/api/chat"


def test_401_names_the_key_setting_and_never_shows_the_key(llm: FakeLLM):
    llm.fail(401, f"Incorrect API key provided: {KEY}")
    with pytest.raises(GeneratorError) as e:
        client(gen_settings(llm)).generate(fit(), lambda _: None)
    assert e.value.kind == "config" and "refused the API key" in str(e.value)
    assert "generator_api_key" in str(e.value) and KEY not in str(e.value)
    assert len(llm.llm_requests()) == 1  # not retried


def test_404_unknown_model(llm: FakeLLM):
    llm.fail(404, "The model `test-model` does not exist or you do not have access to it.")
    with pytest.raises(GeneratorError, match="has no model 'test-model'.*generator_model"):
        client(gen_settings(llm)).generate(fit(), lambda _: None)


def test_429_is_retried_after_the_wait_it_asks_for(llm: FakeLLM):
    llm.fail(429, "slow down", retry_after="3")
    waits: list[float] = []
    out = client(gen_settings(llm), waits).generate(fit(), lambda _: None)
    assert out.text and waits == [3.0] and len(llm.llm_requests()) == 2


def test_5xx_is_retried_with_backoff_then_fails_in_one_line(llm: FakeLLM):
    for _ in range(3):
        llm.fail(503, "overloaded")
    waits: list[float] = []
    with pytest.raises(GeneratorError, match="HTTP 503.*3 attempt.*generator_retries") as e:
        client(gen_settings(llm), waits).generate(fit(), lambda _: None)
    assert e.value.kind == "unavailable" and "\n" not in str(e.value)
    assert waits == [0.5, 1.0] and len(llm.llm_requests()) == 3
    llm.fail(500)
    assert client(gen_settings(llm)).generate(fit(), lambda _: None).text  # one failure, then an answer


def test_timeout_names_the_setting(llm: FakeLLM):
    llm.slow = 1.5
    with pytest.raises(GeneratorError, match="generator_timeout=1"):
        client(gen_settings(llm, generator_timeout=1, generator_retries=0)).generate(fit(), lambda _: None)


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_context_length_error_names_the_budget_setting(llm: FakeLLM, kind: str):
    llm.context_limit = 50
    with pytest.raises(GeneratorError, match="context_window") as e:
        client(gen_settings(llm, kind)).generate(fit(), lambda _: None)
    assert e.value.kind == "too_long" and len(llm.llm_requests()) == 1


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
def test_a_stream_cut_mid_answer_is_an_error(llm: FakeLLM, kind: str):
    llm.cut_after = 3
    got: list[str] = []
    with pytest.raises(GeneratorError, match="mid-answer|broke"):
        client(gen_settings(llm, kind)).generate(fit(), got.append)
    assert len(got) == 3


def test_a_callback_that_raises_closes_the_upstream_connection(llm: FakeLLM):
    llm.reply = " ".join(f"word{i}" for i in range(400)) + " [1]"
    llm.piece_delay = 0.005

    def stop(piece: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        client(gen_settings(llm)).generate(fit(), stop)
    for _ in range(200):  # the server notices on its next writes
        if llm.disconnected:
            break
        import time

        time.sleep(0.01)
    assert llm.disconnected and llm.pieces_sent < 400


def test_connection_refused_names_the_url():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = Settings.of(
        generator="openai", generator_url=f"http://127.0.0.1:{port}/v1", generator_model="m", generator_retries=1
    )
    with pytest.raises(GeneratorError, match=f"cannot connect to openai at http://127.0.0.1:{port}/v1.*generator_url"):
        client(s).generate(fit(), lambda _: None)


def test_no_model_configured_is_a_config_error(llm: FakeLLM):
    s = Settings.of(generator="openai", generator_url=llm.url + "/v1")
    with pytest.raises(GeneratorError, match="generator_model"):
        client(s).generate(fit(), lambda _: None)
    assert not llm.llm_requests()
