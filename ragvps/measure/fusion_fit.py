"""The fusion `ragvps calibrate` fits: how the two legs are fused (RRF by rank, or a combination of their min-max
normalised or standard scores) and the vector leg's weight, chosen on questions the knowledge base itself gives
(issue 33).

The questions (made without an LLM, never from gold): a sampled chunk's first sentence of six words or more, asked
whole, with that chunk dropped from both legs' results; its gold is the same document's other chunks. A person's
question shares some words with the passage that answers it, not all, and the sentence left out of the index is
what makes it so here: a question made of a chunk's own rarest words, asked of that chunk, favours the keyword leg
(its fit leaned to it on every corpus and then lost on their gold: -0.0067 SciFact nDCG@10). With gold questions
(`--gold`), those are used instead.

Choosing. Every candidate's MRR@10 is measured on the same questions. The fusion in force is kept when it is
within one standard error (of the paired per-question difference) of the best; otherwise, of the candidates within
one standard error of the best, the one nearest equal weights, then the higher MRR (the one-standard-error rule:
between fits the questions cannot tell apart, the simplest). bench/calibrate_bench.py measures the result on each
corpus's gold."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from ragvps.config import Settings
from ragvps.db.sql import queries
from ragvps.db.store import EmbeddingSet
from ragvps.retrieve import fusion
from ragvps.retrieve.fusion import Scored
from ragvps.retrieve.search import keyword_scored, vector_scale, vector_scored
from ragvps.text import sentences

GRID_K = (10, 20, 40, 60, 100)
GRID_WEIGHT = (0.25, 0.5, 0.67, 0.8, 1.0, 1.25, 1.5, 2.0, 4.0)  # the vector leg's, against the keyword leg's 1
MIN_QUESTIONS = 20  # fewer: the fusion in force is kept (e.g. a corpus of one-chunk documents)
MIN_WORDS = 6


@dataclass(frozen=True)
class FusionProbe:
    question: str
    gold: frozenset[int]  # the chunks that answer it
    dropped: int | None = None  # the chunk it was made from, taken out of both legs' results


@dataclass(frozen=True)
class Legs:
    probe: FusionProbe
    vector: tuple[tuple[int, float], ...]
    keyword: tuple[tuple[int, float], ...]
    scale: float = 1.0  # the model's own vector weight (search.vector_scale), which a candidate's multiplies


@dataclass(frozen=True)
class Candidate:
    fusion: str  # rrf | convex | zscore
    rrf_k: int
    vector_weight: float

    def ranks(self, legs: Legs) -> list[int]:
        weight = self.vector_weight * legs.scale
        return [c for c, _ in fusion.fuse(legs.vector, legs.keyword, self.fusion, self.rrf_k, weight)]


@dataclass(frozen=True)
class Fusion:
    fusion: str  # rrf | convex | zscore
    rrf_k: int
    vector_weight: float
    mrr: float  # MRR@10 of the questions' gold chunks with this fusion
    current_mrr: float  # ... with the fusion in force
    questions: int  # how many questions it was fitted on
    source: str  # "gold", "sentences" (made from the chunks), or "none" (too few: the fusion in force kept)
    applies: bool  # --apply keeps it

    def summary(self) -> str:
        how = f"{self.fusion}, vector leg weight {self.vector_weight:g} (keyword 1)" + (
            f", rrf_k {self.rrf_k}" if self.fusion == "rrf" else ""
        )
        if self.source == "none":
            return (
                f"kept as it is ({how}): fewer than {MIN_QUESTIONS} questions to fit it on (sentences of documents "
                "of two chunks or more)"
            )
        on = "your gold questions" if self.source == "gold" else "sentences of the chunks, each asked without its chunk"
        return f"{how}: MRR@10 {self.mrr:.3f} against {self.current_mrr:.3f} in force, on {self.questions} {on}"

    def same_as(self, settings: Settings) -> bool:
        s = settings.search
        return (self.fusion, self.rrf_k, self.vector_weight) == (s.fusion, s.rrf_k, s.vector_weight)


def sentence_probes(conn: psycopg.Connection, n: int, seed: str = "") -> list[FusionProbe]:
    """Up to `n` questions: a sampled chunk's first sentence of MIN_WORDS words or more, its document's other chunks
    as gold (documents of one chunk give none)."""
    rows = conn.execute(queries("inspect.sql")["fusion_chunks"], {"n": n * 2, "seed": seed}).fetchall()
    found = []
    for chunk_id, text, siblings in rows:
        question = next(
            (text[a:b].strip() for a, b in sentences(text, 0, len(text)) if len(text[a:b].split()) >= MIN_WORDS), None
        )
        if question:
            found.append(FusionProbe(question, frozenset(int(s) for s in siblings), int(chunk_id)))
        if len(found) >= n:
            break
    return found


def observe(
    conn: psycopg.Connection, eset: EmbeddingSet, settings: Settings, probes: Sequence[FusionProbe], vectors: np.ndarray
) -> Iterator[Legs]:
    """Both legs' scored candidates for each question (the chunk it was made from dropped)."""
    scale = vector_scale(eset.model)
    for probe, vector in zip(probes, vectors, strict=True):
        with conn.transaction():
            vec = vector_scored(conn, eset, vector, settings)
            kw = keyword_scored(conn, probe.question, settings)
        yield Legs(probe, _without(vec, probe.dropped), _without(kw, probe.dropped), scale)


def _without(leg: Scored, chunk: int | None) -> tuple[tuple[int, float], ...]:
    return tuple((c, s) for c, s in leg if c != chunk)


def reciprocal_ranks(candidate: Candidate, observed: Sequence[Legs]) -> np.ndarray:
    out = np.zeros(len(observed))
    for i, legs in enumerate(observed):
        first = next((r for r, c in enumerate(candidate.ranks(legs)[:10], 1) if c in legs.probe.gold), None)
        out[i] = 0.0 if first is None else 1.0 / first
    return out


def candidates(rrf_k: int) -> list[Candidate]:
    rrf = [Candidate("rrf", k, w) for k in sorted({*GRID_K, rrf_k}) for w in GRID_WEIGHT]
    return rrf + [Candidate(how, rrf_k, w) for how in ("convex", "zscore") for w in GRID_WEIGHT]


def fit(observed: Sequence[Legs], settings: Settings, source: str) -> Fusion:
    """The fusion chosen by the one-standard-error rule (module docstring); the one in force when the questions
    are fewer than MIN_QUESTIONS."""
    s = settings.search
    current = Candidate(s.fusion, s.rrf_k, s.vector_weight)
    if len(observed) < MIN_QUESTIONS:
        return Fusion(s.fusion, s.rrf_k, s.vector_weight, 0.0, 0.0, len(observed), "none", False)
    scores = {c: reciprocal_ranks(c, observed) for c in dict.fromkeys([current, *candidates(s.rrf_k)])}
    best = max(scores, key=lambda c: scores[c].mean())  # the first of equals, in a fixed order

    def within(c: Candidate) -> bool:
        diff = scores[best] - scores[c]
        return bool(diff.mean() <= diff.std(ddof=1) / math.sqrt(len(diff)))

    if within(current):
        chosen = current
    else:
        near = [c for c in scores if within(c)]
        chosen = min(
            near,
            key=lambda c: (abs(math.log(max(c.vector_weight, 1e-6))), -scores[c].mean(), abs(c.rrf_k - 60), c.fusion),
        )
    return Fusion(
        chosen.fusion,
        chosen.rrf_k,
        chosen.vector_weight,
        round(float(scores[chosen].mean()), 4),
        round(float(scores[current].mean()), 4),
        len(observed),
        source,
        True,
    )
