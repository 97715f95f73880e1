"""A database and data directory that ragvps's main of 2026-12-03 made (before knowledge bases: its tables in
schema public, its stage files in data_dir/chunks and data_dir/embeddings) upgrade in place into the knowledge
base `default`: every chunk and vector kept, nothing embedded again, the stage files moved, not copied."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tarfile
from pathlib import Path

import psycopg
from psycopg import sql
from support.serve_server import embed_threads

from tests.conftest import Cli, drop_databases, with_dbname

LEGACY = Path(__file__).parent / "data" / "main-4799254"
OLD_ROOT = "/tmp/legacy/corpus"  # where main ingested the corpus from


def restore(pg_admin_url: str, tmp_path: Path) -> tuple[str, str]:
    """A database restored from main's dump, its documents' folder at tmp_path/corpus; its name and URL."""
    name = f"t_legacy_{abs(hash(tmp_path)) % 10**8}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_dbname(pg_admin_url, name)
    corpus = shutil.copytree(LEGACY / "corpus", tmp_path / "corpus")
    dump = gzip.decompress((LEGACY / "dump.sql.gz").read_bytes()).decode()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(dump.replace(f"'{OLD_ROOT}'", "'" + str(corpus.resolve()).replace("'", "''") + "'"))
    return name, url


def test_a_database_of_main_before_knowledge_bases_upgrades_into_default(pg_admin_url: str, tmp_path: Path):
    name, url = restore(pg_admin_url, tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    with tarfile.open(LEGACY / "stage-files.tar.gz") as tar:
        tar.extractall(data, filter="data")
    with psycopg.connect(url) as conn:
        before = conn.execute(
            "SELECT count(*), md5(string_agg(embedding::text, ',' ORDER BY chunk_id)) FROM public.embeddings_1"
        ).fetchone()
        lexemes = conn.execute(
            "SELECT count(*), md5(string_agg(tsv::text, ',' ORDER BY id)) FROM public.chunks"
        ).fetchone()
    (tmp_path / "empty.toml").write_text("")
    cli = Cli(
        {
            "RAGVPS_DATABASE_URL": url,
            "RAGVPS_DATA_DIR": str(data),
            "RAGVPS_EMBEDDER": "local",
            "RAGVPS_CONFIG": str(tmp_path / "empty.toml"),
            "RAGVPS_THREADS": embed_threads(),
        }
    )
    try:
        hits = json.loads(cli("query", "when is the lamp lit?", "--json").stdout)
        assert hits and hits[0]["path"] == "lighthouse.md"
        with psycopg.connect(url) as conn:  # the upgrade itself: the very vectors main stored, in their schema
            schema = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases").fetchone()
            assert schema is not None
            moved = conn.execute(
                sql.SQL(
                    "SELECT count(*), md5(string_agg(embedding::text, ',' ORDER BY chunk_id)) FROM {}.embeddings_1"
                ).format(sql.Identifier(schema[0]))
            ).fetchone()
            terms = conn.execute(
                sql.SQL("SELECT count(*), md5(string_agg(tsv::text, ',' ORDER BY id)) FROM {}.chunk_terms").format(
                    sql.Identifier(schema[0])
                )
            ).fetchone()
        assert moved == before
        assert terms == lexemes  # migration 010 moved the keyword leg's tsvectors into their own table
        again = cli("ingest", str(tmp_path / "corpus")).stdout
        # The chunker changed since main (tables keep their header): the documents are cut again, and only
        # the chunks whose text changed are embedded, the rest come from main's vector cache, moved here.
        embedded, chunks = (int(n) for n in re.search(r"(\d+) chunks; embedded (\d+)", again).groups()[::-1])
        assert embedded < chunks / 2, again
        listed = {r["name"]: r for r in json.loads(cli("kb", "list", "--json").stdout)}
        assert set(listed) == {"default"} and listed["default"]["documents"] == 3
        with psycopg.connect(url) as conn:
            left_in_public = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
            assert left_in_public == (0,)
        assert not (data / "chunks").exists() and (data / "kb" / "default" / "chunks").is_dir()
        assert (data / "kb" / "default" / "embeddings").is_dir()
        cli("kb", "create", "faq")  # and the upgraded database takes new knowledge bases beside it
        cli("ingest", str(tmp_path / "corpus"), "--kb", "faq")
        assert len(json.loads(cli("kb", "list", "--json").stdout)) == 2
    finally:
        drop_databases(pg_admin_url, [name])
