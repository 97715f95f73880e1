"""`ragvps check-index`: HNSW top-k against an exact scan that really is exact (never a reused prepared plan)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest
from pgvector.psycopg import register_vector

from ragvps.db import store
from ragvps.db.sql import queries
from ragvps.measure import inspect

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture
def indexed(cli, tmp_path) -> dict:
    """The docs/ pages ingested with an HNSW index (index_min_rows lowered so a small corpus gets one)."""
    shutil.copytree(DOCS, tmp_path / "docs")
    cli.env["RAGVPS_INDEX_MIN_ROWS"] = "1"
    report = json.loads(cli("ingest", str(tmp_path / "docs"), "--json").stdout)
    assert report["index_built"]
    return report


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_check_index_on_chunk_vectors_and_questions(cli, indexed, tmp_path):
    out = json.loads(cli("check-index", "--json").stdout)
    assert out["index"] == "embeddings_1_hnsw" and out["rows"] == indexed["chunks"]
    assert out["sample"] == min(100, indexed["chunks"]) and out["source"] == "chunks" and out["k"] == 10
    assert out["current_ef_search"] == 100  # max(ef_search, candidates): what the vector leg sets
    assert list(out["overlap"]) == ["40", "64", "100"]  # stops once the target is met and current is measured
    assert all(0.9 <= v <= 1.0 for v in out["overlap"].values())  # a tiny graph is searched nearly exhaustively
    assert out["overlap_at_current"] == out["overlap"]["100"]
    assert out["ef_search_for_target"] == 40 and out["target"] == 0.95

    human = cli("check-index", "--sample", "3", "--k", "2").stdout
    assert "3 stored chunk vectors (each without itself)" in human
    assert "ef_search  100: " in human and "<- current" in human and "ef_search 40 reaches 0.95" in human

    # Gold questions instead of chunk vectors; a higher ef_search is measured as the current one.
    gold = tmp_path / "gold.jsonl"
    gold.write_text(
        "".join(
            json.dumps({"question": q, "doc": "search.md"}) + "\n"
            for q in ("how does fusion work?", "what is vector search?", "stop the server")
        )
    )
    cli.env["RAGVPS_EF_SEARCH"] = "200"
    out = json.loads(cli("check-index", "--questions", str(gold), "--sample", "2", "--json").stdout)
    assert out["sample"] == 2 and out["source"] == str(gold) and out["current_ef_search"] == 200
    assert list(out["overlap"]) == ["40", "64", "100", "200"]


def test_without_an_index_the_exact_search_is_the_answer(cli, tmp_path):
    """Below index_min_rows every search is exact: an answer (exit 0, overlap 1.0), not an error."""
    shutil.copytree(DOCS, tmp_path / "docs")
    cli("ingest", str(tmp_path / "docs"))
    result = cli("check-index", expect=0)
    assert "no HNSW index" in _flat(result.stdout) and "index_min_rows=5,000" in _flat(result.stdout)
    assert "exact" in result.stdout and "error" not in result.stderr
    out = json.loads(cli("check-index", "--json").stdout)
    assert out["index"] is None and out["overlap_at_current"] == 1.0 and out["ef_search_for_target"] is None


def test_nothing_ingested(cli):
    assert "nothing is ingested yet" in cli("check-index", expect=2).stderr


def test_exact_and_hnsw_passes_differ_in_plan(indexed, db_url):
    """The exact pass is a sequential scan, never a reused prepared HNSW plan."""
    with psycopg.connect(db_url) as conn:
        register_vector(conn)
        eset = store.active_set(conn)
        vector = inspect.sample_vectors(conn, eset, 1)[0][0]
        hnsw = "\n".join(inspect.nearest(conn, eset, vector, 10, exact=False, explain=True))
        exact = "\n".join(inspect.nearest(conn, eset, vector, 10, exact=True, explain=True))
        assert "Index Scan using embeddings_1_hnsw" in hnsw and "Seq Scan" not in hnsw
        assert "Seq Scan on embeddings_1" in exact and "Sort" in exact and "hnsw" not in exact
        # ef_search = 1 makes the difference visible in the results too: HNSW returns one row, exact ten.
        assert len(inspect.nearest(conn, eset, vector, 10, exact=False, ef_search=1)) == 1
        assert len(inspect.nearest(conn, eset, vector, 10, exact=True)) == min(10, indexed["chunks"])

        # The trap the exact pass avoids: a prepared plan keeps its index scan after the setting changes.
        query = psycopg.sql.SQL(queries("inspect.sql")["nearest"]).format(table=eset.table)

        def run(setting: str, prepare: bool) -> list[int]:
            with conn.transaction():  # a savepoint keeps SET LOCAL: start from the defaults each time
                conn.execute("RESET enable_seqscan; RESET enable_indexscan")
                conn.execute("SELECT set_config('hnsw.ef_search', '1', true)")
                conn.execute(f"SET LOCAL {setting} = off")
                return [r[0] for r in conn.execute(query, {"embedding": vector, "k": 10}, prepare=prepare)]

        # PostgreSQL moves a prepared statement to its generic plan after five custom ones only when that plan
        # looks no dearer, which depends on the corpus (the docs folder): force it, so the trap is shown as is.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        for _ in range(6):
            assert len(run("enable_seqscan", prepare=True)) == 1  # HNSW with a one-node search list
        assert len(run("enable_indexscan", prepare=True)) == 1  # "exact", yet still the HNSW plan
        assert len(run("enable_indexscan", prepare=False)) == min(10, indexed["chunks"])  # really exact
