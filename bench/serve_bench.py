"""`ragvps serve` under load, on the 100,000-chunk store bench database, with a load generator on loopback.

    python bench/serve_bench.py                       # builds the database first if it is missing
    python bench/serve_bench.py --requests 3000 --no-reindex --no-write

What it measures, each phase bounded in requests and in seconds:
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
import json
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from results import RESULTS, markers, write_section  # noqa: E402  (bench/ is the script's folder)
from serve_server import Server  # noqa: E402

DATASET = ROOT.parent / "shared" / "data" / "scifact-dev"
START, END = markers("serve_bench")
KEY = "bench-key-0123456789abcdef"


@dataclass
class Run:
    name: str
    latencies: list[float] = field(default_factory=list)  # seconds
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def n(self) -> int:
        return len(self.latencies) + sum(self.errors.values())

    def pct(self, p: float) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))] * 1000

    def row(self) -> str:
        rate = self.n / self.seconds if self.seconds else 0.0
        errors = sum(self.errors.values())
        detail = f" ({', '.join(f'{k}: {v}' for k, v in sorted(self.errors.items()))})" if errors else ""
        return (f"| {self.name} | {self.n:,} | {rate:.1f} | {self.pct(50):.1f} | {self.pct(95):.1f} | "
                f"{self.pct(99):.1f} | {errors}{detail} |")


async def load(url: str, path: str, bodies: list[dict], clients: int, total: int, max_seconds: float,
               rate: float | None, name: str, stop: asyncio.Event | None = None) -> Run:
    """`clients` concurrent connections sending `total` requests; paced to `rate` req/s in all, or closed loop."""
    run = Run(name)
    counter = iter(range(total))
    start = time.perf_counter()
    deadline = start + max_seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, limits=limits,
                                 timeout=30) as http:

        async def client() -> None:
            for i in counter:
                if time.perf_counter() > deadline or (stop is not None and stop.is_set()):
                    return
                scheduled = start + i / rate if rate else time.perf_counter()
                wait = scheduled - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    r = await http.post(path, json=bodies[i % len(bodies)])
                    if r.status_code == 200:
                        run.latencies.append(time.perf_counter() - scheduled)
                    else:
                        run.errors[str(r.status_code)] = run.errors.get(str(r.status_code), 0) + 1
                except httpx.HTTPError as exc:
                    run.errors[type(exc).__name__] = run.errors.get(type(exc).__name__, 0) + 1

        await asyncio.gather(*(client() for _ in range(clients)))
    run.seconds = time.perf_counter() - start
    return run


async def under_reindex(url: str, bodies: list[dict], args: argparse.Namespace, env: dict[str, str],
                        name: str) -> tuple[Run, float, int]:
    """The paced load while `nice -n 19 ragvps reindex` runs; stops when reindex ends (or at the bounds)."""
    proc = await asyncio.create_subprocess_exec("nice", "-n", "19", sys.executable, "-m", "ragvps", "reindex",
                                                env=env, cwd=str(ROOT), stdout=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    stop = asyncio.Event()
    started = time.perf_counter()

    async def watch() -> int:
        assert proc.stderr is not None
        await proc.stderr.read()
        code = await proc.wait()
        stop.set()
        return code

    watcher = asyncio.create_task(watch())
    run = await load(url, "/search", bodies, args.clients, args.requests * 4, args.max_seconds * 4, args.rate,
                     name, stop)
    if proc.returncode is None:
        proc.kill()
    code = await watcher
    return run, time.perf_counter() - started, code


def baseline(env: dict[str, str], texts: list[str]) -> Run:
    """What the server replaces: `ragvps query --json` as a new process per question, one after another."""
    run = Run("baseline: `ragvps query --json`, a new process per question")
    start = time.perf_counter()
    for text in texts:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "ragvps", "query", text, "--json"], env=env, cwd=ROOT,
                              capture_output=True, timeout=120)
        if done.returncode == 0:
            run.latencies.append(time.perf_counter() - t)
        else:
            run.errors[f"exit {done.returncode}"] = run.errors.get(f"exit {done.returncode}", 0) + 1
    run.seconds = time.perf_counter() - start
    return run


def queries(dataset: Path = DATASET) -> list[str]:
    texts = []
    for line in (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts.append(json.loads(line)["text"])
    return texts


def bench_url(admin: str, name: str) -> str:
    return re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + name, admin, count=1)


def database(args: argparse.Namespace) -> str:
    """The 100k-chunk database's URL; built (as bench/store_bench.py builds it) when missing or with --build."""
    import psycopg

    from ragvps.config import load_settings
    from ragvps.db.embedded import embedded_url

    admin = embedded_url(load_settings(env={}, data_dir=args.data_dir))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (args.database,)).fetchone()
    url = bench_url(admin, args.database)
    if args.build or not exists:
        build(args, admin, url)
    return url


