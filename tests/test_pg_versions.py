"""What differs between the PostgreSQL the tests run on by default and production's, and that ragvps behaves
alike on both.

By default the tests run on the embedded PostgreSQL 18 with pgvector 0.8.5; production is PostgreSQL 17 with
pgvector 0.8.5 (docker-compose.yml), and `python -m pytest --pg container` runs these tests (and every integration
test) on PostgreSQL 17 with Debian trixie's pgvector 0.8.0. pgvector from 0.8.0 to 0.8.5 added PostgreSQL 18
support and a faster binary_quantize (0.8.1) and fixed CVE-2026-3172 in parallel HNSW builds (0.8.2); the iterative
index scan and the cost estimate for filtered queries that ragvps relies on are 0.8.0's. Tests that concern one
version skip on the other, saying why.
"""

from __future__ import annotations

import numpy as np
import psycopg
import pytest
from psycopg import sql

from ragvps.config import Settings
from ragvps.db import index, store
from ragvps.db.database import connect
from ragvps.db.sql import compose, q
from ragvps.measure import inspect
from ragvps.records import Chunk, Document, ModelSpec

SPEC = ModelSpec("fake-8", 8, 256)


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@pytest.fixture
def conn(db_url: str) -> psycopg.Connection:
    with connect(Settings.of(database_url=db_url)) as c:
        yield c


def versions(conn: psycopg.Connection) -> tuple[int, tuple[int, ...]]:
    major = int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000  # type: ignore[index]
    vector = conn.execute(q("vector_version")).fetchone()[0]  # type: ignore[index]
    return major, version(vector)


def filled(conn: psycopg.Connection, rows: int = 3000, spec: ModelSpec = SPEC) -> store.EmbeddingSet:
    eset = store.ensure_set(conn, spec, "vector", activate=True)
    vectors = np.random.default_rng(3).normal(size=(rows, spec.dims)).astype(np.float32)
    batch = [
        (
            Document(f"d{i}", f"{i}.md", "", f"text {i}", "txt", {}),
            [Chunk(f"d{i}", 0, "", f"text {i}", 0, 6, 1, 1)],
            vectors[i][None, :],
        )
        for i in range(rows)
    ]
    store.replace_documents(conn, eset, "/root", "k", "english", batch)
    conn.commit()
    return eset


def test_the_server_has_what_ragvps_uses(conn: psycopg.Connection) -> None:
    major, vector = versions(conn)
    assert major in (17, 18), major  # production's and the embedded server's
    assert vector >= (0, 8, 0), vector  # hnsw.iterative_scan, the filtered search's
    conn.execute("SELECT '[1]'::vector")  # loads the library, which defines its settings
    with conn.transaction():
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        assert conn.execute("SHOW hnsw.iterative_scan").fetchone() == ("relaxed_order",)
    # The iterative scan stops after this many tuples: the same default on both versions.
    assert conn.execute("SHOW hnsw.max_scan_tuples").fetchone() == ("20000",)


def test_quantizing_and_casting_give_the_same_values(conn: psycopg.Connection) -> None:
    # bit sets search binary_quantize(embedding) (0.8.1 made it faster, not different); halfvec sets store casts.
    row = conn.execute(
        "SELECT binary_quantize('[0.5,-1,0,2]'::vector)::text, '[0.1,0.2]'::vector::halfvec::text, "
        "'[1,0]'::vector <=> '[0,1]'::vector"
    ).fetchone()
    assert row == ("1001", "[0.099975586,0.19995117]", 1.0)


def test_the_planner_takes_the_hnsw_index_for_the_vector_leg(conn: psycopg.Connection) -> None:
    # No setting forces it: the cost estimate of this version must prefer the index at a few thousand rows.
    eset = filled(conn)
    assert index.ensure_index(conn, eset, Settings.of(index_min_rows=1000))
    conn.execute("ANALYZE")
    query = sql.SQL("EXPLAIN ") + compose("vector_search", table=eset.table, candidates=sql.Literal(20))
    plan = "\n".join(r[0] for r in conn.execute(query, {"embedding": np.ones(SPEC.dims, dtype=np.float32)}))
    assert eset.index_name in plan, plan


