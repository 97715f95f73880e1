"""`ragvps calibrate`: the refusal line and the fusion, fitted on questions the knowledge base itself gives,
without an LLM (issue 33).

The calibration set:
- answerable: a sentence of a sampled chunk, cut to its rarest words (their BM25 document frequency), asked as a
  question; the chunk it came from is its gold;
- on topic but unanswerable: the same, from the chunks of one document in HELD_OUT, which is held out of
  retrieval for every question (its chunks dropped from the results), so the rest of the corpus must answer;
- off topic: general questions shipped with the package (ragvps/data/off_topic.txt).

With gold questions (`ragvps eval`'s formats: a gold file, or BEIR queries and qrels) the answerable questions are
those instead, each with its relevant documents' chunks as gold; those documents are never held out.

Each question is searched once: both legs' candidates, and each candidate's rank-independent evidence
(retrieve/evidence.py), as the answer's gate sees it. The gate's curve then says, at each candidate line, the
share of answerable questions still answered and of the others refused; the line chosen is the highest that
keeps `target` of the answerable ones answered. The fusion is fitted on questions of its own (measure/fusion_fit.py).

Questions are cut to their WORDS_PER_QUESTION rarest words: with three, the line chosen answered 0.86 of SciFact's
real held-out claims and 0.92 of chroma_chunking's questions where it predicted 0.91 and 0.98; with five it
predicted 0.93 and 0.91 where they answered 0.79 and 0.87 (the shared records of bench/answer_quality.py, replayed
at each line). No made-up question predicts how often real on-topic questions that the documents do not answer are
refused: read that column of the curve as an upper bound.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

import numpy as np
import psycopg

from ragvps.config import Settings
from ragvps.db.sql import queries
from ragvps.db.store import EmbeddingSet
from ragvps.errors import UsageError
from ragvps.measure.evaluate import Question
from ragvps.retrieve.evidence import combine
from ragvps.retrieve.search import chunk_evidence, cosine_range, fuse, keyword_scored, vector_scored
from ragvps.text import sentences

Kind = Literal["answerable", "unanswerable", "off_topic"]
HELD_OUT = 10  # one document in ten is held out of retrieval
WORDS_PER_QUESTION = 3
LINES = tuple(round(0.05 + 0.01 * i, 2) for i in range(86))  # 0.05 .. 0.90
_WORD = re.compile(r"[^\W\d_][\w'-]{2,}")


@dataclass(frozen=True)
class Probe:
    question: str
    kind: Kind
    gold: frozenset[int] = frozenset()  # answerable: the chunk it was made from, or its gold documents' chunks


@dataclass(frozen=True)
class HeldOut:
    """One document in HELD_OUT is held out of retrieval, by its id's crc32, except the gold documents."""

    spared: frozenset[str] = frozenset()

    def __call__(self, doc_id: str) -> bool:
        return zlib.crc32(doc_id.encode()) % HELD_OUT == 0 and doc_id not in self.spared


@dataclass(frozen=True)
class Observed:
    """What one question found: its evidence for the gate (held-out chunks dropped)."""

    probe: Probe
    evidence: float  # the best evidence among the fused first `answer_k`, as the answer's gate sees it


@dataclass(frozen=True)
class Point:
    line: float
    answered: float  # of the answerable questions
    refused_unanswerable: float
    refused_off_topic: float


def off_topic_questions() -> list[str]:
    text = resources.files("ragvps.data").joinpath("off_topic.txt").read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]


