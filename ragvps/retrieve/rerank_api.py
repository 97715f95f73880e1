"""The reranker `api`: scores from a rerank API (no weights ship on PyPI); reranking.py orders hits by them.

Two shapes: the common one (Cohere, Jina, llama.cpp server) `POST /v1/rerank` or `/v2/rerank`
`{model, query, documents, top_n}` -> `{"results": [{"index", "relevance_score"}]}`, and TEI's
`POST /rerank {query, texts}` -> `[{"index", "score"}]`. `reranker_url` is the endpoint; a base URL
without a rerank path gets `/v1/rerank`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from ragvps.config import RerankSettings
from ragvps.errors import ConfigError, RerankerError

RETRIES = 2


class ApiReranker:
    def __init__(self, settings: RerankSettings):
        if not settings.url:
            raise ConfigError(
                "reranker=api needs reranker_url (RAGVPS_RERANKER_URL), e.g. http://127.0.0.1:8080/v1/rerank",
                settings=("reranker_url",),
            )
        self.settings = settings
        path = urlsplit(settings.url).path.rstrip("/")
        self.url = settings.url.rstrip("/") + ("" if path.endswith("/rerank") else "/v1/rerank")
        self.tei = not urlsplit(self.url).path.rstrip("/").endswith(("/v1/rerank", "/v2/rerank"))

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text, in the order given."""
        body: dict[str, object] = (
            {"query": query, "texts": list(texts)}
            if self.tei
            else {"model": self.settings.model, "query": query, "documents": list(texts), "top_n": len(texts)}
        )
        headers = {"Authorization": f"Bearer {self.settings.api_key}"} if self.settings.api_key else {}
        for attempt in range(RETRIES + 1):
            try:
                response = httpx.post(self.url, json=body, headers=headers, timeout=float(self.settings.timeout))
            except httpx.TransportError as exc:
                if attempt == RETRIES:
                    raise RerankerError(
                        f"cannot reach the reranker at {self.url} ({type(exc).__name__}): check "
                        "reranker_url and that it runs",
                        settings=("reranker_url",),
                    ) from None
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code in (429, 502, 503, 504) and attempt < RETRIES:
                time.sleep(0.5 * 2**attempt)
                continue
            if response.status_code in (401, 403):
                raise RerankerError(
                    f"the reranker at {self.url} refused the API key (HTTP {response.status_code}): "
                    "check reranker_api_key",
                    kind="config",
                    settings=("reranker_api_key",),
                )
            if response.status_code != 200:
                raise RerankerError(
                    f"the reranker at {self.url} answered HTTP {response.status_code}: "
                    f"{' '.join(response.text.split())[:200]}",
                    settings=("reranker_url",),
                )
            return self._parse(response.json(), len(texts))
        raise AssertionError("unreachable")  # pragma: no cover

    def _parse(self, data: object, n: int) -> list[float]:
        rows = data.get("results") if isinstance(data, dict) else data
        if not isinstance(rows, list):
            raise RerankerError(f"the reranker at {self.url} answered without results: {str(data)[:200]}")
        scores = [float("-inf")] * n
        for row in rows:
            index = int(row["index"])
            if 0 <= index < n:
                scores[index] = float(row.get("relevance_score", row.get("score", float("-inf"))))
        return scores
