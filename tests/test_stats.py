"""`ragvps stats`: rows, measured sizes beside the plan's estimate, memory, and the warnings that follow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg

from ragvps.measure.inspect import meminfo, mib, stats_warnings
from ragvps.measure.planner import raw_vector_bytes

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _ingest(cli, tmp_path: Path) -> dict:
    shutil.copytree(DOCS, tmp_path / "docs")
    return json.loads(cli("ingest", str(tmp_path / "docs"), "--json").stdout)


def test_stats_json(cli, tmp_path, db_url):
    cli.env["RAGVPS_INDEX_MIN_ROWS"] = "1"
    report = _ingest(cli, tmp_path)
    s = json.loads(cli("stats", "--json").stdout)
    n = report["chunks"]
    assert s["rows"] == {"documents": len(list(DOCS.glob("*.md"))), "chunks": n, "vectors": n, "roots": 1}
    assert s["answer_cache"] == {"entries": 0, "hits": 0, "tokens_saved": 0}
    assert s["embedding_set"] == {
        "model": "all-MiniLM-L6-v2-int8",
        "dims": 384,
        "vector_type": "vector",
        "table": "embeddings_1",
    }
    assert set(s["tables"]) == {"documents", "chunks", "chunk_terms", "embeddings_1"}
    chunks = s["tables"]["chunks"]
    assert set(chunks["indexes"]) == {"chunks_pkey", "chunks_document_id_seq_key"}
    terms = s["tables"]["chunk_terms"]  # the keyword leg's narrow table (migration 010)
    assert set(terms["indexes"]) == {"chunk_terms_pkey", "chunk_terms_tsv_idx"}
    assert terms["indexes"]["chunk_terms_tsv_idx"]["method"] == "gin"
    assert chunks["indexes_bytes"] == sum(i["bytes"] for i in chunks["indexes"].values())
    for t in s["tables"].values():
        assert t["total_bytes"] >= t["heap_bytes"] + t["toast_bytes"] + t["indexes_bytes"] > 0
    vec = s["tables"]["embeddings_1"]
    assert vec["indexes"]["embeddings_1_hnsw"]["method"] == "hnsw"
    assert s["vector_index"] == {
        "name": "embeddings_1_hnsw",
        "exists": True,
        "bytes": vec["indexes"]["embeddings_1_hnsw"]["bytes"],
    }
    assert s["vectors"]["plan_raw_bytes"] == n * 384 * 4
    assert s["vectors"]["measured_heap_bytes"] >= s["vectors"]["plan_raw_bytes"]  # pages, headers, padding
    assert s["vectors"]["measured_table_bytes"] == vec["total_bytes"]
    with psycopg.connect(db_url) as conn:
        assert (
            s["tables"]["chunks"]["total_bytes"]
            == conn.execute("SELECT pg_total_relation_size('chunks')").fetchone()[0]
        )
    assert s["memory"]["ram_total_bytes"] >= s["memory"]["ram_available_bytes"] > 0
    assert s["postgres"]["shared_buffers"] == "128MB" and s["postgres"]["shared_buffers_bytes"] == 128 * 1024**2
    assert s["postgres"]["maintenance_work_mem_bytes"] > 0
    assert s["disk"]["rebuild_bytes"] == 2 * (chunks["total_bytes"] + vec["total_bytes"])
    assert s["disk"]["free_bytes"] is None  # a configured DSN: its disk is not this machine's to measure
    assert s["embedder"]["memory_bytes"] == 512 * 1024**2 and s["warnings"] == []

    human = cli("stats").stdout
    assert f"{len(list(DOCS.glob('*.md')))} documents, {n} chunks, {n} vectors" in human
    assert "answer cache: 0 entries, 0 hits, 0 LLM tokens saved" in human
    assert "embeddings_1_hnsw (hnsw)" in human and "shared_buffers 128MB" in human


def test_halfvec_estimate_and_no_index(cli, tmp_path):
    cli.env["RAGVPS_VECTOR_TYPE"] = "halfvec"
    n = _ingest(cli, tmp_path)["chunks"]
    s = json.loads(cli("stats", "--json").stdout)
    assert s["embedding_set"]["vector_type"] == "halfvec"
    assert s["vectors"]["plan_raw_bytes"] == n * 384 * 2
    assert s["vector_index"] == {"name": "embeddings_1_hnsw", "exists": False, "bytes": None}
    cli.env["RAGVPS_EMBEDDER"] = "ollama"
    result = cli("stats", expect=1)
    assert "configure model all-MiniLM-L6-v2-int8 to show stats" in " ".join(result.stderr.split())


def test_nothing_ingested(cli):
    assert "nothing is ingested yet" in cli("stats", expect=2).stderr


def _figures(index: int | None, available: int | None, maintenance: int, free: int | None, rebuild: int) -> dict:
    return {
        "vector_index": {"bytes": index},
        "memory": {"ram_available_bytes": available},
        "postgres": {"maintenance_work_mem": "64MB", "maintenance_work_mem_bytes": maintenance},
        "disk": {"free_bytes": free, "rebuild_bytes": rebuild},
    }


def test_warnings():
    gib = 1024**3
    assert stats_warnings(_figures(1 * gib, 2 * gib, 2 * gib, 10 * gib, 3 * gib)) == []
    assert stats_warnings(_figures(None, None, 0, None, 3 * gib)) == []
    (ram,) = stats_warnings(_figures(3 * gib, 2 * gib, 4 * gib, None, 0))
    assert ram.startswith("the vector index (3.0 GiB) does not fit in available RAM (2.0 GiB)")
    assert "disk seeks" in ram and "halfvec" in ram
    (mem,) = stats_warnings(_figures(1 * gib, 2 * gib, 64 * 1024**2, None, 0))
    assert "larger than maintenance_work_mem (64MB)" in mem
    (disk,) = stats_warnings(_figures(None, None, 0, gib, 3 * gib))
    assert disk == "only 1.0 GiB of disk is free but a rebuild needs about 3.0 GiB"


def test_meminfo_and_sizes(tmp_path):
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n")
    assert meminfo(fake) == (24000000 * 1024, 20000000 * 1024, str(fake))
    total, available, source = meminfo(tmp_path / "absent")
    assert source in ("psutil", "unknown")
    assert raw_vector_bytes(1000, 768, 4) == 3_072_000 and raw_vector_bytes(1000, 768, 2) == 1_536_000
    assert [mib(512), mib(2048), mib(5 * 1024**2)] == ["512 bytes", "2.0 KiB", "5.0 MiB"]
