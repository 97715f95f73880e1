"""The answer memo (sql/migrations/007): a repeated question is answered with one query, and every change that
can change what a search finds ends it. Real embedded PostgreSQL, the real local model."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragvps.app import App, AskRequest, Overrides
from ragvps.config import Settings
from ragvps.db import index, store

pytestmark = pytest.mark.integration

DOCS = {
    "backups.md": "# Backups\n\nBackups run every night at 02:00 on the second disk. "
    "Each backup is kept for thirty days and then deleted.\n",
    "logs.md": "# Logs\n\nApplication logs are written to the journal. "
    "The journal is compressed weekly and trimmed when it reaches two gigabytes.\n",
}
Q_BACKUP = "When do the nightly backups run?"
Q_GIRAFFES = "How tall do giraffes grow in the Serengeti?"
GIRAFFES = (
    "# Giraffes\n\nAdult giraffes in the Serengeti grow to between four and a half and five and a half "
    "metres tall, the males taller than the females.\n"
)


def remembered(answer: object) -> bool:
    """Answered from the memo: no embedding and no search ran."""
    timings = answer.timings  # type: ignore[attr-defined]
    return "memo_ms" in timings and "retrieve_ms" not in timings


def generation(app: App) -> int:
    with app.connection() as conn:
        row = conn.execute("SELECT generation FROM corpus_stats").fetchone()
        conn.commit()
    assert row is not None
    return int(row[0])


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    for name, text in DOCS.items():
        (root / name).write_text(text)
    return root


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings.of(database_url=db_url, data_dir=tmp_path / "data")


def test_a_repeated_question_is_answered_from_the_memo_as_it_was_first(docs, settings):
    with App.open(settings) as app:
        app.ingest(docs)
        first = app.ask(AskRequest(Q_BACKUP))
        again = app.ask(AskRequest(Q_BACKUP))
        other_k = app.ask(AskRequest(Q_BACKUP, Overrides(k=3)))  # another request: retrieved again
        uncached = app.ask(AskRequest(Q_BACKUP, use_cache=False))
    assert first.cache == "miss" and not remembered(first) and first.answered
    assert again.cache == "hit" and remembered(again)
    assert (again.answer, again.citations, again.sources, again.quotes, again.evidence, again.retrieved) == (
        first.answer,
        first.citations,
        first.sources,
        first.quotes,
        first.evidence,
        first.retrieved,
    )
    assert not remembered(other_k) and not remembered(uncached) and uncached.cache == "off"


def test_a_document_ingested_after_a_refusal_is_found_at_once(docs, settings):
    with App.open(settings) as app:
        app.ingest(docs)
        refused = app.ask(AskRequest(Q_GIRAFFES))
        assert not refused.answered and remembered(app.ask(AskRequest(Q_GIRAFFES)))
        (docs / "giraffes.md").write_text(GIRAFFES)
        app.ingest(docs)
        answered = app.ask(AskRequest(Q_GIRAFFES))
        assert not remembered(answered) and answered.answered
        assert any(c.path.endswith("giraffes.md") for c in answered.citations)
        (docs / "giraffes.md").unlink()
        app.ingest(docs)  # and deleted again: refused again, not remembered as answered
        assert not app.ask(AskRequest(Q_GIRAFFES)).answered


def test_vectors_a_worker_stores_end_the_memo(docs, settings):
    deferred = settings.replace(defer_embedding=True)
    with App.open(deferred) as app:
        app.ingest(docs)  # chunks now, vectors later: only the keyword leg finds them
        keyword_only = app.ask(AskRequest(Q_BACKUP))
        assert remembered(app.ask(AskRequest(Q_BACKUP)))
        before = generation(app)
        assert app.work(exit_when_empty=True).embedded == len(DOCS)  # one chunk a document
        assert generation(app) > before
        both_legs = app.ask(AskRequest(Q_BACKUP))
    assert not remembered(both_legs)
    assert [r.cosine for r in keyword_only.retrieved] == [None] * len(keyword_only.retrieved)
    assert len(both_legs.retrieved) == len(DOCS) and all(r.cosine is not None for r in both_legs.retrieved)


def test_an_index_built_or_swapped_and_a_set_made_active_move_the_generation_on(docs, settings):
    indexed = settings.replace(index_min_rows=0)
    with App.open(indexed) as app:
        app.ingest(docs)
        with app.connection() as conn:
            eset = store.active_set(conn)
            assert eset is not None and eset.indexed
            before = generation(app)
            assert index.rebuild_index(conn, eset, indexed)
            swapped = generation(app)
            with conn.transaction():
                store.activate_set(conn, eset)
        assert before < swapped < generation(app)
        app.ask(AskRequest(Q_BACKUP))
        assert remembered(app.ask(AskRequest(Q_BACKUP)))
        app.reindex()
        assert not remembered(app.ask(AskRequest(Q_BACKUP)))