def test_the_exact_pass_stays_exact_when_a_savepoint_left_a_scan_disabled(conn: psycopg.Connection) -> None:
    """Inside an open transaction a `with conn.transaction()` block is a savepoint, whose release keeps SET LOCAL.
    With both scans disabled, PostgreSQL 17 adds the same 1e10 to both plans, finds them equal within its 1% fuzz
    and keeps the ordered HNSW scan; 18 counts disabled nodes instead and sorts a sequential scan. ragvps's exact
    pass sets both settings itself, so it is exact on either."""
    spec = ModelSpec("fake-384", 384, 256)  # as the local model's: the sequential scan is the cheaper plan here
    eset = filled(conn, 150, spec)
    assert index.ensure_index(conn, eset, Settings.of(index_min_rows=100))
    conn.execute("ANALYZE")
    vector = np.random.default_rng(5).normal(size=spec.dims).astype(np.float32)
    conn.execute("SELECT 1")  # an open transaction: the blocks below are savepoints
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
    assert conn.execute("SHOW enable_seqscan").fetchone() == ("off",)
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off; SET LOCAL hnsw.ef_search = 1")
        query = sql.SQL("EXPLAIN ") + compose("vector_search", table=eset.table, candidates=sql.Literal(10))
        plan = "\n".join(r[0] for r in conn.execute(query, {"embedding": vector}, prepare=False))
    major, _ = versions(conn)
    assert (eset.index_name in plan) == (major < 18), (major, plan)
    exact = inspect.nearest(conn, eset, vector, 10, exact=True)
    assert len(exact) == 10 and len(inspect.nearest(conn, eset, vector, 10, exact=False, ef_search=1)) == 1
    stored = {
        cid: v.to_numpy() for cid, v in conn.execute(sql.SQL("SELECT chunk_id, embedding FROM {}").format(eset.table))
    }
    cosine = {cid: float(v @ vector) / float(np.linalg.norm(v) * np.linalg.norm(vector)) for cid, v in stored.items()}
    assert exact == sorted(cosine, key=lambda cid: -cosine[cid])[:10]


def test_a_pgvector_before_0_8_2_builds_hnsw_without_parallel_workers(conn: psycopg.Connection) -> None:
    _, vector = versions(conn)
    if vector >= (0, 8, 2):
        pytest.skip(f"pgvector {'.'.join(map(str, vector))} has the fix for CVE-2026-3172: parallel builds are safe")
    eset = filled(conn, 1200)
    warnings: list[str] = []
    index.build_index(conn, eset, eset.index_name, Settings.of(index_workers=1), warn=warnings.append)
    assert any("CVE-2026-3172" in w and "ALTER EXTENSION vector UPDATE" in w for w in warnings), warnings
    assert index.index_exists(conn, eset)


def test_sessions_run_without_jit_on_a_server_that_has_it_on(db_url: str) -> None:
    """A server built with LLVM (PostgreSQL 17 in the compose image, most packages) compiled the BM25 query on
    every search of a young knowledge base (its tables never analyzed): 0.5-1 s a search. ragvps's sessions
    turn JIT off, a command's connection and the server's pooled ones alike, whatever the server's default."""
    from ragvps.db.connections import PooledConnections

    with psycopg.connect(db_url, autocommit=True) as admin:
        name = admin.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
        admin.execute(sql.SQL("ALTER DATABASE {} SET jit = on").format(sql.Identifier(name)))
    settings = Settings.of(database_url=db_url)
    with connect(settings) as conn:
        assert conn.execute("SHOW jit").fetchone() == ("off",)
    pooled = PooledConnections(settings)
    try:
        with pooled.connection() as conn:
            assert conn.execute("SHOW jit").fetchone() == ("off",)
    finally:
        pooled.close()
    with psycopg.connect(db_url) as plain:  # the test's own premise: the database turns it on
        assert plain.execute("SHOW jit").fetchone() == ("on",)
