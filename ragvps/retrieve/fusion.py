"""Fusing the two legs' ranked lists: reciprocal rank fusion over ranks, or a convex combination of their scores.
Pure functions over (chunk id, score) lists, best first."""

from __future__ import annotations

from collections.abc import Sequence

Scored = Sequence[tuple[int, float]]  # a leg's candidates, best first: (chunk id, the leg's own score)


def rrf(
    rankings: Sequence[Sequence[int]], k: int = 60, weights: Sequence[float] | None = None
) -> list[tuple[int, float]]:
    """Reciprocal rank fusion: score(d) = sum over rankings of weight / (k + rank), ranks from 1 (each weight 1
    unless given: `ragvps calibrate` fits the vector leg's against the keyword leg's on the corpus)."""
    scores: dict[int, float] = {}
    for ranking, weight in zip(rankings, weights or [1.0] * len(rankings), strict=True):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def convex(legs: Sequence[Scored], weights: Sequence[float] | None = None) -> list[tuple[int, float]]:
    """A convex combination of the legs' scores, each min-max normalised over its own candidates (the best 1, the
    last 0; a candidate a leg did not return counts 0 there): score(d) = sum of weight x normalised / sum of
    the weights of the legs that returned anything, so 0..1. Unlike RRF it keeps how far apart the candidates
    are: a leg sure of its first hit says so (Bruch et al., "An Analysis of Fusion Functions for Hybrid
    Retrieval", 2023; bench/calibrate_bench.py measures it)."""
    weights = list(weights or [1.0] * len(legs))
    total = sum(w for leg, w in zip(legs, weights, strict=True) if leg) or 1.0
    scores: dict[int, float] = {}
    for leg, weight in zip(legs, weights, strict=True):
        if not leg:
            continue
        values = [s for _, s in leg]
        lo, hi = min(values), max(values)
        for item, s in leg:
            share = (s - lo) / (hi - lo) if hi > lo else 1.0
            scores[item] = scores.get(item, 0.0) + weight * share / total
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def zscore(
    legs: Sequence[Scored], weights: Sequence[float] | None = None, missing: float | None = None
) -> list[tuple[int, float]]:
    """Each leg's scores as standard scores over its own candidates (how many deviations above their mean), a
    candidate a leg did not return taking that leg's lowest (or `missing`): a leg sure of its first hit (far above
    the rest) weighs more than a leg whose candidates all score alike, which is how a leg weak on this corpus or
    this question looks (issue 52). score(d) = sum of weight x standard score / sum of the weights."""
    weights = list(weights or [1.0] * len(legs))
    total = sum(w for leg, w in zip(legs, weights, strict=True) if leg) or 1.0
    standard: list[dict[int, float]] = []
    for leg in legs:
        values = [s for _, s in leg]
        if not values:
            standard.append({})
            continue
        mean = sum(values) / len(values)
        spread = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 or 1.0
        standard.append({item: (s - mean) / spread for item, s in leg})
    items = {item for z in standard for item in z}
    scores = {
        item: sum(
            w * z.get(item, min(z.values()) if missing is None else missing)
            for z, w in zip(standard, weights, strict=True)
            if z
        )
        / total
        for item in items
    }
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


def fuse(vector: Scored, keyword: Scored, how: str, rrf_k: int, vector_weight: float) -> list[tuple[int, float]]:
    """The two legs fused `how` ("rrf" or "convex"), the vector leg weighted `vector_weight` against the keyword
    leg's 1; an empty leg counts for nothing."""
    legs = [(leg, weight) for leg, weight in ((vector, vector_weight), (keyword, 1.0)) if leg]
    if how == "convex":
        return convex([leg for leg, _ in legs], [w for _, w in legs])
    if how == "zscore":
        return zscore([leg for leg, _ in legs], [w for _, w in legs])
    return rrf([[c for c, _ in leg] for leg, _ in legs], rrf_k, [w for _, w in legs])