def probes(
    conn: psycopg.Connection, language: str, n: int, held_out: HeldOut, gold: Sequence[Probe] = (), seed: str = ""
) -> list[Probe]:
    """Up to `n` answerable questions (or the gold ones), up to n/2 unanswerable ones, and every off-topic one."""
    rows = conn.execute(queries("inspect.sql")["calibration_chunks"], {"n": n * 3, "seed": seed}).fetchall()
    found: dict[Kind, list[Probe]] = {"answerable": list(gold), "unanswerable": []}
    wanted: dict[Kind, int] = {"answerable": 0 if gold else n, "unanswerable": n // 2}
    for chunk_id, doc_id, text in rows:
        kind: Kind = "unanswerable" if held_out(str(doc_id)) else "answerable"
        if wanted[kind] <= 0:
            continue
        question = question_of(conn, str(text), language)
        if question is not None:
            found[kind].append(Probe(question, kind, frozenset({int(chunk_id)})))
            wanted[kind] -= 1
    return [*found["answerable"], *found["unanswerable"], *(Probe(q, "off_topic") for q in off_topic_questions())]


def gold_probes(conn: psycopg.Connection, questions: Sequence[Question]) -> tuple[list[Probe], HeldOut]:
    """Gold questions as answerable probes, each with the chunks of its relevant documents (matched by document id
    or source path, as `ragvps eval` matches them), and the held-out rule that spares those documents."""
    docs = sorted({d for q in questions for d in q.relevant})
    chunks: dict[str, set[int]] = {}
    doc_ids: dict[str, str] = {}
    for doc_id, source, chunk_id in conn.execute(queries("inspect.sql")["gold_chunks"], {"docs": docs}):
        for key in {str(doc_id), str(source)} & set(docs):
            chunks.setdefault(key, set()).add(int(chunk_id))
            doc_ids[key] = str(doc_id)
    missing = [d for d in docs if d not in chunks]
    if len(missing) == len(docs):
        raise UsageError(
            f"no gold document is in this knowledge base (e.g. {docs[0]!r}): give `doc` as the path "
            "relative to the ingested folder, or ingest the documents first"
        )
    found = [
        Probe(q.text, "answerable", frozenset(c for d in q.relevant for c in chunks.get(d, ()))) for q in questions
    ]
    return [p for p in found if p.gold], HeldOut(frozenset(doc_ids.values()))


def question_of(conn: psycopg.Connection, text: str, language: str) -> str | None:
    """The first sentence of six words or more, cut to its WORDS_PER_QUESTION rarest known words (in their
    order); None when a chunk has no such sentence."""
    for a, b in sentences(text, 0, len(text)):
        words = _WORD.findall(text[a:b])
        if len(words) < 6:
            continue
        rarity = conn.execute(queries("inspect.sql")["word_rarity"], {"words": words, "language": language})
        known = [(i, w, df) for i, (w, df) in enumerate(rarity) if df and df > 0]
        if len(known) < 3:
            continue
        rarest = sorted(known, key=lambda t: (t[2], t[0]))[:WORDS_PER_QUESTION]
        return " ".join(w for _, w, _ in sorted(rarest)) + "?"
    return None


def observe(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    settings: Settings,
    probe: Probe,
    embedding: np.ndarray,
    held_out: HeldOut,
) -> Observed:
    """Both legs for one question and the gate's evidence, the held-out documents' chunks dropped."""
    vec = vector_scored(conn, eset, embedding, settings)
    kw = keyword_scored(conn, probe.question, settings)
    rows = chunk_evidence(conn, eset, sorted({c for c, _ in [*vec, *kw]}), probe.question, embedding, settings)
    keep = {cid for cid, row in rows.items() if not held_out(str(row[1]))}
    vec, kw = [h for h in vec if h[0] in keep], [h for h in kw if h[0] in keep]
    fused = fuse(vec, kw, settings, eset.model)[: max(settings.generate.answer_chunks, settings.search.top_k)]
    span = cosine_range(eset.model)
    evidence = max((combine(rows[c][9], rows[c][10], span) for c, _ in fused), default=0.0)
    return Observed(probe, evidence)


def observe_all(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    settings: Settings,
    found: Sequence[Probe],
    embed: Callable[[list[str]], np.ndarray],
    held_out: HeldOut,
) -> Iterator[Observed]:
    vectors = embed([p.question for p in found])
    for probe, vector in zip(found, vectors, strict=True):
        with conn.transaction():
            yield observe(conn, eset, settings, probe, vector, held_out)


def curve(observed: Sequence[Observed]) -> list[Point]:
    by_kind = {
        kind: [o.evidence for o in observed if o.probe.kind == kind]
        for kind in ("answerable", "unanswerable", "off_topic")
    }

    def share(kind: str, line: float, above: bool) -> float:
        values = by_kind[kind]
        if not values:
            return float("nan")
        return round(sum((e >= line) == above for e in values) / len(values), 4)

    return [
        Point(
            line, share("answerable", line, True), share("unanswerable", line, False), share("off_topic", line, False)
        )
        for line in LINES
    ]


def choose(points: Sequence[Point], target: float) -> Point:
    """The highest line that still answers `target` of the answerable questions (the lowest line if none does)."""
    meeting = [p for p in points if p.answered >= target]
    return meeting[-1] if meeting else points[0]
