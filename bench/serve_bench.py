"""`ragvps serve` under load, on the 100,000-chunk store bench database, with a load generator on loopback.

    python bench/serve_bench.py                       # builds the database first if it is missing
    python bench/serve_bench.py --requests 3000 --no-reindex --no-write

What it measures, each phase bounded in requests and in seconds, on a server of its own sent questions it has
not seen (common.scifact.unseen_questions: a real user's are mostly new, and the question memo would answer a
repeated one without running the model):
  1. /search, hybrid (query embedding included), 8 clients as fast as they go (closed loop): req/s, p50/p95.
  2. /search, 8 clients paced to --rate requests/s in all (open loop, latency from the scheduled send time,
     so a slow server cannot hide its queue): p50/p95, errors.
  3. The paced load again while `nice -n 19 ragvps reindex` rebuilds the HNSW index: errors, p50/p95.
  4. /ask with an answer-cache hit (the same question again): p50/p95.
  5. The server's peak RSS (VmHWM) and the machine's load average before and after.

The database is built as bench/store_bench.py builds its own (the SciFact chunks with their real embeddings
from bench/out/scifact, enlarged with perturbed copies, then the HNSW index), once, into its own database
`ragvps_serve_bench`; `--build` rebuilds it. Run bench/eval_bench.py (or `ragvps ingest` of SciFact into
bench/out/scifact) first, for the cached embeddings.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
from common import ROOT
from common.databases import named
from common.load import KEY, Run, load, under_reindex
from common.results import RESULTS, markers, write_section
from common.scifact import unseen_questions
from support.serve_server import Server

START, END = markers("serve_bench")


def baseline(env: dict[str, str], texts: list[str]) -> Run:
    """What the server replaces: `ragvps query --json` as a new process per question, one after another."""
    run = Run("baseline: `ragvps query --json`, a new process per question")
    start = time.perf_counter()
    for text in texts:
        t = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "ragvps", "query", text, "--json"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
        if done.returncode == 0:
            run.latencies.append(time.perf_counter() - t)
        else:
            run.errors[f"exit {done.returncode}"] = run.errors.get(f"exit {done.returncode}", 0) + 1
    run.seconds = time.perf_counter() - start
    return run


def database(args: argparse.Namespace) -> str:
    """The 100k-chunk database's URL; built (as bench/store_bench.py builds it) when missing or with --build."""
    import psycopg

    from ragvps.config import load_settings
    from ragvps.db.embedded import embedded_url

    admin = embedded_url(load_settings(env={}, data_dir=args.data_dir))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.database,)).fetchone()
    url = named(admin, args.database)
    if args.build or not exists:
        build(args, admin, url)
    return url


