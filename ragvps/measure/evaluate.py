"""Evaluation: gold questions (hand-written or BEIR), scored over ranked search results per mode."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ragvps.db.sql import queries as sql_queries
from ragvps.errors import UsageError
from ragvps.measure.metrics import dedupe, first_hit, mrr_at, ndcg_at, recall_at
from ragvps.retrieve.reranking import rerank
from ragvps.retrieve.search import search

if TYPE_CHECKING:
    import numpy as np
    import psycopg

    from ragvps.config import Settings
    from ragvps.db.store import EmbeddingSet

log = logging.getLogger(__name__)

EVAL_MODES = ("vector", "keyword", "hybrid")
CURVE_DEPTH = 40  # the recall@k curve runs k = 1..40
WITHOUT_ANSWER = " (chunk without the answer)"


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    relevant: dict[str, int]  # document (path or doc id) -> relevance grade
    answer: str | None = None  # a quote the hit chunk must contain (gold files only)


class HitLike(Protocol):
    @property
    def doc_id(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def text(self) -> str: ...


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _doc_key(doc: str) -> str:
    doc = doc.strip().replace("\\", "/")
    return doc[2:] if doc.startswith("./") else doc


def load_gold(path: Path) -> list[Question]:
    """A hand-written gold file: JSON Lines with `question`, `doc` (relative path) and optionally `answer`."""
    questions = []
    for n, line in enumerate(_read_lines(path, "gold file"), start=1):
        if not line.strip():
            continue
        record = _json_line(path, n, line, "an object with `question` and `doc`")
        question, doc, answer = record.get("question"), record.get("doc"), record.get("answer")
        if not isinstance(question, str) or not question.strip() or not isinstance(doc, str) or not doc.strip():
            raise UsageError(
                f"{path}:{n}: needs a non-empty `question` and `doc` (the answering file's path "
                "relative to the ingested folder)"
            )
        if answer is not None and (not isinstance(answer, str) or not answer.strip()):
            raise UsageError(f"{path}:{n}: `answer` must be a short quote from the document, or left out")
        qid = str(record.get("id", n))
        questions.append(Question(qid, question.strip(), {_doc_key(doc): 1}, _normalise(answer) if answer else None))
    if not questions:
        raise UsageError(f"{path} holds no questions: write one JSON object per line with `question` and `doc`")
    return questions


def load_beir(queries: Path, qrels: Path, warn: Callable[[str], None]) -> list[Question]:
    """BEIR queries.jsonl (`_id`, `text`) and qrels.tsv (`query-id corpus-id score`, header optional)."""
    judged: dict[str, dict[str, int]] = {}
    for n, line in enumerate(_read_lines(qrels, "qrels file"), start=1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) < 3 or not parts[-1].lstrip("-").isdigit():
            if n == 1:
                continue  # the header row
            raise UsageError(f"{qrels}:{n}: expected `query-id corpus-id score` separated by tabs")
        grade = int(parts[-1])
        if grade > 0:
            judged.setdefault(parts[0], {})[parts[1]] = grade
    texts: dict[str, str] = {}
    for n, line in enumerate(_read_lines(queries, "queries file"), start=1):
        if not line.strip():
            continue
        record = _json_line(queries, n, line, "an object with `_id` and `text`")
        if "_id" not in record or not isinstance(record.get("text"), str):
            raise UsageError(f"{queries}:{n}: needs `_id` and `text`")
        texts[str(record["_id"])] = record["text"]
    unknown = [qid for qid in judged if qid not in texts]
    if unknown:
        warn(f"{len(unknown)} query ids in {qrels} are not in {queries} (e.g. {unknown[0]!r}); they are left out")
    unjudged = sum(1 for qid in texts if qid not in judged)
    if unjudged:
        log.info("%d queries have no relevant documents in %s and are not scored", unjudged, qrels)
    questions = [Question(qid, text, judged[qid]) for qid, text in texts.items() if qid in judged]
    if not questions:
        raise UsageError(f"no query in {queries} has a relevant document in {qrels}: are they the same data set?")
    return questions


def _read_lines(path: Path, what: str) -> list[str]:
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {what} {path}: {exc}") from None


def _json_line(path: Path, n: int, line: str, expected: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}:{n}: not valid JSON ({exc.msg}); each line must be {expected}") from None
    if not isinstance(record, dict):
        raise UsageError(f"{path}:{n}: each line must be {expected}")
    # PostgreSQL takes no NUL in text: a question with one is searched without it
    return {k: v.replace("\x00", " ") if isinstance(v, str) else v for k, v in record.items()}


def ranked_documents(hits: Iterable[HitLike], question: Question) -> list[str]:
    """Documents in the order of their best chunk. A gold document's chunk without the gold quote is a miss."""
    keys = []
    for h in hits:
        key = h.doc_id if h.doc_id in question.relevant or h.path not in question.relevant else h.path
        if question.answer and key in question.relevant and question.answer not in _normalise(h.text):
            key += WITHOUT_ANSWER
        keys.append(key)
    return dedupe(keys)


