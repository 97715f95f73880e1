"""No query fails across a switch of the embedding set (issue 15): the active set is read and searched in
one step, a set dropped in between is read again, and a vector <-> halfvec change is not a model change."""

from __future__ import annotations

import shutil
from pathlib import Path

import psycopg
import pytest
from support.inflight import queries_in_flight

from ragvps.app import App, SearchRequest
from ragvps.config import Settings

DOCS = Path(__file__).resolve().parents[1] / "docs"
QUESTIONS = [
    "how do I stop the embedded database server?",
    "what happens when I run ingest twice?",
    "reciprocal rank fusion",
    "which settings can I change?",
]


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    shutil.copytree(DOCS, tmp_path / "docs")
    return Settings.of(database_url=db_url, data_dir=tmp_path / "data")


def test_three_vector_type_switches_with_queries_in_flight(settings: Settings, tmp_path: Path):
    with App.open(settings) as app:
        app.ingest(tmp_path / "docs")
    with queries_in_flight(settings, QUESTIONS) as flight:
        for vector_type in ("halfvec", "vector", "halfvec"):
            with App.open(settings.replace(vector_type=vector_type)) as writer:
                report = writer.reindex()
                assert report.switch is not None and report.switch.embedded == 0  # same model: from the cache
    assert flight.failures == [] and flight.answered > 0
    with psycopg.connect(str(settings.database.url)) as conn:
        assert conn.execute("SELECT vector_type FROM embedding_sets WHERE active").fetchall() == [("halfvec",)]


def test_a_query_whose_set_was_dropped_meanwhile_reads_the_new_one(settings: Settings, tmp_path: Path):
    """The race itself, made certain: the set is read, then a switch commits, then the search runs."""
    from ragvps.db import store

    with App.open(settings) as app:
        app.ingest(tmp_path / "docs")
    with App.open(settings) as reader:
        real = reader.active_set
        calls: list[store.EmbeddingSet] = []
        switched: list[bool] = []

        def stale_then_real(conn: psycopg.Connection, action: str) -> store.EmbeddingSet:
            eset = real(conn, action)
            calls.append(eset)
            if len(calls) == 2:  # the read inside the search's transaction: switch before the search runs
                with App.open(settings.replace(vector_type="halfvec")) as writer:
                    switched.append(writer.reindex().switch is not None)
            return eset

        reader.active_set = stale_then_real  # type: ignore[method-assign]
        hits = reader.search(SearchRequest(QUESTIONS[0], k=3)).hits
    assert switched == [True] and len(calls) == 3  # the stale set, then read again after the drop
    assert calls[1].table_name != calls[2].table_name and calls[2].vector_type == "halfvec"
    assert hits and hits[0].path == "embedded-database.md"
