"""Read replicas (issue 54) on a real primary and hot standby (tests/support/replication.py), four figures:

1. replication lag under a 10,000-chunk ingest (the standby's lag as the server's watcher measures it, sampled every
   0.1 s, and its byte lag);
2. search p50/p95 on the standby against the primary, in the same run: two `ragvps serve`, one with
   database_replica_urls and one without, searched alternately;
3. failed requests across a 30-s primary stop (pg_ctl stop -m immediate) under a paced search + ask load, and what
   writes got meanwhile, on the server with the standby and on the one without (what a server had before);
4. the time until reads move off a standby that dies under a paced search load, and the requests failed after.

    flock -x /work/quiet.lock python bench/replica_bench.py
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common  # noqa: F401  (this checkout first on sys.path, tests/ after it)
import httpx
import psycopg
from common import ROOT
from common.fault_cases import p95
from common.results import markers, write_section
from support.replication import Cluster
from support.serve_server import Server, ragvps, ragvps_env

from ragvps.config import load_settings
from ragvps.db.replicas import Watcher

START, END = markers("replica_bench")
WORDS = [
    "replica",
    "standby",
    "primary",
    "index",
    "vector",
    "search",
    "answer",
    "chunk",
    "ingest",
    "query",
    "lag",
    "stream",
    "backup",
    "restore",
    "schema",
    "table",
    "column",
    "tuple",
    "page",
    "buffer",
    "cache",
    "memory",
    "disk",
    "network",
    "socket",
    "server",
    "client",
    "request",
    "latency",
    "throughput",
]


def uptime() -> str:
    return " ".join(os.popen("uptime").read().split())


def corpus(folder: Path, chunks: int) -> None:
    """`chunks` sections of about 60 words, 10 to a file, each under its own heading (one chunk each)."""
    rng = random.Random(54)
    folder.mkdir(parents=True)
    for f in range(chunks // 10):
        parts = []
        for s in range(10):
            words = " ".join(rng.choice(WORDS) for _ in range(60))
            parts.append(f"## Section {f}-{s}\n\n{words.capitalize()}.\n")
        (folder / f"doc{f:05d}.md").write_text(f"# Document {f}\n\n" + "\n".join(parts))


def lag_under_ingest(cluster: Cluster, env: dict[str, str], docs: Path) -> dict[str, Any]:
    settings = load_settings(config_file=None, env={k: v for k, v in env.items() if k.startswith("RAGVPS_")})
    watcher = Watcher(settings, lambda: None)
    lags: list[float] = []
    bytes_behind: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with (
            psycopg.connect(cluster.url("primary"), autocommit=True) as p,
            psycopg.connect(cluster.url("standby1"), autocommit=True) as s,
        ):
            while not stop.wait(0.1):
                watcher.check_primary()
                watcher.check(watcher.replicas[0])
                lags.append(watcher.replicas[0].lag_s or 0.0)
                at = p.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
                row = s.execute("SELECT pg_wal_lsn_diff(%s, pg_last_wal_replay_lsn())", (at,)).fetchone()
                bytes_behind.append(int(row[0]) if row else 0)  # type: ignore[index]

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    began = time.monotonic()
    done = ragvps(env, "ingest", str(docs), timeout=3600)
    took = time.monotonic() - began
    stop.set()
    thread.join()
    watcher.stop()
    assert done.returncode == 0, done.stderr
    with psycopg.connect(cluster.url("primary")) as conn:
        chunks = conn.execute("SELECT count(*) FROM kb_1.chunks").fetchone()[0]  # type: ignore[index]
    ordered = sorted(lags)
    return {
        "chunks": chunks,
        "ingest_s": took,
        "samples": len(lags),
        "lag_p50": ordered[len(ordered) // 2] if ordered else 0.0,
        "lag_p95": p95(lags),
        "lag_max": max(lags, default=0.0),
        "bytes_max": max(bytes_behind, default=0),
    }


@dataclass
class Shot:
    at: float
    kind: str  # search | ask | write
    status: int
    latency: float


def shoot(url: str, kind: str, at: float, start: float, out: list[Shot], lock: threading.Lock) -> None:
    began = time.monotonic()
    try:
        if kind == "search":
            r = httpx.post(url + "/search", json={"query": "replica standby lag", "k": 5}, timeout=60)
        elif kind == "ask":
            r = httpx.post(url + "/ask", json={"question": "What does the standby replay?"}, timeout=60)
        else:
            r = httpx.post(
                url + "/kb/default/documents", files=[("files", ("late.md", b"# Late\n\nA write.\n"))], timeout=60
            )
        status = r.status_code
    except httpx.HTTPError:
        status = 0
    with lock:
        out.append(Shot(at, kind, status, time.monotonic() - began))


def paced(
    url: str, seconds: float, rate: float, kinds: list[str], events: dict[float, Any] | None = None
) -> list[Shot]:
    """Requests at `rate` per second for `seconds`, open loop (a thread each), cycling through `kinds`; `events`
    run at their time (a stop, a start)."""
    shots: list[Shot] = []
    lock = threading.Lock()
    threads = []
    start = time.monotonic()
    pending = sorted((events or {}).items())
    for i in range(int(seconds * rate)):
        at = i / rate
        while pending and pending[0][0] <= at:
            pending.pop(0)[1]()
        time.sleep(max(0.0, start + at - time.monotonic()))
        t = threading.Thread(target=shoot, args=(url, kinds[i % len(kinds)], at, start, shots, lock), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(120)
    return sorted(shots, key=lambda s: s.at)


def latencies(url: str, n: int) -> list[float]:
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        for _ in range(n):
            began = time.monotonic()
            assert c.post("/search", json={"query": "replica standby lag", "k": 5}).status_code == 200
            out.append(time.monotonic() - began)
    return out


def metric(url: str, name: str) -> str:
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name):
            return line.rsplit(" ", 1)[1]
    return ""


def standby_dies(cluster: Cluster, url: str, rate: float) -> dict[str, Any]:
    """Searches at `rate`/s; the standby killed at 5 s; when /metrics first says it is down; failures after."""
    killed: list[float] = []
    seen_down: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        cluster.stop("standby1")

        def watch() -> None:
            while time.monotonic() - killed[0] < 30:
                if metric(url, "ragvps_replica_state{") == "0.0":
                    seen_down.append(time.monotonic() - killed[0])
                    return
                time.sleep(0.02)

        threading.Thread(target=watch, daemon=True).start()

    shots = paced(url, 15, rate, ["search"], {5.0: kill})
    after = [s for s in shots if s.at >= 5.0]
    failed = [s for s in after if s.status != 200]
    cluster.start("standby1")
    return {
        "searches": len(shots),
        "after_kill": len(after),
        "failed_after_kill": len(failed),
        "down_after_s": seen_down[0] if seen_down else None,
        "slowest_after_kill_s": max((s.latency for s in after), default=0.0),
    }


def primary_stop(cluster: Cluster, urls: dict[str, str], rate: float, stop_s: float) -> dict[str, Any]:
    """A paced search + ask load on each server in turn... all at once: the primary stopped at 5 s for `stop_s`."""
    results: dict[str, list[Shot]] = {}

    def load(name: str, url: str) -> None:
        results[name] = paced(url, stop_s + 15, rate, ["search", "search", "search", "ask"])

    writes: list[Shot] = []
    lock = threading.Lock()
    threads = [threading.Thread(target=load, args=(n, u)) for n, u in urls.items()]
    for t in threads:
        t.start()
    time.sleep(5)
    cluster.stop("primary")
    stopped = time.monotonic()
    time.sleep(2)
    for _ in range(3):
        shoot(urls["with standby"], "write", 0, 0, writes, lock)
    time.sleep(max(0.0, stopped + stop_s - time.monotonic()))
    cluster.start("primary")
    back = time.monotonic()
    health = None
    while time.monotonic() - back < 60:
        if httpx.get(urls["with standby"] + "/health", timeout=10).json().get("status") == "ok":
            health = time.monotonic() - back
            break
        time.sleep(0.05)
    for t in threads:
        t.join()
    out: dict[str, Any] = {"writes": [w.status for w in writes], "health_ok_after_s": health}
    for name, shots in results.items():
        out[name] = {
            kind: (len(k := [s for s in shots if s.kind == kind]), sum(s.status != 200 for s in k))
            for kind in ("search", "ask")
        }
        answered = [s.latency for s in shots if s.status == 200]
        out[name]["slow"] = (sum(v > 1.0 for v in answered), max(answered, default=0.0))
    return out


def render(r: dict[str, Any], load: dict[str, str], command: str) -> str:
    lag, sp, st, dies = r["lag"], r["latency"], r["stop"], r["dies"]

    def ms(v: float) -> str:
        return f"{v * 1000:.1f} ms"

    rows = "\n".join(
        f"| {name} | {st[name]['search'][0]} | {st[name]['search'][1]} | {st[name]['ask'][0]} | {st[name]['ask'][1]} "
        f"| {st[name]['slow'][0]} | {st[name]['slow'][1]:.1f} s |"
        for name in ("with standby", "primary only")
    )
    return f"""{START}
