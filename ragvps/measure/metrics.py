"""Retrieval metrics over ranked document ids: recall@k, MRR@k, nDCG@k (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def dedupe(ranked: Sequence[str]) -> list[str]:
    """Documents in the order of their best chunk: a document's rank is that of its first chunk."""
    return list(dict.fromkeys(ranked))


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    hits = {d for d in ranked[:k] if relevant.get(d, 0) > 0}
    wanted = sum(1 for g in relevant.values() if g > 0)
    return len(hits) / wanted if wanted else 0.0


def mrr_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    for rank, d in enumerate(ranked[:k], start=1):
        if relevant.get(d, 0) > 0:
            return 1.0 / rank
    return 0.0


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """nDCG with linear gains, as BEIR (pytrec_eval) computes it."""
    dcg = sum(relevant.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevant.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def first_hit(ranked: Sequence[str], relevant: Mapping[str, int]) -> int | None:
    """1-based rank of the first relevant document, or None."""
    for rank, d in enumerate(ranked, start=1):
        if relevant.get(d, 0) > 0:
            return rank
    return None
