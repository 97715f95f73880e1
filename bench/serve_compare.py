"""Served capacity side by side: this checkout's `ragvps serve` and a baseline checkout's, on the same 100,000
chunks, in one run (issue 29: knowledge bases must not lower it).

    python bench/serve_compare.py --baseline /work/baseline [--data-dir bench/out/scifact-base] [--rounds 3]
    python bench/serve_compare.py --baseline /work/baseline --off     # this checkout, metrics and logs on and off

The data directory is one the baseline's `bench/eval_bench.py` ingested SciFact into (its embedded PostgreSQL
and cached vectors). The baseline's own `bench/serve_bench.py` builds its 100k-chunk database there
(`ragvps_serve_bench`, the tables in public, as the baseline lays them out), once; a copy of it
(`ragvps_serve_compare`, `CREATE DATABASE ... TEMPLATE`) is what this checkout serves, upgraded in place into
the knowledge base `default` when its server first opens it: the same rows, vectors and index, nothing
re-embedded. Both servers run at once against the same embedded PostgreSQL; each round measures /search hybrid
with 8 clients closed loop on one, then the other (the order alternating by round), bounded in requests and
seconds, after 50 warming requests each. Figures go to bench/RESULTS.md, section "serve_compare".

With --off both sides are this checkout on the same upgraded copy: one with metrics and the request log on (the
defaults), one with them off (`metrics = false`, `log_format = off`), in section "serve_metrics" (issue 33: they
may add at most 3% to /search p50).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
from common import ROOT
from common.databases import named
from common.load import KEY, Run, load
from common.results import write_section
from common.scifact import DATASET, queries, unseen_questions
from support.serve_server import Server

SOURCE_DB, COPY_DB = "ragvps_serve_bench", "ragvps_serve_compare"


def admin_url(data_dir: Path) -> str:
    from ragvps.config import load_settings
    from ragvps.db.embedded import embedded_url

    return embedded_url(load_settings(env={}, data_dir=data_dir))


def build_in_baseline(baseline: Path, data_dir: Path, rows: int) -> None:
    """The baseline's serve_bench.build, run by the baseline's code (its layout, its migrations)."""
    code = (
        "import argparse, sys; sys.argv = ['serve_bench']; import serve_bench as s; "
        f"a = argparse.Namespace(data_dir=__import__('pathlib').Path({str(data_dir)!r}), "
        f"database={SOURCE_DB!r}, rows={rows}, build=False); s.database(a)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {"PYTHONPATH": str(baseline)}
    subprocess.run([sys.executable, "-c", code], cwd=baseline / "bench", env=env, check=True)


def databases(args: argparse.Namespace) -> tuple[str, str]:
    admin = admin_url(args.data_dir)
    with psycopg.connect(admin, autocommit=True) as conn:
        have = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
    if args.source_db not in have:
        build_in_baseline(args.baseline, args.data_dir, args.rows)
    if COPY_DB not in have or args.fresh_copy:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{COPY_DB}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{COPY_DB}" TEMPLATE "{args.source_db}"')
    return named(admin, args.source_db), named(admin, COPY_DB)


OFF = {"RAGVPS_METRICS": "false", "RAGVPS_LOG_FORMAT": "off"}


def server(tree: Path, url: str, data_dir: Path, log: Path, extra: dict[str, str] | None = None) -> Server:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "no-config.toml").touch()
    env |= {
        "PYTHONPATH": str(tree),
        "RAGVPS_DATABASE_URL": url,
        "RAGVPS_DATA_DIR": str(data_dir),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(data_dir / "no-config.toml"),
        "RAGVPS_API_KEYS": KEY,
    } | (extra or {})
    return Server(env, log, key=KEY, cwd=tree).start(timeout=600)


def measure(srv: Server, bodies: list[dict], args: argparse.Namespace, name: str, warm: list[dict]) -> Run:
    with httpx.Client(base_url=srv.url, headers=srv.headers, timeout=60) as c:
        for body in warm:
            c.post("/search", json=body).raise_for_status()
    return asyncio.run(load(srv.url, "/search", bodies, args.clients, args.requests, args.max_seconds, None, name))


def unseen_round(
    args: argparse.Namespace, urls: dict[str, str], order: tuple[str, ...], r: int, runs: dict[str, list[Run]]
) -> None:
    """One round of --questions unseen: each side's server started afresh (an empty question memo), warmed with
    50 questions of its own, then sent the others, none twice."""
    unseen, warmup = unseen_questions()
    bodies, warm = ([{"query": t, "mode": "hybrid"} for t in texts] for texts in (unseen, warmup))
    for side in order:
        srv = server(
            args.baseline if side == "baseline" else ROOT,
            urls[side],
            dirs(args)[side],
            dirs(args)[side] / f"compare-{side}.log",
        )
        try:
            runs[side].append(measure(srv, bodies, args, f"{side}, round {r + 1}", warm))
        finally:
            srv.stop()
        print(runs[side][-1].row(), file=sys.stderr, flush=True)


def dirs(args: argparse.Namespace) -> dict[str, Path]:
    # this side's own data directory: the upgrade would adopt the baseline's stage files into kb/default
    return {"baseline": args.data_dir, "this": args.data_dir / "compare-this"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="The baseline checkout (a git worktree).")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "out" / "scifact-base")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=3000, help="Requests per side per round.")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=90.0)
    parser.add_argument("--fresh-copy", action="store_true", help="Copy the baseline's database again.")
    parser.add_argument(
        "--source-db",
        default=SOURCE_DB,
        help="The baseline's database in --data-dir's PostgreSQL "
        "(e.g. ragvps_scale_100000, which the baseline's scale_bench.py --keep left)",
    )
    parser.add_argument(
        "--questions",
        choices=("repeated", "unseen"),
        default="repeated",
        help="unseen: each side's server restarted each round and sent questions it has not seen "
        "(SciFact's claims and Chroma's questions, none twice); repeated: SciFact's in turn",
    )
    parser.add_argument(
        "--section",
        default="serve_compare",
        help="Its section in bench/RESULTS.md (a run replaces "
        "the latest and keeps the one it replaces as the previous run: no new section a run).",
    )
    parser.add_argument("--note", default="", help="What the two checkouts differ in, for the section.")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--off",
        action="store_true",
        help="Compare this checkout with metrics and the request log off (first side) and on, instead of the baseline.",
    )
    args = parser.parse_args()
    if args.off and args.section == "serve_compare":
        args.section = "serve_metrics"

    base_url, this_url = databases(args)
    bodies = [{"query": t, "mode": "hybrid"} for t in queries(DATASET)]
    load_before = os.getloadavg()
    runs: dict[str, list[Run]] = {"baseline": [], "this": []}
    if args.questions == "unseen":
        args.requests = min(args.requests, len(unseen_questions()[0]))  # past them the load would send them again
        urls = {"baseline": base_url, "this": this_url}
        for r in range(args.rounds):
            unseen_round(args, urls, ("baseline", "this") if r % 2 == 0 else ("this", "baseline"), r, runs)
        chunks = {"baseline": args.rows, "this": args.rows}
    else:
        # this checkout in its own data directory: the upgrade would adopt the baseline's stage files into kb/default
        this = server(ROOT, this_url, dirs(args)["this"], args.data_dir / "compare-this.log")
        first = (
            server(ROOT, this_url, args.data_dir / "compare-off", args.data_dir / "compare-off.log", OFF)
            if args.off
            else server(args.baseline, base_url, args.data_dir, args.data_dir / "compare-base.log")
        )
        sides = {"baseline": first, "this": this}
        try:
            chunks = {k: httpx.get(s.url + "/health", timeout=30).json().get("chunks") for k, s in sides.items()}
            for r in range(args.rounds):
                for side in ("baseline", "this") if r % 2 == 0 else ("this", "baseline"):
                    runs[side].append(
                        measure(sides[side], bodies, args, f"{label(args, side)}, round {r + 1}", bodies[:50])
                    )
                    print(runs[side][-1].row(), file=sys.stderr, flush=True)
        finally:
            for s in sides.values():
                s.stop()
    section = render(args, chunks, runs, load_before, os.getloadavg())
    print(section)
    if not args.no_write:
        write_section(args.section, section)


def questions_note(args: argparse.Namespace) -> str:
    if args.questions == "unseen":
        return (
            "Questions the servers had not seen: each side's server started afresh each round (an empty "
            "question memo), warmed with 50 questions, then sent SciFact's claims and Chroma's questions, "
            "none twice: every request embeds its question."
        )
    return (
        f"The {len(queries(DATASET))} SciFact questions are sent in turn, so after each server's first pass a "
        "question's embedding comes from the model's memory of its last 8,192 texts: these are figures of "
        "search with a warm question memo on both sides (the ratio compares like with like; the absolute req/s "
        "flatter a server that sees new questions)."
    )


def label(args: argparse.Namespace, side: str) -> str:
    return {"baseline": "metrics and log off", "this": "on"}[side] if args.off else side


def render(
    args: argparse.Namespace,
    chunks: dict,
    runs: dict[str, list[Run]],
    before: tuple[float, ...],
    after: tuple[float, ...],
) -> str:
    if args.off:
        return render_off(args, runs, before, after)

    def med(side: str, f) -> float:
        return statistics.median(f(run) for run in runs[side])

    rate = {s: med(s, lambda r: r.n / r.seconds) for s in runs}
    p50 = {s: med(s, lambda r: r.pct(50)) for s in runs}
    p95 = {s: med(s, lambda r: r.pct(95)) for s in runs}
    commit = subprocess.run(
        ["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return "\n".join(
        [
            f"<!-- {args.section}:start -->",
            "## Served capacity beside a baseline (`python bench/serve_compare.py --baseline ...`)",
            "",
            *([f"This checkout: {args.note}", ""] if args.note else []),
            f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores; load average "
            f"{before[0]:.2f} before, {after[0]:.2f} after (the machine is shared with other work). Baseline: "
            f"{commit}; this checkout serves a copy of the same database (upgraded in place into the knowledge base "
            f"`default` when the baseline had its tables in public). Chunks: baseline {chunks['baseline']:,}, this "
            f"{chunks['this']:,}. /search hybrid (query embedded per request), {args.clients} clients closed loop, "
            f"{args.rounds} rounds, the order alternating; each round at most {args.requests:,} requests or "
            f"{args.max_seconds:g} s per side. " + questions_note(args),
            "",
            "| run | requests | req/s | p50 ms | p95 ms | p99 ms | errors |",
            "|---|---|---|---|---|---|---|",
            *[run.row() for r in range(args.rounds) for side in ("baseline", "this") for run in [runs[side][r]]],
            "",
            f"Medians over the rounds: baseline {rate['baseline']:.1f} req/s, p50 {p50['baseline']:.1f} ms, p95 "
            f"{p95['baseline']:.1f} ms; this {rate['this']:.1f} req/s, p50 {p50['this']:.1f} ms, p95 {p95['this']:.1f} "
            f"ms. Ratio this/baseline: capacity {rate['this'] / rate['baseline']:.2f}x, p50 "
            f"{p50['this'] / p50['baseline']:.2f}x, p95 {p95['this'] / p95['baseline']:.2f}x.",
            f"<!-- {args.section}:end -->",
        ]
    )


def render_off(
    args: argparse.Namespace, runs: dict[str, list[Run]], before: tuple[float, ...], after: tuple[float, ...]
) -> str:
    p50 = {s: statistics.median(run.pct(50) for run in runs[s]) for s in runs}
    rate = {s: statistics.median(run.n / run.seconds for run in runs[s]) for s in runs}
    added = p50["this"] / p50["baseline"] - 1
    return "\n".join(
        [
            f"<!-- {args.section}:start -->",
            "## Metrics and logs, on and off (`python bench/serve_compare.py --baseline ... --off`)",
            "",
            f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores; load average "
            f"{before[0]:.2f} before, {after[0]:.2f} after. This checkout twice on the same 100k-chunk knowledge base: "
            "with `metrics = false` and `log_format = off`, and with both on (the defaults: every search observed, "
            "/metrics served, one request line a request to stderr, here a file). /search hybrid, "
            f"{args.clients} clients closed loop, {args.rounds} rounds, the order alternating; the questions repeat, "
            f"so "
            "the question memo is warm on both sides.",
            "",
            "| run | requests | req/s | p50 ms | p95 ms | p99 ms | errors |",
            "|---|---|---|---|---|---|---|",
            *[run.row() for r in range(args.rounds) for side in ("baseline", "this") for run in [runs[side][r]]],
            "",
            f"Medians over the rounds: off {rate['baseline']:.1f} req/s, p50 {p50['baseline']:.1f} ms; on "
            f"{rate['this']:.1f} req/s, p50 {p50['this']:.1f} ms. Metrics and logs add {added:+.1%} to the p50 "
            f"(goal <= +3%): {'met' if added <= 0.03 else 'missed'}.",
            f"<!-- {args.section}:end -->",
        ]
    )


if __name__ == "__main__":
    main()