## Read replicas: lag, replica reads, a primary stop, a standby killed (bench/replica_bench.py, issue 54)

`{command}`, {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}; load before: {load["before"]}; after:
{load["after"]}. A primary and one hot standby (PostgreSQL 18 + pgvector, the embedded server's binaries,
`pg_basebackup -R`, streaming on unix sockets, fsync off) on this 2-core machine; the local embedder.

**Replication lag under an ingest** of {lag["chunks"]:,} chunks ({lag["ingest_s"]:.0f} s, `ragvps ingest`): the
standby's lag as the server's watcher measures it (how long the primary has held WAL the standby has not replayed),
{lag["samples"]} samples every 0.1 s: p50 {lag["lag_p50"]:.2f} s, p95 {lag["lag_p95"]:.2f} s,
max {lag["lag_max"]:.2f} s; at most {lag["bytes_max"] / 2**20:.1f} MiB of WAL behind (default replica_max_lag: 10 s).

**Search latency, standby against primary** (same run, two `ragvps serve`, {sp["n"]} /search each, alternated):
on the standby p50 {ms(sp["replica_p50"])}, p95 {ms(sp["replica_p95"])}; on the primary p50 {ms(sp["primary_p50"])},
p95 {ms(sp["primary_p95"])} ({sp["replica_p50"] / sp["primary_p50"]:.2f}x at p50).

