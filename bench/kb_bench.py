"""Knowledge bases: does one among many cost more than one alone? (issue 29)

    python bench/kb_bench.py [--kbs 50] [--chunks 10000] [--queries 200]

Two databases in one embedded PostgreSQL (bench/out/kb): `single` holds one knowledge base of --chunks chunks,
`many` holds --kbs knowledge bases of --chunks each (different synthetic rows: bench/scale_data.py, real
passages resampled, perturbed real embeddings). Questions none of them has seen then search, none twice
(SciFact's claims and Chroma's questions; each run warms with --queries of them and times --queries others):
- the single one, through its App (DB time: `search_ms`, the question's embedding apart);
- one knowledge base among many, through its App, always the same one;
- the many, each question in the next knowledge base (every search switches the connection's search_path).
Also: `kb create` time, the disk an empty knowledge base takes, and the connections it adds (none).
Figures go to bench/RESULTS.md, section "kb_bench".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterator

import numpy as np
import psycopg
from common import OUT as BENCH_OUT
from common.databases import fresh
from common.results import write_section
from common.scale_data import Generator, base_set
from common.scifact import unseen_questions

from ragvps.app import App, SearchRequest
from ragvps.app.library import Library
from ragvps.config import Settings, load_settings
from ragvps.db import catalog, index, store
from ragvps.db.embedded import embedded_url
from ragvps.embed.models import spec_for
from ragvps.records import Chunk, Document

OUT = BENCH_OUT / "kb"
CHUNKS_PER_DOC, BATCH = 10, 1000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p))


def fill(conn: psycopg.Connection, settings: Settings, gen: Generator, lo: int, n: int) -> None:
    """Rows [lo, lo + n) of the synthetic corpus into the bound knowledge base, then its HNSW index."""
    eset = store.ensure_set(conn, spec_for(settings), settings.index.vector_type, activate=True)
    conn.commit()
    for start in range(lo, lo + n, BATCH):
        texts, vecs = gen.texts_at(start, BATCH), gen.vectors_at(start, BATCH)
        batch = []
        for d in range(0, BATCH, CHUNKS_PER_DOC):
            doc_id = f"d{(start + d) // CHUNKS_PER_DOC}"
            chunks = [
                Chunk(doc_id, s, "", t, 0, len(t), len(t.split()), len(t.split()))
                for s, t in enumerate(texts[d : d + CHUNKS_PER_DOC])
            ]
            batch.append((Document(doc_id, f"{doc_id}.txt", "", "", "text"), chunks, vecs[d : d + CHUNKS_PER_DOC]))
        store.replace_documents(conn, eset, "/bench", "k", "english", batch)
        conn.commit()
    index.ensure_index(conn, eset, settings)
    conn.commit()
    conn.execute("ANALYZE")
    conn.commit()


def schema_bytes(conn: psycopg.Connection, schema: str) -> int:
    return int(
        conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN "
            "('r', 'm', 't')",
            (schema,),
        ).fetchone()[0]
    )


def connections(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()").fetchone()[0])


def timed_searches(apps: list[App], questions: Iterator[str], n: int) -> list[float]:
    """DB time (ms) of a hybrid search per question, question i in apps[i % len(apps)]: `n` questions warm, then
    `n` others are timed (issue 34: questions the search has not seen, none twice, as a user's are)."""
    for i in range(n):
        apps[i % len(apps)].search(SearchRequest(next(questions), k=10))
    return [apps[i % len(apps)].search(SearchRequest(next(questions), k=10)).timings["search_ms"] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kbs", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--base", type=int, default=800, help="real passages the synthetic rows are made from")
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    base = load_settings(env={"RAGVPS_DATA_DIR": str(OUT / "data"), "RAGVPS_INDEX_MIN_ROWS": "1"})
    admin = embedded_url(base)
    texts_b, vecs_b = base_set(OUT / "base.npz", args.base)
    gen = Generator(texts_b, vecs_b)
    unseen = unseen_questions()[0]
    if len(unseen) < 6 * args.queries:
        sys.exit(f"--queries {args.queries}: at most {len(unseen) // 6} (each of 3 runs warms with n, times n others)")
    questions = iter(unseen)
    r: dict[str, object] = {"kbs": args.kbs, "chunks": args.chunks, "queries": args.queries}

    single = base.replace(database_url=fresh(admin, "kb_single"))
    with App.open(single) as app:
        with app.connection() as conn:
            fill(conn, single, gen, 0, args.chunks)
        single_ms = timed_searches([app], questions, args.queries)
    log(f"single: p50 {pct(single_ms, 50):.2f} ms, p95 {pct(single_ms, 95):.2f} ms")

    many = base.replace(database_url=fresh(admin, "kb_many"))
    names = [f"kb-{i:02d}" for i in range(args.kbs)]
    creates: list[float] = []
    with Library.open(many) as library:
        with library.connections.connection() as conn:
            before = connections(conn)
        for name in names:
            t0 = time.perf_counter()
            library.create(name, {})
            creates.append(time.perf_counter() - t0)
        with library.connections.connection() as conn:
            after = connections(conn)
            empty = schema_bytes(conn, catalog.require(conn, names[-1]).schema)
        log(
            f"kb create: median {statistics.median(creates) * 1000:.0f} ms, max {max(creates) * 1000:.0f} ms; "
            f"an empty one {empty / 1024:.0f} KiB; connections {before} -> {after}"
        )
        for i, name in enumerate(names):
            app = library.app(name)
            with app.connection() as conn:
                fill(conn, app.settings, gen, (i + 1) * args.chunks, args.chunks)
            log(f"filled {name}")
        middle = library.app(names[len(names) // 2])
        one_ms = timed_searches([middle], questions, args.queries)
        rotating_ms = timed_searches([library.app(n) for n in names], questions, args.queries)
    log(
        f"one of many: p50 {pct(one_ms, 50):.2f}, p95 {pct(one_ms, 95):.2f}; rotating: p50 "
        f"{pct(rotating_ms, 50):.2f}, p95 {pct(rotating_ms, 95):.2f}"
    )
    load.append(os.getloadavg()[0])
    r |= {
        "single_ms": [pct(single_ms, 50), pct(single_ms, 95)],
        "one_of_many_ms": [pct(one_ms, 50), pct(one_ms, 95)],
        "rotating_ms": [pct(rotating_ms, 50), pct(rotating_ms, 95)],
        "create_ms": [statistics.median(creates) * 1000, max(creates) * 1000],
        "empty_kb_bytes": empty,
        "connections": [before, after],
        "load": load,
    }
    (OUT / "kb_bench.json").write_text(json.dumps(r, indent=2))
    write_section("kb_bench", report(r))


def report(r: dict) -> str:
    s, o, rot = r["single_ms"], r["one_of_many_ms"], r["rotating_ms"]
    c = r["create_ms"]
    return "\n".join(
        [
            "<!-- kb_bench:start -->",
            "## Knowledge bases: one among many against one alone (`python bench/kb_bench.py`)",
            "",
            f"{r['kbs']} knowledge bases of {r['chunks']:,} synthetic chunks each (bench/scale_data.py) beside a "
            f"single "
            f"one of {r['chunks']:,}, in one embedded PostgreSQL 18, HNSW on `vector`; hybrid search DB time of "
            f"{r['queries']} questions after {r['queries']} others warm (SciFact's claims and Chroma's questions, none "
            "twice: common.scifact.unseen_questions). "
            f"Load average {r['load'][0]:.1f} before, {r['load'][1]:.1f} after.",
            "",
            "| search | p50 ms | p95 ms | p50 / single | p95 / single |",
            "|---|---:|---:|---:|---:|",
            f"| single knowledge base | {s[0]:.2f} | {s[1]:.2f} | 1.00 | 1.00 |",
            f"| one of {r['kbs']}, the same each time | {o[0]:.2f} | {o[1]:.2f} | {o[0] / s[0]:.2f} | "
            f"{o[1] / s[1]:.2f} |",
            f"| one of {r['kbs']}, the next each time (search_path switched) | {rot[0]:.2f} | {rot[1]:.2f} | "
            f"{rot[0] / s[0]:.2f} | {rot[1] / s[1]:.2f} |",
            "",
            f"`kb create`: median {c[0]:.0f} ms, slowest {c[1]:.0f} ms (goal < 1 s). An empty knowledge base takes "
            f"{r['empty_kb_bytes'] / 1024:.0f} KiB of tables and indexes (goal < 1 MB) and no connection: "
            f"{r['connections'][0]} connections before making {r['kbs']}, {r['connections'][1]} after.",
            "<!-- kb_bench:end -->",
        ]
    )


if __name__ == "__main__":
    main()
