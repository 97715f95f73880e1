"""Measure again on the databases `bench/scale_bench.py --keep` left, writing into bench/out/scale/scale-N.json:

    python bench/scale_again.py --sizes 100000,1000000 --peaks --warm

--peaks  rebuilds each type's HNSW index and measures the build's peak memory again (for runs
         measured before Peak counted the shared memory once: the leader and its parallel worker map the
         same segments, and summing their RssShmem counted the graph twice).
--warm   reads each type's index and vector table into the page cache of PostgreSQL's memory cgroup (as a
         server answering queries all day would hold them, if they fit), then times the vector, BM25 and
         hybrid queries again: the figures "with the index in memory" beside the run's cold ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import time
from pathlib import Path

from scale_bench import OUT, Peak, cgroup, db_queries, log, query_set, size_database, start_pg, stop_pg

from ragvps.db import index, store
from ragvps.db.database import connect


def sets_of(conn) -> dict[str, store.EmbeddingSet]:  # type: ignore[no-untyped-def]
    return {row[4]: store.EmbeddingSet(*row) for row in conn.execute(
        "SELECT id, model, identity, dims, vector_type, table_name, active FROM embedding_sets")}


def warm(conn, pg_dir: Path, relations: list[str]) -> int:  # type: ignore[no-untyped-def]
    """Read the relations' files from within PostgreSQL's cgroup, so their page cache is charged to it."""
    group = cgroup(pg_dir)
    if (group / "cgroup.procs").exists():
        (group / "cgroup.procs").write_text(str(os.getpid()))
    data = Path(conn.execute("SHOW data_directory").fetchone()[0])
    read = 0
    for rel in relations:
        base = data / conn.execute("SELECT pg_relation_filepath(%s)", (rel,)).fetchone()[0]
        for part in sorted(base.parent.glob(base.name + "*")):
            if re.fullmatch(re.escape(base.name) + r"(\.\d+)?", part.name):
                with part.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        read += len(chunk)
    return read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--types", default="halfvec,bit")
    parser.add_argument("--peaks", action="store_true")
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--memory-limit", default="3584MB")
    args = parser.parse_args()
    admin, base, confined = start_pg(OUT, args.memory_limit)
    log(confined)
    texts, qvecs = query_set(base, 400)
    try:
        for n in (int(s) for s in args.sizes.split(",")):
            path = OUT / f"scale-{n}.json"
            r = json.loads(path.read_text())
            _, url = size_database(admin, n)
            settings = base.replace(database_url=url, index_memory=r["index_memory"])
            with connect(settings, migrate_schema=False) as conn:
                sets = sets_of(conn)
                conn.commit()
                for t in args.types.split(",") if args.peaks else ():
                    es = sets[t]
                    conn.autocommit = True
                    conn.execute(f'DROP INDEX IF EXISTS "{es.index_name}"')
                    conn.autocommit = False
                    with Peak(admin, conn.info.backend_pid) as peak:
                        t0 = time.perf_counter()
                        index.build_index(conn, es, es.index_name, settings)
                        seconds = time.perf_counter() - t0
                    # The build time stays the run's (measured with nothing beside it); the peak is this one's.
                    r["builds"][t] |= {"peak_bytes": peak.peak, "remeasured": True, "remeasured_seconds": seconds}
                    log(f"{n:,} {t}: rebuilt in {seconds:.0f} s, peak {peak.peak / 2**20:,.0f} MiB")
                    path.write_text(json.dumps(r, indent=1))
                for t in args.types.split(",") if args.warm else ():
                    es = dataclasses.replace(sets[t], indexed=True)
                    read = warm(conn, settings.database.pg_dir, [es.index_name, es.table_name])
                    conn.commit()
                    q = db_queries(conn, {t: es}, settings, texts[: args.queries], qvecs[: args.queries])
                    r.setdefault("warm_query_ms", {})[t] = q | {"read_bytes": read, "load": os.getloadavg()[0]}
                    log(f"{n:,} {t} warm ({read / 2**20:,.0f} MiB read): {q}")
                    path.write_text(json.dumps(r, indent=1))
    finally:
        stop_pg(base.database.pg_dir)
        try:
            (cgroup(base.database.pg_dir).parent / "cgroup.procs").write_text(str(os.getpid()))  # leave it first
            cgroup(base.database.pg_dir).rmdir()
        except OSError:
            pass


if __name__ == "__main__":
    main()
