"""The load generator of the server benches: `clients` concurrent connections to `ragvps serve` (a small HTTP/1.1
client of its own, lighter than httpx on the shared cores), closed loop or paced, bounded in requests and seconds,
with latency percentiles and errors by kind; and the same load while `nice -n 19 ragvps reindex` rebuilds the
index."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

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
        return (
            f"| {self.name} | {self.n:,} | {rate:.1f} | {self.pct(50):.1f} | {self.pct(95):.1f} | "
            f"{self.pct(99):.1f} | {errors}{detail} |"
        )


class Http11:
    """One kept-alive HTTP/1.1 connection that POSTs JSON and reads the status and body: the load generator's client.
    The generator shares the server's cores: with httpx it took 2.0 ms of CPU a request under serve_compare's closed
    loop, with this 0.5 ms (the whole bench process), time the server under test no longer loses, the same on both
    sides of a comparison. Reconnects after any failure."""

    def __init__(self, url: str, headers: dict[str, str]):
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = "".join(f"{k}: {v}\r\n" for k, v in ({"Host": parts.netloc} | headers).items())
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        try:
            self.writer.write(
                f"POST {path} HTTP/1.1\r\n{self.head}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            status_line = await self.reader.readuntil(b"\r\n")
            status = int(status_line.split(b" ", 2)[1])
            length, chunked, close = 0, False, False
            while (line := await self.reader.readuntil(b"\r\n")) != b"\r\n":
                name, _, value = line.partition(b":")
                name, value = name.strip().lower(), value.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"transfer-encoding":
                    chunked = b"chunked" in value
                elif name == b"connection":
                    close = value == b"close"
            if chunked:
                while size := int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16):
                    await self.reader.readexactly(size + 2)
                await self.reader.readuntil(b"\r\n")
            else:
                await self.reader.readexactly(length)
        except BaseException:
            self.close()
            raise
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def load(
    url: str,
    path: str,
    bodies: list[dict],
    clients: int,
    total: int,
    max_seconds: float,
    rate: float | None,
    name: str,
    stop: asyncio.Event | None = None,
) -> Run:
    """`clients` concurrent connections sending `total` requests; paced to `rate` req/s in all, or closed loop."""
    run = Run(name)
    counter = iter(range(total))
    encoded = [json.dumps(b).encode() for b in bodies]
    start = time.perf_counter()
    deadline = start + max_seconds

    async def client() -> None:
        http = Http11(url, {"Authorization": f"Bearer {KEY}"})
        try:
            for i in counter:
                if time.perf_counter() > deadline or (stop is not None and stop.is_set()):
                    return
                scheduled = start + i / rate if rate else time.perf_counter()
                wait = scheduled - time.perf_counter()
                if wait > 0:
                    await asyncio.sleep(wait)
                try:
                    async with asyncio.timeout(30):
                        status = await http.post(path, encoded[i % len(encoded)])
                    if status == 200:
                        run.latencies.append(time.perf_counter() - scheduled)
                    else:
                        run.errors[str(status)] = run.errors.get(str(status), 0) + 1
                except (
                    OSError,
                    TimeoutError,
                    ValueError,
                    asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError,
                ) as exc:
                    run.errors[type(exc).__name__] = run.errors.get(type(exc).__name__, 0) + 1
        finally:
            http.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    run.seconds = time.perf_counter() - start
    return run


async def under_reindex(
    url: str, bodies: list[dict], args: argparse.Namespace, env: dict[str, str], name: str
) -> tuple[Run, float, int]:
    """The paced load while `nice -n 19 ragvps reindex` runs; stops when reindex ends (or at the bounds)."""
    proc = await asyncio.create_subprocess_exec(
        "nice",
        "-n",
        "19",
        sys.executable,
        "-m",
        "ragvps",
        "reindex",
        env=env,
        cwd=str(ROOT),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    stop = asyncio.Event()
    started = time.perf_counter()

    async def watch() -> int:
        assert proc.stderr is not None
        await proc.stderr.read()
        code = await proc.wait()
        stop.set()
        return code

    watcher = asyncio.create_task(watch())
    run = await load(
        url, "/search", bodies, args.clients, args.requests * 4, args.max_seconds * 4, args.rate, name, stop
    )
    if proc.returncode is None:
        proc.kill()
    code = await watcher
    return run, time.perf_counter() - started, code
