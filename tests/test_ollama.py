"""The Ollama client against the in-process fake Ollama: protocol, retries, and the errors a user reads."""

from __future__ import annotations

import socket

import numpy as np
import pytest
from support.ollama_server import FakeOllama

from ragvps.embed import embed_documents, embed_queries
from ragvps.embed.local import LocalEmbedder
from ragvps.embed.models import model_spec
from ragvps.embed.ollama import OllamaEmbedder
from ragvps.errors import DimensionError, EmbedderError, InputTooLongError


def _client(fake: FakeOllama, model: str = "nomic-embed-text", **kw) -> tuple[OllamaEmbedder, list[float]]:
    sleeps: list[float] = []
    spec = model_spec(model)
    assert spec is not None
    return OllamaEmbedder(fake.url, spec, sleep=sleeps.append, **kw), sleeps


def test_embed_sends_one_batched_request_with_prefixes_and_returns_real_vectors(ollama):
    client, _ = _client(ollama)
    texts = ["PostgreSQL stores the vectors.", "The cat sat on the mat.", "pgvector adds a vector type."]
    vectors = embed_documents(client, texts)
    assert vectors.shape == (3, 768) and vectors.dtype == np.float32
    [body] = ollama.embed_requests()
    assert body == {
        "model": "nomic-embed-text",
        "input": ["search_document: " + t for t in texts],
        "truncate": False,
        "keep_alive": "30m",
    }
    local = LocalEmbedder(threads=1).embed(texts)
    # 768 = the 384-dim MiniLM vector twice, renormalised: cosines are MiniLM's own.
    np.testing.assert_allclose(vectors @ vectors.T, local @ local.T, atol=1e-4)
    query = embed_queries(client, ["where are vectors stored?"])[0]
    assert ollama.embed_requests()[-1]["input"] == ["search_query: where are vectors stored?"]
    assert int(np.argmax(vectors @ query)) != 1


def test_model_not_pulled_is_a_404_that_says_ollama_pull_and_is_not_retried(ollama):
    del ollama.models["nomic-embed-text"]
    client, sleeps = _client(ollama)
    with pytest.raises(EmbedderError, match=r"has no model nomic-embed-text: run `ollama pull nomic-embed-text`"):
        client.embed(["x"])
    assert len(ollama.embed_requests()) == 1 and sleeps == []


def test_input_too_long_is_a_400_and_is_not_retried(ollama):
    ollama.models["nomic-embed-text"].context_length = 16
    client, sleeps = _client(ollama)
    with pytest.raises(InputTooLongError, match="the input length exceeds the context length"):
        client.embed(["word " * 40])
    assert len(ollama.embed_requests()) == 1 and sleeps == []


def test_5xx_is_retried_with_backoff_then_succeeds(ollama):
    ollama.fail_with[:] = [500, 503]
    client, sleeps = _client(ollama, retries=3)
    assert client.embed(["hello"]).shape == (1, 768)
    assert len(ollama.embed_requests()) == 3 and sleeps == [0.5, 1.0]


def test_5xx_gives_up_after_the_retries_with_the_servers_answer(ollama):
    ollama.fail_with[:] = [500] * 5
    client, sleeps = _client(ollama, retries=2)
    with pytest.raises(EmbedderError, match=r"answered 500: injected failure \(after 3 attempts\)"):
        client.embed(["hello"])
    assert len(ollama.embed_requests()) == 3 and sleeps == [0.5, 1.0]


def test_backoff_is_capped(ollama):
    ollama.fail_with[:] = [502] * 9
    client, sleeps = _client(ollama, retries=8)
    with pytest.raises(EmbedderError):
        client.embed(["hello"])
    assert sleeps == [0.5, 1, 2, 4, 8, 16, 30, 30]


def test_unreachable_server_says_where_and_how_to_start_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens there
    spec = model_spec("nomic-embed-text")
    assert spec is not None
    sleeps: list[float] = []
    client = OllamaEmbedder(f"http://127.0.0.1:{port}", spec, retries=2, sleep=sleeps.append)
    with pytest.raises(EmbedderError) as info:
        client.embed(["x"])
    assert f"Ollama is not reachable at http://127.0.0.1:{port}" in str(info.value)
    assert "`ollama serve`" in str(info.value) and "RAGVPS_OLLAMA_URL" in str(info.value)
    assert sleeps == [0.5, 1.0]


def test_timeout_is_retried_and_named(ollama):
    ollama.latency = 0.5
    client, sleeps = _client(ollama, retries=1, timeout=0.1)
    with pytest.raises(EmbedderError, match=r"did not answer within 0.1 s"):
        client.embed(["x"])
    assert sleeps == [0.5]


def test_wrong_dimension_is_refused(ollama):
    ollama.models["nomic-embed-text"].dims = 1024
    client, _ = _client(ollama)
    with pytest.raises(DimensionError, match="returns 1024 dimensions, the index holds 768") as e:
        client.embed(["x"])
    assert (e.value.kind, e.value.http_status) == ("conflict", 409)  # the stored vectors disagree; waiting won't help


def test_show_reports_dimension_and_context_length(ollama):
    client, _ = _client(ollama)
    info = client.show()
    assert (info.architecture, info.dims, info.context_length) == ("nomic-bert", 768, 2048)
    assert "embedding" in info.capabilities
