"""Pure pieces: fusion, windows, migrations, the vector cache."""

from collections import Counter

import numpy as np
import psycopg

from ragvps.db.database import migrate
from ragvps.db.sql import migrations, queries
from ragvps.ingest.vectorcache import VectorCache
from ragvps.retrieve.fusion import rrf


def test_rrf_scores_and_order():
    fused = rrf([[10, 20, 30], [30, 40]], k=60)
    scores = dict(fused)
    assert scores[30] == 1 / 63 + 1 / 61
    assert scores[10] == 1 / 61
    assert [item for item, _ in fused] == [30, 10, 20, 40]


def test_migrations_are_idempotent(db_url):
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public, ragvps, kb_1 CASCADE; CREATE SCHEMA public")
    with psycopg.connect(db_url) as conn:
        shipped = migrations()
        assert migrate(conn) == [name for _, name, _ in shipped] and shipped[0][1] == "001_init.sql"
        assert migrate(conn) == []
        assert conn.execute("SELECT version FROM ragvps_migrations").fetchall() == [(v,) for v, _, _ in shipped]
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


def test_metrics_by_hand():
    from ragvps.measure.metrics import dedupe, first_hit, mrr_at, ndcg_at, recall_at

    ranked = dedupe(["a", "b", "a", "c", "d"])
    assert ranked == ["a", "b", "c", "d"]
    rel = {"c": 1, "x": 1}
    assert recall_at(ranked, rel, 10) == 0.5
    assert mrr_at(ranked, rel, 10) == 1 / 3
    assert mrr_at(ranked, rel, 2) == 0.0
    assert first_hit(ranked, rel) == 3
    import math

    assert ndcg_at(ranked, rel, 10) == (1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert ndcg_at(["c", "x"], rel, 10) == 1.0


def test_jsonl_corpus_documents(tmp_path):
    from ragvps.ingest.sources import SourceFile, load

    path = tmp_path / "corpus.jsonl"
    path.write_text(
        '{"_id": "4983", "title": "Microstructural development", "text": "Alterations of the '
        'architecture of cerebral white matter."}\n\nnot json\n{"_id": "4983", "text": "dup"}\n'
        '{"_id": "5", "title": "no text"}\n[1, 2]\n'
    )
    warnings: list[str] = []
    skipped: Counter[str] = Counter()
    docs = load(SourceFile(path, "corpus.jsonl", "jsonl"), warnings.append, skipped)
    assert [(d.doc_id, d.title, d.source) for d in docs] == [("4983", "Microstructural development", "corpus.jsonl")]
    assert warnings[0] == "corpus.jsonl:3: not valid JSON (Expecting value at column 1), skipped"
    assert "duplicate _id '4983'" in warnings[1]
    # A record without `text` says so in words, not as a Python exception's name; every skip is counted.
    assert warnings[2] == "corpus.jsonl:5: the record has no `text` (each line needs `_id` and `text`), skipped"
    assert warnings[3] == "corpus.jsonl:6: a JSON array, not an object with `_id` and `text`, skipped"
    assert not any("Error" in w for w in warnings)
    assert skipped == {"JSON Lines records": 4}
