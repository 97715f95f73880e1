"""A small in-process Ollama: /api/embed, /api/show and /api/tags, with Ollama's error answers.

It serves real vectors from the local MiniLM model. A model with more dimensions than 384 gets the
MiniLM vector repeated to its size and L2-normalised again (for 768 = 2 x 384 cosines are unchanged),
so retrieval through the Ollama path gives real results. Known task prefixes are stripped before
embedding, as a model trained with them would treat them; the raw inputs are recorded for tests.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from support import waiting

# nomic's, mxbai's and e5's ("passage: ", "query: ", a document prefix tests/test_reindex.py configures): a text
# with a prefix is embedded as the same text without it, which the process embedded already (ragvps/embed/local.py's
# memo), so a test of a prefix does not run the model over the whole corpus again.
PREFIXES = (
    "search_document: ",
    "search_query: ",
    "Represent this sentence for searching relevant passages: ",
    "passage: ",
    "query: ",
)


@dataclass
class FakeModel:
    dims: int
    context_length: int  # what /api/show reports
    architecture: str = "bert"
    num_ctx: int | None = None  # the runner's real limit, when it is below the reported context (Ollama's num_ctx)
    capabilities: tuple[str, ...] = ("embedding",)
    reported_dims: int | None = None  # what /api/show says, when it is not what /api/embed returns


DEFAULT_MODELS = {
    "nomic-embed-text": FakeModel(768, 2048, "nomic-bert"),
    "all-minilm": FakeModel(384, 256, "bert"),
    "mxbai-embed-large": FakeModel(1024, 512, "bert"),
}


def _default_models() -> dict[str, FakeModel]:
    return {name: dataclasses.replace(m) for name, m in DEFAULT_MODELS.items()}


def _hash_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(384).astype(np.float32)


@functools.cache
def _local():  # type: ignore[no-untyped-def]
    from ragvps.embed.local import LocalEmbedder

    return LocalEmbedder(threads=1)


@dataclass
class FakeOllama:
    models: dict[str, FakeModel] = field(default_factory=lambda: _default_models())
    latency: float = 0.0  # seconds added to every /api/embed request
    delay_per_input: float = 0.0  # seconds per input, one input after another on one lane (as Ollama embeds)
    host: str = "127.0.0.1"  # the address to listen on
    port: int = 0  # 0: any free port (a restarted server can take its old one)
    die_after_inputs: int | None = None  # then drop the request without an answer and stop listening (a kill)
    fail_with: list[int] = field(default_factory=list)  # statuses for the next /api/embed requests
    fail_after_inputs: int | None = None  # then answer 503 to every /api/embed (a dying server)
    real_vectors: bool = True  # False: cheap deterministic vectors from the text's hash (benchmarks of plumbing)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)  # every /api/embed input embedded
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _lane: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self.port, "start() the server first"
        return f"http://{self.host}:{self.port}"

    def embed_requests(self) -> list[dict[str, Any]]:
        return [body for path, body in self.requests if path == "/api/embed"]

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.inputs.clear()
            self.fail_with.clear()
            self.fail_after_inputs = None
            self.die_after_inputs = None
            self.latency = 0.0
            self.delay_per_input = 0.0
            self.real_vectors = True
            self.models = _default_models()

    def start(self) -> FakeOllama:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/api/tags":
                    self._send(200, {"models": [{"name": f"{m}:latest", "model": f"{m}:latest"} for m in fake.models]})
                else:
                    self._send(404, {"error": "404 page not found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": "invalid JSON"})
                    return
                status, answer = fake.answer(self.path, body)
                if status == 0:  # killed: no answer at all
                    self.close_connection = True
                    self.connection.close()
                    return
                self._send(status, answer)

            def _send(self, status: int, answer: dict[str, Any]) -> None:
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        server = self._server
        if server is not None:
            server.shutdown()
            server.server_close()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def wait_stopped(self, timeout: float = 10.0) -> None:
        deadline = waiting.deadline(timeout)
        while self.running and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self.running, "the server did not stop"

    def _die(self) -> None:
        threading.Thread(target=self.stop, daemon=True).start()

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((path, body))
        name = str(body.get("model") or body.get("name") or "")
        model = self.models.get(name) or self.models.get(name.removesuffix(":latest"))
        if path not in ("/api/embed", "/api/show"):
            return 404, {"error": "404 page not found"}
        if model is None:
            return 404, {"error": f'model "{name}" not found, try pulling it first'}
        if path == "/api/show":
            arch = model.architecture
            dims = model.reported_dims or model.dims
            return 200, {
                "details": {"family": arch, "format": "gguf"},
                "capabilities": list(model.capabilities),
                "model_info": {
                    "general.architecture": arch,
                    f"{arch}.embedding_length": dims,
                    f"{arch}.context_length": model.context_length,
                },
            }
        return self._embed(name, model, body)

    def _embed(self, name: str, model: FakeModel, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        from ragvps import tokens

        start = time.perf_counter()
        if self.latency:
            time.sleep(self.latency)
        texts = body.get("input", [])
        texts = [texts] if isinstance(texts, str) else list(texts)
        with self._lock:
            if self.fail_with:
                return self.fail_with.pop(0), {"error": "injected failure"}
            if self.fail_after_inputs is not None and len(self.inputs) >= self.fail_after_inputs:
                return 503, {"error": "server is shutting down"}
            if self.die_after_inputs is not None and len(self.inputs) + len(texts) > self.die_after_inputs:
                self._die()
                return 0, {}
        counts = [n + 2 for n in tokens.count_many(texts)] if texts else []
        limit = min(model.context_length, model.num_ctx or model.context_length)
        if body.get("truncate") is False and any(n > limit for n in counts):
            return 400, {"error": "the input length exceeds the context length"}
        if self.delay_per_input:
            with self._lane:  # one lane: requests wait for each other, inputs run one after another
                time.sleep(self.delay_per_input * len(texts))
        stripped = [next((t[len(p) :] for p in PREFIXES if t.startswith(p)), t) for t in texts]
        if not texts:
            vectors = np.zeros((0, 384), dtype=np.float32)
        elif self.real_vectors:
            vectors = _local().embed(stripped)
        else:
            vectors = np.stack([_hash_vector(t) for t in stripped])
        if model.dims != vectors.shape[1]:
            reps = -(-model.dims // vectors.shape[1])
            vectors = np.tile(vectors, (1, reps))[:, : model.dims]
            vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        with self._lock:
            self.inputs.extend(texts)
        took = int((time.perf_counter() - start) * 1e9)
        return 200, {
            "model": name,
            "embeddings": vectors.tolist(),
            "total_duration": took,
            "load_duration": 0,
            "prompt_eval_count": sum(counts),
        }


@pytest.fixture(scope="module")
def ollama_server() -> Iterator[FakeOllama]:
    """A fake Ollama for the test module (import `ollama` and `ollama_server` into it)."""
    fake = FakeOllama().start()
    yield fake
    fake.stop()


@pytest.fixture
def ollama(ollama_server: FakeOllama) -> FakeOllama:
    """The module's fake Ollama with fresh counters, models and no faults."""
    ollama_server.reset()
    return ollama_server
