"""The BM25 leg's candidate picking before and after the AND-of-the-rarest change (issue 21), on one database.

    python bench/scale_bm25.py "host=bench/out/scale/pg user=postgres dbname=ragvps_scale_1000000" 200

Needs a database made by `bench/scale_bench.py --keep` (or any ingested one). "before" is the OR-of-the-rarest
candidate picking as it was; "after" is the shipped keyword_search. Prints p50/p95 of each and how many of the
queries' candidate lists are identical.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from ragvps.db.sql import queries  # noqa: E402

BEFORE = r"""picked AS (  -- the rarest lexeme, and the next rarest while their chunk counts add up to the budget
    SELECT lexeme
    FROM (SELECT lexeme, df, sum(df) OVER (ORDER BY df, lexeme) AS running FROM terms WHERE df > 0) r
    WHERE running <= %(budget)s::bigint OR running = df
),
query AS (
    SELECT string_agg('''' || replace(replace(lexeme, '\', '\\'), '''', '\''') || '''', ' | ')::tsquery AS q,
           (SELECT array_agg(lexeme) FROM terms) AS lexemes
    FROM picked
)
"""


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2])
    after = queries()["keyword_search"]
    a, b = after.index("ranked AS ("), after.index("SELECT c.id,")
    before = after[:a] + BEFORE + after[b:]
    texts = [json.loads(line)["text"] for line in
             (ROOT.parent / "shared/data/scifact-dev/queries.jsonl").read_text().splitlines() if line.strip()][:n]
    params = {"language": "english", "candidates": 40, "budget": 300, "k1": 1.2, "b": 0.75}
    out = {}
    with psycopg.connect(url) as conn:
        for name, text in (("before", before), ("after", after)):
            q = sql.SQL(text).format(filter=sql.SQL("true"))
            for t in texts[:20]:
                conn.execute(q, params | {"text": t}).fetchall()
            times, res = [], []
            for t in texts:
                t0 = time.perf_counter()
                res.append([r[0] for r in conn.execute(q, params | {"text": t})])
                times.append(time.perf_counter() - t0)
            out[name] = res
            print(f"{name}: p50 {np.percentile(times, 50) * 1000:.1f} ms, p95 {np.percentile(times, 95) * 1000:.1f} ms")
    same = sum(o == m for o, m in zip(out["before"], out["after"], strict=True))
    print(f"identical candidate lists: {same} of {len(texts)}")


if __name__ == "__main__":
    main()
