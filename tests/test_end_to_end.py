"""Ingest -> query through the real CLI, on real files, against real PostgreSQL with pgvector."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
N_DOCS = len(list(DOCS.glob("*.md")))  # the user guide grows; the tests follow it


def _ingest(cli, folder: Path) -> dict:
    return json.loads(cli("ingest", str(folder), "--json").stdout)


def _snapshot(db_url: str) -> list:
    with psycopg.connect(db_url) as conn:
        docs = conn.execute("SELECT id, doc_id, content_hash, updated_at FROM documents ORDER BY id").fetchall()
        chunks = conn.execute("SELECT id, document_id, seq, content_hash FROM chunks ORDER BY id").fetchall()
        vecs = conn.execute("SELECT chunk_id, embedding::text FROM embeddings_1 ORDER BY chunk_id").fetchall()
    return [docs, chunks, vecs]


def test_query_finds_the_document_that_answers(cli, folder):
    report = _ingest(cli, folder)
    assert report["files"] == N_DOCS and report["documents"] == N_DOCS
    assert report["embedded"] == report["chunks"] > 5

    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--json").stdout)
    assert len(hits) == 8
    assert hits[0]["path"] == "embedded-database.md"
    assert {"rank", "score", "path", "chunk_id", "text"} <= hits[0].keys()
    assert [h["rank"] for h in hits] == list(range(1, 9))
    cli.env["RAGVPS_FUSION"] = "rrf"  # the default fuses standard scores; RRF's score is its ranks'
    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--json").stdout)
    assert hits[0]["score"] == pytest.approx(
        sum(1 / (60 + r) for r in (hits[0]["vector_rank"], hits[0]["keyword_rank"]) if r)
    )
    del cli.env["RAGVPS_FUSION"]

    human = cli("query", "point ragvps at my own Postgres", "--k", "3").stdout
    assert human.splitlines()[0].split()[:3] == ["1", human.split()[1], "configuration.md"]
    assert sum(1 for line in human.splitlines() if not line.startswith("    ")) == 3


def test_second_ingest_embeds_nothing_and_changes_nothing(cli, folder, db_url):
    _ingest(cli, folder)
    before = _snapshot(db_url)
    report = _ingest(cli, folder)
    assert report["embedded"] == 0 and report["stored"] == 0 and report["rechunked_files"] == 0
    assert report["unchanged"] == N_DOCS
    assert _snapshot(db_url) == before


def test_editing_a_file_reembeds_only_its_chunks(cli, folder):
    first = _ingest(cli, folder)
    page = folder / "search.md"
    page.write_text(page.read_text() + "\n## Filters\n\nA filter keeps only chunks whose path starts with a prefix.\n")
    report = _ingest(cli, folder)
    assert report["stored"] == 1 and report["unchanged"] == N_DOCS - 1
    assert 0 < report["embedded"] < first["embedded"]
    hits = json.loads(cli("query", "filter chunks by path prefix", "--json", "--k", "1").stdout)
    assert hits[0]["path"] == "search.md" and "prefix" in hits[0]["text"]


def test_deleting_a_file_removes_its_chunks(cli, folder, db_url):
    _ingest(cli, folder)
    (folder / "search.md").unlink()
    report = _ingest(cli, folder)
    assert report["deleted"] == 1 and report["embedded"] == 0
    with psycopg.connect(db_url) as conn:
        paths = {
            r[0]
            for r in conn.execute("SELECT DISTINCT d.source FROM chunks c JOIN documents d ON d.id = c.document_id")
        }
        orphans = conn.execute(
            "SELECT count(*) FROM embeddings_1 e LEFT JOIN chunks c ON c.id = e.chunk_id WHERE c.id IS NULL"
        ).fetchone()[0]
    assert "search.md" not in paths and len(paths) == N_DOCS - 1
    assert orphans == 0
    hits = json.loads(cli("query", "reciprocal rank fusion", "--json").stdout)
    assert all(h["path"] != "search.md" for h in hits)


def test_keyword_and_vector_modes(cli, folder):
    _ingest(cli, folder)
    kw = json.loads(cli("query", "pgvector extension", "--mode", "keyword", "--json").stdout)
    assert kw and all(h["vector_rank"] is None and h["keyword_rank"] for h in kw)
    vec = json.loads(cli("query", "pgvector extension", "--mode", "vector", "--json").stdout)
    assert vec and all(h["keyword_rank"] is None and h["vector_rank"] for h in vec)


def test_other_files_are_skipped_and_counted(cli, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.txt").write_text("Backups run every night at two.\n")
    (folder / "image.gif").write_bytes(b"GIF89a\r\n")
    (folder / "empty.md").write_text("")
    report = _ingest(cli, folder)
    assert report["files"] == 1
    assert report["skipped"] == {"unsupported type .gif": 1, "empty": 1}
