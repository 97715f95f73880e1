"""The Ollama client: /api/embed with retries on transient failures, /api/show for the model's facts."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
import numpy as np

from ragvps.embed.models import ModelInfo, dimension_message
from ragvps.errors import DimensionError, EmbedderError, HostDownError, InputTooLongError, MissingModelError
from ragvps.records import ModelSpec

log = logging.getLogger(__name__)

BACKOFF_BASE = 0.5  # seconds before the first retry; doubled each time
BACKOFF_CAP = 30.0


class OllamaEmbedder:
    """POST /api/embed on an Ollama server, with `truncate: false` so nothing is cut silently."""

    def __init__(
        self,
        url: str,
        spec: ModelSpec,
        keep_alive: str = "30m",
        *,
        timeout: float = 120.0,
        retries: int = 4,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.spec = spec
        self.url = url.rstrip("/")
        self.keep_alive = keep_alive
        self.timeout = timeout
        self.retries = retries
        self.sleep = sleep
        self.client = client or httpx.Client(timeout=httpx.Timeout(timeout, connect=5.0))
        self.requests = 0  # HTTP requests sent, retries included

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        body = {"model": self.spec.name, "input": list(texts), "truncate": False, "keep_alive": self.keep_alive}
        data = self._post("/api/embed", body)
        vectors = np.asarray(data.get("embeddings", []), dtype=np.float32)
        if vectors.ndim == 2 and vectors.shape[0] == len(texts) and vectors.shape[1] != self.spec.dims:
            if not self.spec.known:  # the dimension came from /api/show: the server contradicts itself
                raise DimensionError(
                    f"Ollama at {self.url} reported {self.spec.dims} dimensions for model {self.spec.name} "
                    f"(/api/show), but its embeddings have {vectors.shape[1]}; nothing was stored: check the "
                    "model on that server (`ollama show NAME`), or use a model ragvps knows"
                )
            raise DimensionError(dimension_message(self.spec.name, vectors.shape[1], self.spec.dims))
        if vectors.shape != (len(texts), self.spec.dims):
            raise EmbedderError(
                f"Ollama at {self.url} returned {vectors.shape[0] if vectors.ndim else 0} vectors "
                f"for {len(texts)} inputs from model {self.spec.name}"
            )
        return vectors

    def embed_questions(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # Ollama's /api/embed runs one graph

    def show(self) -> ModelInfo:
        """The model's architecture, dimension and context length, from /api/show."""
        data = self._post("/api/show", {"model": self.spec.name})
        info: dict[str, Any] = data.get("model_info") or {}
        arch = str(info.get("general.architecture") or (data.get("details") or {}).get("family") or "")

        def number(key: str) -> int | None:
            value = info.get(f"{arch}.{key}")
            return int(value) if isinstance(value, int | float) else None

        return ModelInfo(
            self.spec.name,
            arch,
            number("embedding_length"),
            number("context_length"),
            tuple(data.get("capabilities") or ()),
        )

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST with exponential backoff on connection errors, timeouts and 5xx; never on 4xx."""
        attempt = 0
        while True:
            self.requests += 1
            try:
                response = self.client.post(self.url + path, json=body)
            except httpx.TimeoutException as exc:
                short = f"did not answer within {self.timeout:g} s ({exc.__class__.__name__})"
                failure: str = (
                    f"Ollama at {self.url} {short}; it may be loading the model or overloaded: "
                    "raise the setting ollama_timeout or lower batch_size"
                )
            except httpx.TransportError as exc:
                short = f"not reachable ({exc.__class__.__name__})"
                failure = (
                    f"Ollama is not reachable at {self.url} ({exc.__class__.__name__}): start it with "
                    "`ollama serve`, or point RAGVPS_OLLAMA_URL (setting ollama_url) at it"
                )
            else:
                if response.status_code == 200:
                    found: dict[str, Any] = response.json()
                    return found
                if response.status_code < 500:
                    raise self._client_error(response)
                short = f"answered {response.status_code}: {_error(response)}"
                failure = f"Ollama at {self.url} {short}"
            if attempt >= self.retries:
                tries = f" (after {attempt + 1} attempts)" if attempt else ""
                raise HostDownError(failure + tries, short + tries)
            delay = min(BACKOFF_CAP, BACKOFF_BASE * 2**attempt)
            log.warning("%s; retrying in %.1f s", failure, delay)
            self.sleep(delay)
            attempt += 1

    def _client_error(self, response: httpx.Response) -> EmbedderError | InputTooLongError:
        message = _error(response)
        if response.status_code == 404:
            return MissingModelError(
                f"Ollama at {self.url} has no model {self.spec.name}: run `ollama pull {self.spec.name}`"
            )
        if response.status_code == 400 and ("context length" in message or "too long" in message):
            return InputTooLongError(f"Ollama refused an input for model {self.spec.name}: {message}")
        return EmbedderError(f"Ollama at {self.url} answered {response.status_code}: {message}")


def _error(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text[:200]
