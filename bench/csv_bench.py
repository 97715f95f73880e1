"""A 1,000,000-row CSV through the ingest pipeline (issue 30, bad input): peak memory, rows/s, chunks, and how
often progress moves. One command, from the repository root (under the bench lock, on an otherwise idle machine):

    /work/notes/quiet.sh bench python bench/csv_bench.py     # rewrites its section of bench/RESULTS.md

The CSV is generated here (bench/out/csv, never committed): id, city, product, amount, date; --rows rows, and a
tenth of them for the comparison of how memory grows. Each size is ingested by a process of its own (its peak
RSS from the kernel, wait4) into a fresh database, with defer_embedding: the file is read, every chunk made
(each repeating the header row) and stored, keyword-searchable at once, and queued for `ragvps worker`.
Embedding 1,000,000 rows' chunks with the local model takes far longer than a bench should hold the machine,
so `ragvps worker` then embeds for --embed-seconds, stopped by SIGINT as a user would (the batch in hand ends
first): its chunks/s and peak RSS give the time the rest would take.

--before CHECKOUT measures another checkout's ragvps the same way, beside this one (for example a worktree of
main before a change: `git worktree add --detach /tmp/before main`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import OUT, ROOT
from common.databases import fresh
from common.results import write_section

WORK = OUT / "csv"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make_csv(path: Path, rows: int) -> int:
    """The CSV, written row by row; its size in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as f:
        f.write("id,city,product,amount,date\n")
        for n in range(rows):
            f.write(
                f"{n},city {n % 97},product {n % 1013},{(n * 37) % 100000 / 100:.2f},"
                f"2024-{n % 12 + 1:02d}-{n % 28 + 1:02d}\n"
            )
    return path.stat().st_size


def env_for(url: str, data_dir: Path, root: Path = ROOT) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    (WORK / "no-config.toml").touch()
    return env | {
        "PYTHONPATH": str(root),
        "RAGVPS_DATABASE_URL": url,
        "RAGVPS_DATA_DIR": str(data_dir),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(WORK / "no-config.toml"),
    }


def measured(args: list[str], env: dict[str, str], stop_after: float | None = None) -> tuple[float, float, str]:
    """Run a process to its end (SIGINT after `stop_after` seconds, if given): wall seconds, its peak RSS in MB
    (the kernel's, from wait4), its stdout."""
    out_path, err_path = WORK / "child.out", WORK / "child.err"
    start = time.perf_counter()
    with out_path.open("w") as out, err_path.open("w") as err:
        proc = subprocess.Popen(args, env=env, cwd=ROOT, stdout=out, stderr=err)
    timer = threading.Timer(stop_after, os.kill, (proc.pid, signal.SIGINT)) if stop_after else None
    if timer:
        timer.start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if timer:
        timer.cancel()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {err_path.read_text()[-3000:]}")
    return time.perf_counter() - start, usage.ru_maxrss / 1024, out_path.read_text()


def child(folder: Path) -> None:
    """In the measured process: ingest the folder, recording each progress call; the figures as JSON. The ragvps
    measured is the checkout in CSV_BENCH_CODE (importing `common` put this one first on sys.path)."""
    assert "ragvps" not in sys.modules
    sys.path.insert(0, os.environ["CSV_BENCH_CODE"])
    from ragvps.app import App
    from ragvps.config import load_settings

    seen: dict[str, list[float]] = {}
    start = time.perf_counter()

    def progress(stage: str, done: int, total: int) -> None:
        seen.setdefault(stage, []).append(time.perf_counter() - start)

    with App.open(load_settings(env=dict(os.environ) | {"RAGVPS_DEFER_EMBEDDING": "true"})) as app:
        _ = app.spec  # the tokenizers loaded: what follows is the ingest's own memory
        start_mb = reset_peak()
        report = app.ingest(folder, progress)
    ingest_peak_mb = status_mb("VmHWM")
    seconds = time.perf_counter() - start
    stages = {}
    for stage, times in seen.items():
        marks = [0.0, *times]
        stages[stage] = {
            "updates": len(times),
            "last_s": round(times[-1], 1),
            "longest_gap_s": round(max(b - a for a, b in zip(marks, marks[1:], strict=False)), 1),
        }
    print(
        json.dumps(
            {
                "seconds": seconds,
                "chunks": report.chunks,
                "documents": report.documents,
                "start_mb": start_mb,
                "ingest_peak_mb": ingest_peak_mb,
                "queued": report.queued,
                "stages": stages,
            }
        )
    )


def status_mb(field: str) -> float:
    """A figure of /proc/self/status (VmRSS, VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak() -> float:
    """Start the process's peak RSS (VmHWM) again from its RSS now (Linux: clear_refs 5); that RSS in MB."""
    Path("/proc/self/clear_refs").write_text("5")
    return status_mb("VmRSS")