def build(args: argparse.Namespace, admin: str, url: str) -> None:
    """store_bench's corpus (real SciFact chunks and embeddings, enlarged with perturbed copies), stored with the
    store stage's own writes, then the HNSW index; none of store_bench's measurements."""
    import psycopg
    from store_bench import base_corpus, enlarge

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
    print(f"building {sum(len(c) for _, c, _ in rows):,} chunks from {len(chunks):,} SciFact chunks ...",
          file=sys.stderr)
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
    parser.add_argument("--dataset", type=Path, default=DATASET, help="The SciFact folder (its queries.jsonl).")
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
    env |= {"PYTHONPATH": str(ROOT), "RAGVPS_DATABASE_URL": url, "RAGVPS_DATA_DIR": str(args.data_dir),
            "RAGVPS_EMBEDDER": "local", "RAGVPS_CONFIG": str(args.data_dir / "no-config.toml")}
    texts = queries(args.dataset)
    server = Server(env | {"RAGVPS_API_KEYS": KEY}, args.data_dir / "serve-bench.log", key=KEY).start(timeout=300)
    assert server.proc is not None
    search_bodies = [{"query": t, "mode": "hybrid"} for t in texts]
    runs: list[Run] = []
    notes: list[str] = []
    try:
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as c:
            health = c.get("/health").json()
            for body in search_bodies[:50]:  # warm the caches and the prepared plans
                c.post("/search", json=body).raise_for_status()
        runs.append(asyncio.run(load(server.url, "/search", search_bodies, args.clients, args.requests,
                                     args.max_seconds, None, "search, closed loop (as fast as 8 clients go)")))
        runs.append(asyncio.run(load(server.url, "/search", search_bodies, args.clients, args.requests,
                                     args.max_seconds, args.rate, f"search, paced at {args.rate:g} req/s")))
        if not args.no_reindex:
            for workers in ("1", "0"):
                name = (f"search, paced, during `nice -n 19 ragvps reindex` (index_workers={workers}"
                        f"{', the default' if workers == '1' else ''})")
                run, seconds, code = asyncio.run(under_reindex(server.url, search_bodies, args,
                                                               env | {"RAGVPS_INDEX_WORKERS": workers}, name))
                runs.append(run)
                notes.append(f"reindex with index_workers={workers} ran {seconds:.0f} s (exit code {code}) beside "
                             "the load.")
        question = {"question": texts[0], "stream": False}
        with httpx.Client(base_url=server.url, headers=server.headers, timeout=120) as c:
            first, again = c.post("/ask", json=question), c.post("/ask", json=question)
        if first.status_code == again.status_code == 200:
            notes.append(f"/ask: the first answer was a cache {first.json().get('cache')}, the second a cache "
                         f"{again.json().get('cache')} (generator {again.json().get('generator')}).")
            runs.append(asyncio.run(load(server.url, "/ask", [question], 1, args.ask, args.max_seconds, None,
                                         "ask, answer-cache hit, 1 client")))
        else:
            notes.append(f"/ask not measured: it answered {again.status_code} {again.text[:200]}")
        rss = rss_peak_mb(server.proc.pid)
        runs.append(baseline(env, texts[:args.baseline]))
    finally:
        server.stop()
    load_after = os.getloadavg()
    section = render(args, health, runs, notes, rss, load_before, load_after)
    print(section)
    if not args.no_write:
        write_section("serve_bench", section)
        print(f"written to {RESULTS}", file=sys.stderr)


def render(args: argparse.Namespace, health: dict, runs: list[Run], notes: list[str], rss: float,
           before: tuple[float, ...], after: tuple[float, ...]) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        START, "## Server under load (`python bench/serve_bench.py`)", "",
        f"{today}, {platform.machine()} with {os.cpu_count()} cores, Python {platform.python_version()}; load average "
        f"{before[0]:.2f} / {before[1]:.2f} / {before[2]:.2f} before, {after[0]:.2f} / {after[1]:.2f} / {after[2]:.2f} "
        f"after (the machine is shared with other work). The load generator (httpx, asyncio, {args.clients} "
        "connections) runs on the same machine, over loopback. Database: the store bench's "
        f"{health.get('chunks', 0):,} chunks, model {health.get('model')} ({health.get('dims')} dims), HNSW index; "
        "hybrid search with the query embedded per request. Latency of paced runs counts from the scheduled send "
        "time.", "",
        "| phase | requests | req/s | p50 ms | p95 ms | p99 ms | errors |", "|---|---|---|---|---|---|---|",
        *[r.row() for r in runs], "",
        f"Peak RSS of the server process (VmHWM): {rss:.0f} MB.", "",
        *[f"- {n}" for n in notes], "", END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
