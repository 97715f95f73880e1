"""Evidence: how well a chunk answers a query, from signals that do not depend on rank (pure functions).

The fused RRF score says only where a chunk ranked (the top hit always scores ~1/61), so it cannot tell a
relevant hit from the best of irrelevant ones. These signals can: the query-chunk cosine of the vector leg,
the share of the query's IDF mass the chunk contains (the keyword leg's view), and, when the sentences are
embedded (the extractive answer), the best query-sentence cosine. Each is mapped onto 0..1 and combined.
Calibrated with bench/answer_quality.py on MiniLM; other models map their own cosine range (ModelSpec.cosine_range,
docs/answers.md).
"""

from __future__ import annotations

# The cosine range mapped onto 0..1 (the model's own: ModelSpec.cosine_range): below its low end is unrelated
# text, above its high end as close as the model gets. MiniLM's is the default.
COSINE_RANGE = (0.15, 0.75)
WEIGHTS = {"cosine": 0.6, "terms": 0.4}
# A chunk holding a table row the question names by a specific first cell ("what does GET /health return?") answers
# it, whatever its cosine: a row is mostly its subject's words, not the question's verbs (issue 51).
NAMED_ROW = 0.8


def scaled(cosine: float, span: tuple[float, float] = COSINE_RANGE) -> float:
    low, high = span
    return min(1.0, max(0.0, (cosine - low) / (high - low)))


def combine(cosine: float | None, terms: float | None, span: tuple[float, float] = COSINE_RANGE) -> float:
    """One evidence figure in 0..1 from the signals that are known (a missing one does not count)."""
    parts = []
    if cosine is not None:
        parts.append((WEIGHTS["cosine"], scaled(cosine, span)))
    if terms is not None:
        parts.append((WEIGHTS["terms"], min(1.0, max(0.0, terms))))
    if not parts:
        return 0.0
    return round(sum(w * v for w, v in parts) / sum(w for w, _ in parts), 4)
