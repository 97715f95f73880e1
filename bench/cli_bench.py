"""Wall time of `ragvps --help` and `ragvps query` for this checkout and a baseline commit, interleaved.

    python bench/cli_bench.py [--baseline 623ba01] [--runs 10]

The baseline is checked out into bench/out/cli-baseline (a git worktree); both run as `python -m ragvps`
with their own source on PYTHONPATH, against the same embedded database and data directory (the docs/
folder ingested once), so the only difference is the code. Runs alternate between the two.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import OUT, ROOT

QUESTION = "what happens when I run ingest twice?"


def run(source: Path, args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ragvps", *args],
        cwd=OUT / "cli-work",
        env=env | {"PYTHONPATH": str(source)},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", default="623ba01", help="the commit to compare with (before the app layer)")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    base = OUT / "cli-baseline"
    if base.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=ROOT, check=True, capture_output=True
    )
    work = OUT / "cli-work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT / "docs", work / "docs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {"RAGVPS_DATA_DIR": str(work / "data")}
    subprocess.run(
        [sys.executable, "-m", "ragvps", "ingest", "docs"],
        cwd=work,
        env=env | {"PYTHONPATH": str(ROOT)},
        check=True,
        capture_output=True,
    )
    commands = {"--help": ["--help"], "query": ["query", QUESTION]}
    times: dict[tuple[str, str], list[float]] = {}
    for name, cmd in commands.items():
        for source in (base, ROOT):
            run(source, cmd, env)  # warm the page cache and the embedded server
        for _ in range(args.runs):
            for who, source in (("baseline", base), ("current", ROOT)):
                times.setdefault((name, who), []).append(run(source, cmd, env))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.runs} runs each, interleaved")
    print(f"{'command':<10} {'baseline median s':>18} {'current median s':>17} {'current/baseline':>17}")
    for name in commands:
        b, c = statistics.median(times[(name, "baseline")]), statistics.median(times[(name, "current")])
        print(f"{name:<10} {b:>18.3f} {c:>17.3f} {c / b:>17.2f}")
    subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