@dataclass
class ModeScore:
    recall: float
    mrr: float
    ndcg: float
    no_hit: int  # questions with no relevant document anywhere in the retrieved depth
    curve: list[float]  # mean recall@j for j = 1..depth


@dataclass
class EvalReport:
    k: int
    depth: int
    questions: int
    modes: dict[str, ModeScore]
    per_question: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    source: str = ""


def score(
    questions: Sequence[Question], ranked: Mapping[str, Sequence[Sequence[str]]], k: int, depth: int = CURVE_DEPTH
) -> EvalReport:
    """Mean recall@k, MRR@k, nDCG@k and a recall curve per mode, from each question's ranked documents."""
    n = len(questions)
    modes = {}
    for mode, lists in ranked.items():
        firsts = [first_hit(r, q.relevant) for q, r in zip(questions, lists, strict=True)]
        modes[mode] = ModeScore(
            recall=sum(recall_at(r, q.relevant, k) for q, r in zip(questions, lists, strict=True)) / n,
            mrr=sum(mrr_at(r, q.relevant, k) for q, r in zip(questions, lists, strict=True)) / n,
            ndcg=sum(ndcg_at(r, q.relevant, k) for q, r in zip(questions, lists, strict=True)) / n,
            no_hit=sum(1 for f in firsts if f is None),
            curve=[
                sum(recall_at(r, q.relevant, j) for q, r in zip(questions, lists, strict=True)) / n
                for j in range(1, depth + 1)
            ],
        )
    per_question = []
    for i, q in enumerate(questions):
        ranks = {
            mode: [pos for pos, d in enumerate(lists[i], start=1) if q.relevant.get(d, 0) > 0]
            for mode, lists in ranked.items()
        }
        per_question.append(
            {
                "id": q.id,
                "question": q.text,
                "relevant": sorted(q.relevant),
                "answer": q.answer,
                "first_rank": {mode: (r[0] if r else None) for mode, r in ranks.items()},
                "ranks": ranks,
            }
        )
    return EvalReport(k, depth, n, modes, per_question)


def report_dict(report: EvalReport) -> dict[str, Any]:
    return {
        "source": report.source,
        "questions": report.questions,
        "k": report.k,
        "depth": report.depth,
        "modes": {
            mode: {
                f"recall@{report.k}": s.recall,
                f"mrr@{report.k}": s.mrr,
                f"ndcg@{report.k}": s.ndcg,
                "no_hit": s.no_hit,
                "recall_curve": s.curve,
            }
            for mode, s in report.modes.items()
        },
        "warnings": report.warnings,
        "per_question": report.per_question,
    }


def missing_documents(questions: Sequence[Question], known: set[str]) -> list[str]:
    """Gold documents that are not in the index (`known` holds every ingested path and doc id)."""
    return sorted({d for q in questions for d in q.relevant} - known)


# The thin I/O edge: run every question through ragvps.search.search(), exactly as `ragvps query` does.


def known_documents(conn: psycopg.Connection, questions: Sequence[Question]) -> set[str]:
    keys = sorted({d for q in questions for d in q.relevant})
    rows = conn.execute(sql_queries("inspect.sql")["known_documents"], {"keys": keys}).fetchall()
    return {value for row in rows for value in row}


def retrieve(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    questions: Sequence[Question],
    embeddings: np.ndarray | None,
    settings: Settings,
    modes: Sequence[str],
    depth: int,
    progress: Callable[[str, int, int], None],
) -> dict[str, list[list[str]]]:
    """Each question's ranked documents per mode, from the top `depth` chunks that search() returns."""
    ranked: dict[str, list[list[str]]] = {mode: [] for mode in modes}
    for mode in modes:
        for i, q in enumerate(questions):
            embedding = embeddings[i] if embeddings is not None and mode != "keyword" else None
            hits = search(conn, eset, q.text, embedding, settings, mode, depth)  # type: ignore[arg-type]
            hits = rerank(q.text, hits, settings.rerank)  # with reranker = none, the hits as they are
            ranked[mode].append(ranked_documents(hits, q))
            progress(mode, i + 1, len(questions))
    return ranked


def load_queries(path: Path) -> list[Question]:
    """Questions alone (no judgments): a gold file's `question`s or a BEIR queries file's `text`s."""
    questions = []
    for n, line in enumerate(_read_lines(path, "questions file"), start=1):
        if not line.strip():
            continue
        record = _json_line(path, n, line, "an object with `question` (or BEIR `_id` and `text`)")
        text = record.get("question", record.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{path}:{n}: needs a non-empty `question` (or `text`)")
        questions.append(Question(str(record.get("_id", record.get("id", n))), text.strip(), {}))
    if not questions:
        raise UsageError(f"{path} holds no questions")
    return questions
