"""vector_type = "bit": a binary-quantized HNSW index whose Hamming candidates are re-ranked by exact cosine,
end to end on the docs with the real embedded PostgreSQL, and reached by `ragvps reindex` without downtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector
from support.inflight import queries_in_flight

from ragvps.app import App
from ragvps.config import Settings
from ragvps.db import store
from ragvps.measure import inspect

DOCS = Path(__file__).resolve().parents[1] / "docs"
QUESTIONS = [
    "how do I stop the embedded database server?",
    "what happens when I run ingest twice?",
    "reciprocal rank fusion",
    "which settings can I change?",
]


def _index_def(db_url: str) -> tuple[str, str, str]:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT s.vector_type, format_type(a.atttypid, a.atttypmod), i.indexdef "
            "FROM embedding_sets s JOIN pg_attribute a ON a.attrelid = s.table_name::regclass "
            "AND a.attname = 'embedding' "
            "LEFT JOIN pg_indexes i ON i.indexname = s.table_name || '_hnsw' "
            "WHERE s.active"
        ).fetchone()
    return row[0], row[1], row[2] or ""


def test_bit_index_end_to_end(cli, tmp_path, db_url):
    shutil.copytree(DOCS, tmp_path / "docs")
    cli.env |= {"RAGVPS_VECTOR_TYPE": "bit", "RAGVPS_INDEX_MIN_ROWS": "1"}
    report = json.loads(cli("ingest", str(tmp_path / "docs"), "--json").stdout)
    assert report["index_built"]
    vector_type, column, indexdef = _index_def(db_url)
    assert (vector_type, column) == ("bit", "halfvec(384)")  # the re-rank reads halfvec vectors
    assert "binary_quantize(embedding))::bit(384)" in indexdef and "bit_hamming_ops" in indexdef

    hits = json.loads(cli("query", QUESTIONS[0], "--json", "--mode", "vector", "--k", "3").stdout)
    assert hits[0]["path"] == "embedded-database.md"

    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        eset = store.active_set(conn)
        assert eset is not None and eset.indexed and eset.vector_type == "bit"
        vector = inspect.sample_vectors(conn, eset, 1)[0][0]
        plan = "\n".join(inspect.nearest(conn, eset, vector, 10, exact=False, ef_search=40, explain=True))
        assert f"Index Scan using {eset.index_name}" in plan
        # Re-ranked by cosine: the chunk's own vector is its nearest, at any depth that reaches it.
        assert inspect.nearest(conn, eset, vector, 1, exact=False, ef_search=40) == inspect.nearest(
            conn, eset, vector, 1, exact=True
        )
        # The depth bounds the candidates: one Hamming neighbour re-ranked is one row.
        assert len(inspect.nearest(conn, eset, vector, 10, exact=False, ef_search=1)) == 10
        with conn.transaction():
            conn.execute("SELECT set_config('hnsw.ef_search', '1', true); SET LOCAL enable_seqscan = off")
            one = conn.execute(
                psycopg.sql.SQL(
                    "SELECT chunk_id FROM {t} ORDER BY binary_quantize(embedding)::bit(384) <~> binary_quantize(%s) "
                    "LIMIT 10"
                ).format(t=eset.table),
                (store.as_param(eset, vector),),
            ).fetchall()
        assert len(one) == 1  # the index answers (ef_search 1), not a scan

    check = json.loads(cli("check-index", "--json").stdout)
    assert check["index"] == eset.index_name and check["current_ef_search"] == 200  # bit_rerank_depth
    assert check["overlap_at_current"] >= 0.9

    cli.env["RAGVPS_BIT_RERANK_DEPTH"] = "2000"
    assert "bit_rerank_depth" in cli("query", "x", expect=2).stderr


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public, ragvps, kb_1 CASCADE; CREATE SCHEMA public")
    shutil.copytree(DOCS, tmp_path / "docs")
    return Settings.of(database_url=db_url, data_dir=tmp_path / "data", index_min_rows=1)


def test_reindex_switches_vector_bit_halfvec_with_queries_in_flight(settings: Settings, tmp_path: Path):
    with App.open(settings) as app:
        app.ingest(tmp_path / "docs")
    seen = []
    with queries_in_flight(settings, QUESTIONS) as flight:
        for vector_type in ("bit", "halfvec"):
            with App.open(settings.replace(vector_type=vector_type)) as writer:
                report = writer.reindex()
                assert report.switch is not None and report.switch.embedded == 0  # same model: from the cache
                assert report.switch.index_built
            seen.append(_index_def(str(settings.database.url)))
    assert flight.failures == [] and flight.answered > 0
    assert [s[:2] for s in seen] == [("bit", "halfvec(512)"), ("halfvec", "halfvec(512)")]  # the default model's
    assert "binary_quantize" in seen[0][2] and "halfvec_cosine_ops" in seen[1][2]