def one_size(rows: int, admin: str, root: Path = ROOT, label: str = "this") -> dict:
    """Ingest a CSV of `rows` rows with the ragvps of checkout `root`, in a process of its own."""
    folder = WORK / f"rows-{rows}"
    if not (folder / "big.csv").exists() or (folder / "rows").read_text() != str(rows):
        shutil.rmtree(folder, ignore_errors=True)
        make_csv(folder / "big.csv", rows)
        (folder / "rows").write_text(str(rows))
    size = (folder / "big.csv").stat().st_size
    shutil.rmtree(WORK / f"data-{rows}", ignore_errors=True)
    env = env_for(fresh(admin, f"csv_{rows}"), WORK / f"data-{rows}", root) | {"CSV_BENCH_CODE": str(root)}
    log(f"{label}: {rows:,} rows ({size / 1e6:.1f} MB): ingest with defer_embedding")
    seconds, peak, out = measured([sys.executable, str(ROOT / "bench" / "csv_bench.py"), "--child", str(folder)], env)
    figures = json.loads(out.strip().splitlines()[-1])
    log(f"  {seconds:.1f} s, peak RSS {peak:.0f} MB, {figures['chunks']:,} chunks")
    return {"rows": rows, "bytes": size, "wall_s": seconds, "peak_mb": peak, "env": env, "label": label} | figures


def embed_sample(env: dict[str, str], seconds: float) -> dict:
    log(f"ragvps worker for {seconds:.0f} s")
    wall, peak, out = measured([sys.executable, "-m", "ragvps", "worker", "--json"], env, stop_after=seconds)
    report = json.loads(out)
    return {"wall_s": wall, "peak_mb": peak, "embedded": report["embedded"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--embed-seconds", type=float, default=60.0, help="How long `ragvps worker` embeds.")
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    parser.add_argument("--before", type=Path, help="Another checkout (of main before a change) measured beside.")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child)
    from ragvps.config import load_settings
    from ragvps.db.embedded import embedded_url

    WORK.mkdir(parents=True, exist_ok=True)
    uptime = [subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()]
    admin = embedded_url(load_settings(env={"RAGVPS_DATA_DIR": str(WORK / "pg-home")}))
    before = (
        [one_size(rows, admin, args.before, "before") for rows in (args.rows // 10, args.rows)] if args.before else []
    )
    sizes = [one_size(rows, admin) for rows in (args.rows // 10, args.rows)]
    embed = embed_sample(sizes[-1]["env"], args.embed_seconds)
    uptime.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    section = report(before, sizes, embed, uptime)
    print(section)
    if not args.no_write:
        write_section("csv_bench", section)


def growth(sizes: list[dict]) -> float:
    """MB of peak RSS during the ingest for each further MB of CSV, from the smaller file to the larger."""
    small, big = sizes[0], sizes[-1]
    return (big["ingest_peak_mb"] - small["ingest_peak_mb"]) / max(big["bytes"] - small["bytes"], 1) * 1e6


def table_row(s: dict) -> str:
    gaps = ", ".join(
        f"`{name}` {v['updates']:,} updates (longest gap {v['longest_gap_s']:.1f} s)" for name, v in s["stages"].items()
    )
    return (
        f"| {s['label']} | {s['rows']:,} | {s['bytes'] / 1e6:.1f} | {s['wall_s']:.1f} | "
        f"{s['rows'] / s['seconds']:,.0f} | {s['chunks']:,} | {s['documents']:,} | {s['peak_mb']:,.0f} | "
        f"{s['start_mb']:,.0f} | {s['ingest_peak_mb']:,.0f} | {gaps} |"
    )


def report(before: list[dict], sizes: list[dict], embed: dict, uptime: list[str]) -> str:
    big = sizes[-1]
    rate = embed["embedded"] / embed["wall_s"]
    then = (
        f" Before (--before, the checkout measured beside): {growth(before):.1f} MB for each further MB."
        if before
        else ""
    )
    return "\n".join(
        [
            "<!-- csv_bench:start -->",
            "## A 1,000,000-row CSV (`python bench/csv_bench.py`)",
            "",
            f"Generated CSVs (id, city, product, amount, date), each ingested by a process of its own into a fresh "
            f"database with defer_embedding (read, chunk with the header row repeated in every chunk, store: keyword-"
            f"searchable at once, queued for `ragvps worker`). Peak RSS is the kernel's for that process (wait4). "
            f"`uptime` before: {uptime[0]}; after: {uptime[1]}.",
            "",
            "| code | rows | MB | seconds (process) | rows/s (ingest) | chunks | documents | peak RSS MB (process) "
            "| RSS MB at the ingest's start | peak RSS MB during the ingest | progress |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
            *[table_row(s) for s in before + sizes],
            "",
            "The process's peak includes loading the tokenizers and libraries, which can hide the table's own memory; "
            "so the child also restarts its peak (Linux clear_refs) once the tokenizers are loaded and reads it at the "
            "ingest's end (VmHWM).",
            "",
            f"Peak RSS during the ingest for each further MB of CSV: {growth(sizes):.1f} MB.{then} A CSV over 4 MB is "
            "read in parts of 5,000 rows (ragvps/ingest/parts.py), each a document whose table repeats the header row, "
            "chunked, embedded (or queued) and stored before the next part is read; progress `rows big.csv` moves once "
            "a part.",
            "",
            f"Embedding, `ragvps worker` for {embed['wall_s']:.0f} s (SIGINT, its batch finished first): "
            f"{embed['embedded']:,} chunks, {rate:.1f} chunks/s including its start, peak RSS {embed['peak_mb']:,.0f} "
            f"MB; "
            f"the {big['chunks']:,} chunks of {big['rows']:,} rows would take about "
            f"{big['chunks'] / max(rate, 1e-9) / 60:,.0f} minutes on this machine.",
            "<!-- csv_bench:end -->",
        ]
    )


if __name__ == "__main__":
    main()
