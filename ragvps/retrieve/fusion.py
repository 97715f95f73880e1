"""Reciprocal rank fusion: pure, over ranked lists of ids."""

from __future__ import annotations

from collections.abc import Sequence


def rrf(rankings: Sequence[Sequence[int]], k: int = 60,
        weights: Sequence[float] | None = None) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(d) = sum over rankings of weight / (k + rank), ranks from 1 (each weight 1
    unless given: `ragvps calibrate` fits the vector leg's against the keyword leg's on the corpus)."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))
