"""The store at 100,000 chunks: COPY rows/s, HNSW build (vector, halfvec), sizes, hybrid query DB time,
HNSW top-10 overlap with exact search.

    python bench/store_bench.py                  # 100,000 chunks from bench/out/scifact
    python bench/store_bench.py --rows 20000 --queries 100

The corpus is real: the SciFact chunks and their cached local-model embeddings from --data-dir (run
bench/quality_bench.py once first), enlarged with lightly perturbed copies (Gaussian noise on the
vector, renormalised; one word dropped and two swapped in the text). Uniformly random vectors would
say nothing: HNSW recall on them is near zero. Writes into its own database, dropped and recreated.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from common.scifact import DATASET, base_corpus, enlarge, load_eval, query_vectors
from psycopg import sql

from ragvps.config import load_settings
from ragvps.db import index, store
from ragvps.db.database import connect
from ragvps.db.embedded import embedded_url
from ragvps.db.sql import compose
from ragvps.embed.models import spec_for
from ragvps.ingest.pipeline import STORE_BATCH_CHUNKS, batches
from ragvps.retrieve import search

BATCH = STORE_BATCH_CHUNKS  # chunks per transaction, as the store stage writes them


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def copy_variants(conn: psycopg.Connection, rows: list[tuple]) -> dict[str, float]:
    """COPY the same chunk rows into table variants: what each part of the chunks table costs."""
    flat = [(doc_i, c) for doc_i, (_, chunks, _) in enumerate(rows) for c in chunks]
    lang = conn.execute("SELECT 'english'::regconfig::oid").fetchone()[0]
    variants = {
        "plain rows (no tsvector)": "CREATE TABLE v_plain (LIKE chunks INCLUDING DEFAULTS)",
        "+ generated tsvector": "CREATE TABLE v_tsv (LIKE chunks INCLUDING DEFAULTS INCLUDING GENERATED)",
        "+ tsvector + GIN index": "CREATE TABLE v_gin (LIKE chunks INCLUDING DEFAULTS INCLUDING GENERATED);"
        "CREATE INDEX ON v_gin USING gin (tsv)",
        "+ tsvector + GIN index + BM25 statistics trigger (the chunks table)": "CREATE TABLE v_all (LIKE chunks "
        "INCLUDING DEFAULTS INCLUDING GENERATED);"
        "CREATE INDEX ON v_all USING gin (tsv);"
        "CREATE TRIGGER s AFTER INSERT ON v_all REFERENCING NEW TABLE AS new_rows "
        "FOR EACH STATEMENT EXECUTE FUNCTION ragvps_chunks_stats()",
    }
    out = {}
    for name, ddl in variants.items():
        table = re.search(r"TABLE (\w+)", ddl).group(1)  # type: ignore[union-attr]
        conn.execute(ddl)
        conn.commit()
        t0 = time.perf_counter()
        for lo in range(0, len(flat), BATCH):
            with (
                conn.transaction(),
                conn.cursor().copy(
                    f"COPY {table} (id, document_id, seq, heading_path, text, content_hash, tokens, llm_tokens, "
                    "start_offset, end_offset, metadata, language) FROM STDIN WITH (FORMAT BINARY)"
                ) as cp,
            ):
                cp.set_types(store.CHUNK_COLUMNS)
                for i, (doc_i, c) in enumerate(flat[lo : lo + BATCH], start=lo):
                    cp.write_row(store.chunk_row(i, doc_i, c, lang))
        out[name] = len(flat) / (time.perf_counter() - t0)
        conn.execute(f"DROP TABLE {table}")
        conn.commit()
    return out


def sizes(conn: psycopg.Connection) -> list[tuple[str, int, int, int, int]]:
    return conn.execute("""
        SELECT c.relname, pg_total_relation_size(c.oid), pg_relation_size(c.oid),
               coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), pg_indexes_size(c.oid)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY 2 DESC""").fetchall()


def index_sizes(conn: psycopg.Connection) -> list[tuple[str, int]]:
    return conn.execute("""
        SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind = 'i' ORDER BY 2 DESC LIMIT 8""").fetchall()


def exact_top(conn: psycopg.Connection, eset: store.EmbeddingSet, vec: np.ndarray, k: int) -> list[int]:
    # prepare=False: a prepared plan would ignore enable_indexscan and quietly use HNSW.
    with conn.transaction():
        conn.execute("SET LOCAL enable_indexscan = off", prepare=False)
        rows = conn.execute(
            compose("vector_search", table=eset.table, candidates=sql.Literal(k)), {"embedding": vec}, prepare=False
        )
        return [r[0] for r in rows]


def mb(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("bench/out/scifact"))
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--noise", type=float, default=0.03, help="Gaussian noise per dimension on copies")
    parser.add_argument("--database", default="ragvps_store_bench")
    args = parser.parse_args()

    base = load_settings(env={}, data_dir=args.data_dir)
    admin = embedded_url(base)
    url = re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + args.database, admin, count=1)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.database}"')
    settings = dataclasses.replace(base, database_url=url)
    spec = spec_for(settings)

    docs, chunks, vectors = base_corpus(base)
    rows = enlarge(docs, chunks, vectors, args.rows, args.noise)
    n = sum(len(c) for _, c, _ in rows)
    print(
        f"corpus: {len(chunks):,} real SciFact chunks with cached embeddings, enlarged to {n:,} chunks "
        f"({len(rows):,} documents), {spec.dims} dims, noise {args.noise}",
        file=sys.stderr,
    )

    report: dict[str, object] = {"rows": n, "base_chunks": len(chunks)}
    with connect(settings) as conn:
        eset = store.ensure_set(conn, spec, "vector", activate=True)
        conn.commit()
        t = time.perf_counter()
        for batch in batches(rows, BATCH):
            store.replace_documents(conn, eset, "/bench", "k", "english", batch)
        report["store_rows_per_s"] = n / (time.perf_counter() - t)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        conn.autocommit = False

        vec_ids = [r[0] for r in conn.execute(f"SELECT chunk_id FROM {eset.table_name} ORDER BY chunk_id")]
        conn.commit()
        t = time.perf_counter()
        conn.execute(f"CREATE TABLE vec_copy (LIKE {eset.table_name})")
        all_vecs = np.concatenate([v for _, _, v in rows])
        with (
            conn.transaction(),
            conn.cursor().copy("COPY vec_copy (chunk_id, embedding) FROM STDIN (FORMAT BINARY)") as cp,
        ):
            cp.set_types(["bigint", "vector"])
            for cid, v in zip(vec_ids, all_vecs, strict=True):
                cp.write_row((cid, v))
        report["vector_copy_rows_per_s"] = n / (time.perf_counter() - t)
        conn.execute("DROP TABLE vec_copy")
        conn.commit()
        report["chunk_copy_rows_per_s"] = copy_variants(conn, rows)
        t = time.perf_counter()
        stats = conn.execute("SELECT count(*) FROM ts_stat('SELECT tsv FROM chunks')").fetchone()[0]
        report["ts_stat_full_recompute_s"] = time.perf_counter() - t
        report["lexemes"] = stats
        conn.commit()

        warnings: list[str] = []
        t = time.perf_counter()
        index.build_index(conn, eset, eset.index_name, settings, warn=warnings.append)
        report["hnsw_build_s_vector"] = time.perf_counter() - t

        hset = store.ensure_set(conn, spec, "halfvec", activate=False)
        conn.execute(sql_insert_half(hset.table_name, eset.table_name))
        conn.commit()
        t = time.perf_counter()
        index.build_index(conn, hset, hset.index_name, settings, warn=warnings.append)
        report["hnsw_build_s_halfvec"] = time.perf_counter() - t
        report["index_warnings"] = warnings
        report["index_memory"], report["index_workers"] = settings.index.memory, settings.index.workers
        conn.autocommit = True
        conn.execute("ANALYZE")
        conn.autocommit = False
        report["tables"] = sizes(conn)
        report["indexes"] = index_sizes(conn)

        queries, _ = load_eval(DATASET)
        texts = [search.check_query(queries[q]) for q in sorted(queries)][: args.queries]
        qvecs = query_vectors(base, texts)
        for text, vec in list(zip(texts, qvecs, strict=True))[:20]:  # warm the cache and the prepared plans
            search.search(conn, eset, text, vec, settings)
        timings: dict[str, list[float]] = {"vector": [], "keyword": [], "hybrid": []}
        for text, vec in zip(texts, qvecs, strict=True):
            timings["vector"].append(timed(lambda v=vec: search.vector_leg(conn, eset, v, settings)))
            timings["keyword"].append(timed(lambda t=text: search.keyword_leg(conn, t, settings)))
            timings["hybrid"].append(timed(lambda t=text, v=vec: search.search(conn, eset, t, v, settings)))
        report["query_ms"] = {
            k: (statistics.median(v) * 1000, float(np.percentile(v, 95)) * 1000) for k, v in timings.items()
        }

        overlap: dict[str, float] = {}
        for name, es in (("vector", eset), ("halfvec", hset)):
            for ef in (40, settings.search.ef_search, 200):
                s = settings.replace(ef_search=ef, candidates=10)
                got = []
                for vec in qvecs:
                    approx = search.vector_leg(conn, es, vec, s)
                    exact = exact_top(conn, es, vec if name == "vector" else _half(vec), 10)
                    got.append(len(set(approx) & set(exact)) / 10)
                overlap[f"{name} ef_search={ef}"] = float(np.mean(got))
        report["top10_overlap_vs_exact"] = overlap
    print_report(report, args)


def _half(vec: np.ndarray):  # type: ignore[no-untyped-def]
    from pgvector import HalfVector

    return HalfVector(vec)


def sql_insert_half(half: str, full: str) -> str:
    return f"INSERT INTO {half} (chunk_id, embedding) SELECT chunk_id, embedding::halfvec FROM {full}"


def print_report(r: dict, args: argparse.Namespace) -> None:
    print(f"{r['rows']:,} chunks ({r['base_chunks']:,} real SciFact chunks + perturbed copies), 384 dims\n")
    print("| measure | value |\n|---|---|")
    print(
        f"| store stage (replace_documents: documents, chunks COPY + tsvector + GIN + BM25 stats trigger, "
        f"vectors COPY), rows/s | {r['store_rows_per_s']:,.0f} |"
    )
    for name, v in r["chunk_copy_rows_per_s"].items():
        print(f"| chunks COPY into a bare table: {name}, rows/s | {v:,.0f} |")
    print(f"| vectors COPY (vector(384)), rows/s | {r['vector_copy_rows_per_s']:,.0f} |")
    print(
        f"| term statistics recomputed from scratch (ts_stat, {r['lexemes']:,} lexemes), s | "
        f"{r['ts_stat_full_recompute_s']:.1f} |"
    )
    print(
        f"| HNSW build, vector (m 16, ef_construction 64, {r['index_memory']}, {r['index_workers']} worker), s | "
        f"{r['hnsw_build_s_vector']:.1f} |"
    )
    print(f"| HNSW build, halfvec, s | {r['hnsw_build_s_halfvec']:.1f} |")
    for k, (p50, p95) in r["query_ms"].items():
        print(f"| {k} query DB time p50 / p95, ms ({args.queries} SciFact queries) | {p50:.1f} / {p95:.1f} |")
    for k, v in r["top10_overlap_vs_exact"].items():
        print(f"| top-10 overlap with exact search, {k} | {v:.3f} |")
    if r["index_warnings"]:
        print(f"| index build warnings | {'; '.join(r['index_warnings'])} |")
    print("\n| table | total MB | heap MB | toast MB | indexes MB |\n|---|---|---|---|---|")
    for name, total, heap, toast, idx in r["tables"]:
        print(f"| {name} | {mb(total)} | {mb(heap)} | {mb(toast)} | {mb(idx)} |")
    print("\n| index | MB |\n|---|---|")
    for name, size in r["indexes"]:
        print(f"| {name} | {mb(size)} |")


if __name__ == "__main__":
    main()