**A {r["stop_s"]:.0f}-s primary stop** (`pg_ctl stop -m immediate` 5 s into a paced load of {r["rate"]:g} requests/s,
three searches to one ask, on both servers at once; started again after {r["stop_s"]:.0f} s):

| server | searches | failed | asks | failed | answered after more than 1 s | slowest |
|---|---|---|---|---|---|---|
{rows}

Uploads sent during the stop to the server with the standby: {", ".join(str(s) for s in st["writes"])} (503: the
database is read-only for now). Its /health said `ok` again {st["health_ok_after_s"]:.1f} s after the primary
started (no restart).

**A standby killed under load** (`pg_ctl stop -m immediate` 5 s into {dies["searches"]} searches at
{r["dies_rate"]:g}/s): /metrics showed it down {dies["down_after_s"]:.2f} s after the kill;
{dies["failed_after_kill"]} of {dies["after_kill"]} searches after the kill failed (a read that fails on a replica runs
again on the next, then on the primary); the slowest took {ms(dies["slowest_after_kill_s"])}.
{END}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "replica_bench")
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--searches", type=int, default=300, help="Searches on each server for the latency figure.")
    parser.add_argument("--stop", type=float, default=30.0, help="Seconds the primary is stopped.")
    parser.add_argument("--rate", type=float, default=4.0, help="Requests/s on each server during the stop.")
    parser.add_argument("--no-write", action="store_true", help="Print the section instead of writing it.")
    args = parser.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    load = {"before": uptime()}
    results: dict[str, Any] = {"stop_s": args.stop, "rate": args.rate, "dies_rate": 10.0}
    with Cluster.make() as cluster:
        docs = args.out / "docs"
        corpus(docs, args.chunks)
        primary_env = ragvps_env(cluster.url("primary"), args.out / "data", chunk_size="96")
        replica_env = primary_env | {"RAGVPS_DATABASE_REPLICA_URLS": cluster.url("standby1")}
        results["lag"] = lag_under_ingest(cluster, replica_env, docs)
        with_standby = Server(replica_env, args.out / "serve-standby.log", key=None).start()
        primary_only = Server(primary_env, args.out / "serve-primary.log", key=None).start()
        try:
            latencies(with_standby.url, 20)
            latencies(primary_only.url, 20)
            rep: list[float] = []
            pri: list[float] = []
            for _ in range(args.searches // 10):
                rep += latencies(with_standby.url, 10)
                pri += latencies(primary_only.url, 10)
            results["latency"] = {
                "n": len(rep),
                "replica_p50": sorted(rep)[len(rep) // 2],
                "replica_p95": p95(rep),
                "primary_p50": sorted(pri)[len(pri) // 2],
                "primary_p95": p95(pri),
            }
            urls = {"with standby": with_standby.url, "primary only": primary_only.url}
            results["stop"] = primary_stop(cluster, urls, args.rate, args.stop)
            time.sleep(2)
            results["dies"] = standby_dies(cluster, with_standby.url, results["dies_rate"])
        finally:
            with_standby.stop()
            primary_only.stop()
    load["after"] = uptime()
    section = render(results, load, "flock -x /work/quiet.lock python bench/replica_bench.py")
    print(section)
    if not args.no_write:
        write_section("replica_bench", section)


if __name__ == "__main__":
    main()
