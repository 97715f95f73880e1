"""The load generator of the server benches: `clients` concurrent connections to `ragvps serve`, closed loop or
paced, bounded in requests and seconds, with latency percentiles and errors by kind; and the same load while
`nice -n 19 ragvps reindex` rebuilds the index."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

import httpx

from common import ROOT

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