def build(args: argparse.Namespace, admin: str, url: str) -> None:
    """store_bench's corpus (real SciFact chunks and embeddings, enlarged with perturbed copies), stored with the
    store stage's own writes, then the HNSW index; none of store_bench's measurements."""
    import psycopg
    from common.scifact import base_corpus, enlarge

    from ragvps.config import load_settings
    from ragvps.db import index, store
    from ragvps.db.database import connect
    from ragvps.embed.models import spec_for
    from ragvps.ingest.pipeline import STORE_BATCH_CHUNKS, batches

    started = time.perf_counter()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{args.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{args.database}"')
    base = load_settings(env={}, data_dir=args.data_dir)
    settings = base.replace(database_url=url)
    docs, chunks, vectors = base_corpus(base)
    rows = enlarge(docs, chunks, vectors, args.rows, 0.03)
    print(
        f"building {sum(len(c) for _, c, _ in rows):,} chunks from {len(chunks):,} SciFact chunks ...", file=sys.stderr
    )
    with connect(settings) as conn:
        eset = store.ensure_set(conn, spec_for(settings), "vector", activate=True)
        conn.commit()
        for batch in batches(rows, STORE_BATCH_CHUNKS):
            store.replace_documents(conn, eset, "/bench", "k", "english", batch)
        conn.commit()
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE")
        conn.autocommit = False
        index.build_index(conn, eset, eset.index_name, settings, warn=lambda m: print("warning:", m, file=sys.stderr))
        conn.commit()
    print(f"built in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def rss_peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "out" / "scifact")
    parser.add_argument("--database", default="ragvps_serve_bench")
    parser.add_argument("--rows", type=int, default=100_000, help="Chunks in the database it builds.")
    parser.add_argument("--build", action="store_true", help="Rebuild the database first.")
    parser.add_argument("--requests", type=int, default=6000, help="Requests per search phase.")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rate", type=float, default=64.0, help="Paced phases: requests/s over all clients.")
    parser.add_argument("--max-seconds", type=float, default=150.0, help="Time bound of each phase.")
    parser.add_argument("--ask", type=int, default=300, help="/ask cache-hit requests.")
    parser.add_argument("--no-reindex", action="store_true")
    parser.add_argument("--baseline", type=int, default=20, help="`ragvps query` processes for the baseline row.")
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    args = parser.parse_args()

    load_before = os.getloadavg()
    url = database(args)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    (args.data_dir / "no-config.toml").touch()
    env |= {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_DATABASE_URL": url,
        "RAGVPS_DATA_DIR": str(args.data_dir),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(args.data_dir / "no-config.toml"),
    }
    unseen, warm = unseen_questions()
    search_bodies = [{"query": t, "mode": "hybrid"} for t in unseen]
    requests = min(args.requests, len(search_bodies))
    runs: list[Run] = []
    notes: list[str] = []
    log = args.data_dir / "serve-bench.log"

    def started() -> tuple[Server, dict]:
        """A server of its own for a phase (an empty question memo), warmed with 50 questions the phase won't send."""
        server = Server(env | {"RAGVPS_API_KEYS": KEY}, log, key=KEY).start(timeout=300)
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
            health = c.get("/health").json()
            for text in warm:  # the caches and the prepared plans
                c.post("/search", json={"query": text, "mode": "hybrid"}).raise_for_status()
        return server, health

    phases = [
        ("search, closed loop (as fast as 8 clients go)", None, None),
        (f"search, paced at {args.rate:g} req/s", args.rate, None),
    ]
    if not args.no_reindex:
        phases += [
            (
                f"search, paced, during `nice -n 19 ragvps reindex` (index_workers={workers}"
                f"{', the default' if workers == '1' else ''})",
                args.rate,
                workers,
            )
            for workers in ("1", "0")
        ]
    server = None
    try:
        for name, rate, workers in phases:
            if server is not None:
                server.stop()
            server, health = started()
            if workers is None:
                runs.append(
                    asyncio.run(
                        load(server.url, "/search", search_bodies, args.clients, requests, args.max_seconds, rate, name)
                    )
                )
                continue
            run, seconds, code = asyncio.run(
                under_reindex(server.url, search_bodies, args, env | {"RAGVPS_INDEX_WORKERS": workers}, name)
            )
            runs.append(run)
            repeated = max(0, run.n - len(search_bodies))
            notes.append(
                f"reindex with index_workers={workers} ran {seconds:.0f} s (exit code {code}) beside "
                f"the load; of its {run.n:,} requests {repeated:,} repeated a question of the phase (the "
                f"{len(search_bodies):,} unseen ones sent in turn), which the question memo answered."
            )
        assert server is not None and server.proc is not None
        question = {"question": unseen[0], "stream": False}
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as c:
            first, again = c.post("/ask", json=question), c.post("/ask", json=question)
        if first.status_code == again.status_code == 200:
            notes.append(
                f"/ask: the first answer was a cache {first.json().get('cache')}, the second a cache "
                f"{again.json().get('cache')} (generator {again.json().get('generator')})."
            )
            runs.append(
                asyncio.run(
                    load(
                        server.url,
                        "/ask",
                        [question],
                        1,
                        args.ask,
                        args.max_seconds,
                        None,
                        "ask, answer-cache hit, 1 client",
                    )
                )
            )
        else:
            notes.append(f"/ask not measured: it answered {again.status_code} {again.text[:200]}")
        rss = rss_peak_mb(server.proc.pid)
        runs.append(baseline(env, unseen[: args.baseline]))
    finally:
        if server is not None:
            server.stop()
    load_after = os.getloadavg()
    section = render(args, health, runs, notes, rss, load_before, load_after)
    print(section)
    if not args.no_write:
        write_section("serve_bench", section)
        print(f"written to {RESULTS}", file=sys.stderr)


def render(
    args: argparse.Namespace,
    health: dict,
    runs: list[Run],
    notes: list[str],
    rss: float,
    before: tuple[float, ...],
    after: tuple[float, ...],
) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        START,
        "## Server under load (`python bench/serve_bench.py`)",
        "",
        f"{today}, {platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}; load average "
        f"{before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} before, {after[0]:.2f} / {after[1]:.2f} / {after[2]:.2f} "
        f"after (the machine is shared with other work). The load generator (httpx, asyncio, {args.clients} "
        "connections) runs on the same machine, over loopback. Database: the store bench's "
        f"{health.get('chunks', 0):,} chunks, model {health.get('model')} ({health.get('dims')} dims), HNSW index; "
        "hybrid search with the query embedded per request. Each phase has a server of its own (an empty question "
        "memo), warmed with 50 questions, then sent questions it has not seen (SciFact's claims and Chroma's "
        "questions, none twice: common.scifact.unseen_questions; a phase ends at the last of them). Latency of paced "
        "runs counts from the scheduled send time.",
        "",
        "| phase | requests | req/s | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
        *[r.row() for r in runs],
        "",
        f"Peak RSS of the last phase's server process (VmHWM, after the reindex phases and /ask): {rss:.0f} MB.",
        "",
        *[f"- {n}" for n in notes],
        "",
        END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
