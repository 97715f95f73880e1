"""The gold questions and scores of the last `ragvps eval` with a gold file, kept in the knowledge base
(migration 008) so that a bundle carries them and `restore-check` can measure a restored copy the same way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.types.json import Jsonb

from ragvps.db.sql import queries
from ragvps.db.store import end_implicit_transaction


@dataclass(frozen=True)
class GoldRow:
    id: str
    question: str
    relevant: dict[str, int]
    answer: str | None


@dataclass(frozen=True)
class ScoreRow:
    mode: str
    k: int
    depth: int
    recall: float
    mrr: float
    ndcg: float
    questions: int


def record(conn: psycopg.Connection, gold: Sequence[GoldRow], scores: Sequence[ScoreRow]) -> None:
    """Replace the recorded questions and scores, in one transaction."""
    q = queries("bundle.sql")
    end_implicit_transaction(conn)
    with conn.transaction():
        conn.execute(q["gold_clear"])
        conn.execute(q["scores_clear"])
        conn.cursor().executemany(
            q["gold_insert"],
            [{"id": g.id, "question": g.question, "relevant": Jsonb(g.relevant), "answer": g.answer} for g in gold],
        )
        conn.cursor().executemany(q["scores_insert"], [vars(s) for s in scores])


def recorded(conn: psycopg.Connection) -> tuple[list[GoldRow], list[ScoreRow]]:
    q = queries("bundle.sql")
    gold = [GoldRow(str(r[0]), str(r[1]), dict(r[2]), r[3]) for r in conn.execute(q["gold_all"])]
    scores = [ScoreRow(*r) for r in conn.execute(q["scores_all"])]
    return gold, scores
