"""Pure pieces: fusion, windows, migrations, the vector cache."""

import numpy as np
import psycopg

from ragvps.artifacts import VectorCache
from ragvps.chunk import fixed_windows
from ragvps.database import migrate, queries
from ragvps.search import rrf


def test_rrf_scores_and_order():
    fused = rrf([[10, 20, 30], [30, 40]], k=60)
    scores = dict(fused)
    assert scores[30] == 1 / 63 + 1 / 61
    assert scores[10] == 1 / 61
    assert [item for item, _ in fused] == [30, 10, 20, 40]


def test_fixed_windows_example():
    windows = fixed_windows(2500, 800, 200)
    assert [b - a for a, b in windows] == [800, 800, 800, 700]
    assert fixed_windows(0, 800, 200) == []


def test_migrations_are_idempotent(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    with psycopg.connect(db_url) as conn:
        assert migrate(conn) == ["001_init.sql"]
        assert migrate(conn) == []
        assert conn.execute("SELECT version FROM ragvps_migrations").fetchall() == [(1,)]
    assert "hybrid" not in queries() and "vector_search" in queries()


def test_vector_cache_survives_a_torn_write(tmp_path):
    cache = VectorCache(tmp_path, "model|||4", 4)
    hashes = [f"{i:064x}" for i in range(3)]
    cache.add(hashes, np.eye(3, 4, dtype=np.float32))
    with cache.path.open("ab") as f:
        f.write(b"\x01" * 17)  # a record cut short by kill -9
    again = VectorCache(tmp_path, "model|||4", 4)
    assert len(again) == 3
    assert again.missing(hashes + ["ff" * 32]) == ["ff" * 32]
    np.testing.assert_array_equal(again.get(hashes[::-1]), np.eye(3, 4, dtype=np.float32)[::-1])
