"""What `ragvps eval`, `check-index` and `stats` need beside the App's methods: the questions (a gold file or
BEIR data), the modes to compare, and the reports' JSON and HTML forms."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ragvps.db.eval_record import GoldRow, ScoreRow
from ragvps.db.eval_record import record as keep
from ragvps.errors import UsageError
from ragvps.measure.evaluate import EVAL_MODES, Question, load_beir, load_gold, load_queries, report_dict
from ragvps.measure.inspect import as_dict as index_check_dict
from ragvps.measure.inspect import mib
from ragvps.measure.report import render as eval_html

if TYPE_CHECKING:
    from ragvps.app.core import App
    from ragvps.measure.evaluate import EvalReport

__all__ = [
    "EVAL_MODES",
    "check_modes",
    "eval_html",
    "index_check_dict",
    "load_queries",
    "mib",
    "questions_from",
    "record",
    "report_dict",
]


def check_modes(modes: str) -> list[str]:
    """The comma-separated search modes to compare, each one `eval` knows."""
    chosen = [m.strip() for m in modes.split(",") if m.strip()]
    if not chosen or any(m not in EVAL_MODES for m in chosen):
        raise UsageError(f"--modes {modes!r}: choose from {', '.join(EVAL_MODES)}")
    return chosen


def questions_from(
    gold: Path | None, queries: Path | None, qrels: Path | None, warn: Callable[[str], None]
) -> tuple[list[Question], str]:
    """The judged questions of a gold file or of BEIR queries with qrels, and where they came from."""
    if gold is not None and (queries or qrels):
        raise UsageError("give either a gold file or --queries with --qrels, not both")
    if gold is not None:
        return load_gold(gold), str(gold)
    if queries is not None and qrels is not None:
        return load_beir(queries, qrels, warn), f"{queries} + {qrels}"
    raise UsageError("give a gold file (`ragvps eval gold.jsonl`) or BEIR data (`--queries Q.jsonl --qrels Q.tsv`)")


def record(app: App, questions: Sequence[Question], result: EvalReport) -> None:
    """Keep the gold questions and their scores in the knowledge base: a bundle carries them, and restore-check
    measures a restored copy with them."""
    gold = [GoldRow(q.id, q.text, dict(q.relevant), q.answer) for q in questions]
    scores = [
        ScoreRow(mode, result.k, result.depth, s.recall, s.mrr, s.ndcg, result.questions)
        for mode, s in result.modes.items()
    ]
    with app.connection() as conn:
        keep(conn, gold, scores)
