"""Store and index against real PostgreSQL: one writer at a time, index builds, a rebuild that queries survive."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest

from ragvps.config import Settings
from ragvps.db import index, store
from ragvps.db.database import connect
from ragvps.errors import ConfigError
from ragvps.records import Chunk, Document, ModelSpec
from ragvps.retrieve import search

DOCS = Path(__file__).resolve().parents[1] / "docs"
SPEC = ModelSpec("fake-64", 64, 256)


@pytest.fixture
def conn(db_url: str) -> psycopg.Connection:
    with connect(Settings.of(database_url=db_url)) as c:
        yield c


def _fill(conn: psycopg.Connection, n: int, vector_type: str = "vector") -> store.EmbeddingSet:
    """n one-chunk documents with deterministic random unit vectors (plumbing, not quality)."""
    eset = store.ensure_set(conn, SPEC, vector_type, activate=True)
    vectors = np.random.default_rng(3).normal(size=(n, SPEC.dims)).astype(np.float32)
    rows = []
    for i in range(n):
        doc = Document(f"d{i}", f"d{i}.md", "", f"text {i}", "md")
        rows.append((doc, [Chunk(doc.doc_id, 0, "", doc.text, 0, 1, 1, 1)], vectors[i : i + 1]))
    store.replace_documents(conn, eset, "/root", "k", "english", rows)
    return eset


def _indexes(conn: psycopg.Connection, table: str) -> list[tuple[str, bool, str]]:
    return conn.execute(
        "SELECT c.relname, i.indisvalid, pg_get_indexdef(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass AND c.relname LIKE '%%hnsw%%' "
        "ORDER BY 1",
        (table,),
    ).fetchall()


def test_a_second_writer_stops_with_a_clear_message(cli, folder, db_url, monkeypatch: pytest.MonkeyPatch):
    # The lock is held on purpose, so the wait for a killed writer's session to let go of it (3 s, twice) is only
    # time: half a second (two more tries) still shows the second writer tries again before it stops.
    from ragvps.app import App
    from ragvps.config import load_settings

    monkeypatch.setattr(store, "WRITE_LOCK_WAIT", 0.5)
    cli("kb", "create", "second")
    with App.open(load_settings(env=cli.env)) as app, app.connection() as other, store.write_lock(other):
        result = cli("ingest", str(folder), expect=1)
        assert "is writing to this knowledge base" in result.stderr
        assert "wait for it to finish" in result.stderr
        result = cli("reindex", expect=1)
        assert "is writing to this knowledge base" in result.stderr
        # another knowledge base writes beside it (issue 50): the lock is one knowledge base's
        assert json.loads(cli("ingest", str(folder), "--kb", "second", "--json").stdout)["stored"] > 0
    assert json.loads(cli("ingest", str(folder), "--json").stdout)["stored"] == len(list(DOCS.glob("*.md")))


def test_index_appears_past_the_threshold_with_its_settings(cli, folder, db_url):
    cli.env |= {"RAGVPS_INDEX_MIN_ROWS": "1000"}
    assert json.loads(cli("ingest", str(folder), "--json").stdout)["index_built"] is False
    cli.env |= {"RAGVPS_INDEX_MIN_ROWS": "5", "RAGVPS_HNSW_M": "8", "RAGVPS_HNSW_EF_CONSTRUCTION": "32"}
    (folder / "more.md").write_text("# More\n\nOne more page so the ingest has work to do.\n")
    assert json.loads(cli("ingest", str(folder), "--json").stdout)["index_built"] is True
    with psycopg.connect(db_url) as conn:
        [(name, valid, definition)] = _indexes(conn, "embeddings_1")
    assert name == "embeddings_1_hnsw" and valid
    assert "vector_cosine_ops" in definition and "m='8'" in definition and "ef_construction='32'" in definition
    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--json").stdout)
    assert hits[0]["path"] == "embedded-database.md"


def test_halfvec_store_index_and_query(cli, folder, db_url):
    cli.env |= {"RAGVPS_VECTOR_TYPE": "halfvec", "RAGVPS_INDEX_MIN_ROWS": "5"}
    assert json.loads(cli("ingest", str(folder), "--json").stdout)["index_built"] is True
    with psycopg.connect(db_url) as conn:
        [(_, _, definition)] = _indexes(conn, "embeddings_1")
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = 'embeddings_1'::regclass AND attname = 'embedding'"
        ).fetchone()[0]
    assert "halfvec_cosine_ops" in definition and storage == "p"
    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--mode", "vector", "--json").stdout)
    assert hits[0]["path"] == "embedded-database.md"


def test_build_memory_advice_and_session_settings(conn):
    eset = _fill(conn, 3000)
    warnings: list[str] = []
    settings = Settings.of(index_min_rows=100, index_memory="1MB", index_workers=0)
    before = conn.execute("SHOW maintenance_work_mem").fetchone()[0]
    assert index.ensure_index(conn, eset, settings, progress=lambda *a: None, warn=warnings.append)
    assert len(warnings) == 1
    assert "no longer fits into maintenance_work_mem" in warnings[0] and "index_memory" in warnings[0]
    assert "RAGVPS_INDEX_MEMORY" in warnings[0] and "(now 1MB" in warnings[0]
    assert conn.execute("SHOW maintenance_work_mem").fetchone()[0] == before  # the session is put back
    with pytest.raises(ConfigError, match="index_memory='lots'"):
        index.rebuild_index(conn, eset, Settings.of(index_memory="lots"))


def test_rebuild_swaps_the_index_while_queries_keep_answering(conn, db_url):
    eset = _fill(conn, 2000)
    settings = Settings.of(database_url=db_url, index_min_rows=100, candidates=10, ef_search=10)
    assert index.ensure_index(conn, eset, settings)
    old_oid = conn.execute("SELECT %s::regclass::oid", (eset.index_name,)).fetchone()[0]
    # A leftover from a rebuild that was killed before its swap.
    conn.execute(f"CREATE INDEX {eset.index_name}_new ON {eset.table_name} USING btree (chunk_id)")
    conn.commit()

    answers: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def keep_querying() -> None:
        rng = np.random.default_rng(5)
        try:
            with connect(settings) as reader:
                while not stop.is_set():
                    text_hits = search.keyword_leg(reader, "text", settings)
                    vec_hits = search.vector_leg(reader, eset, rng.normal(size=SPEC.dims).astype(np.float32), settings)
                    answers.append(min(len(text_hits), len(vec_hits)))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    reader = threading.Thread(target=keep_querying)
    reader.start()
    phases: list[tuple[str, int, int]] = []
    try:
        assert index.rebuild_index(conn, eset, settings, progress=lambda *a: phases.append(a))
    finally:
        stop.set()
        reader.join()
    assert not errors and answers and set(answers) == {10}
    [(name, valid, definition)] = _indexes(conn, eset.table_name)
    assert name == eset.index_name and valid and "hnsw" in definition
    assert conn.execute("SELECT %s::regclass::oid", (eset.index_name,)).fetchone()[0] != old_oid
    assert all(stage == "index" and 0 <= done <= total for stage, done, total in phases)


def test_reindex_command_rebuilds_and_resyncs(cli, folder, db_url):
    cli.env |= {"RAGVPS_INDEX_MIN_ROWS": "5"}
    cli("ingest", str(folder), "--json")
    with psycopg.connect(db_url) as conn:
        old_oid = conn.execute("SELECT 'embeddings_1_hnsw'::regclass::oid").fetchone()[0]
    (folder / "search.md").unlink()
    out = cli("reindex").stdout
    assert f"{folder}: embedded 0, stored 0, deleted 1" in out
    with psycopg.connect(db_url) as conn:
        [(name, valid, _)] = _indexes(conn, "embeddings_1")
        assert name == "embeddings_1_hnsw" and valid
        assert conn.execute("SELECT 'embeddings_1_hnsw'::regclass::oid").fetchone()[0] != old_oid
        stats = dict(conn.execute("SELECT lexeme, df FROM term_stats"))
        assert stats == dict(conn.execute("SELECT word, ndoc FROM ts_stat('SELECT tsv FROM chunk_terms')"))
    hits = json.loads(cli("query", "reciprocal rank fusion", "--json").stdout)
    assert hits and all(h["path"] != "search.md" for h in hits)
