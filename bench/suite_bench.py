"""The whole test suite, timed side by side with another checkout of the project (today's main before a
change, say), interleaved so that both see the same machine load:

    python bench/suite_bench.py --baseline /work/baseline --rounds 2

Each round runs the baseline's suite, then this checkout's, each with its pytest arguments (default for both:
`-n 2`, pytest-xdist with one embedded PostgreSQL per worker, as .ci/run runs the suite; `--baseline-args ""` for a
baseline from before xdist), and records wall time, the counts pytest reports and the load average before each run.
The table goes to bench/RESULTS.md (section `test suite`).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common.results import markers, write_section

HERE = Path(__file__).resolve().parents[1]
BASE_ARGS = ["-q", "-p", "no:cacheprovider"]


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(where: Path, extra: list[str]) -> dict[str, object]:
    before = load()
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", *BASE_ARGS, *extra], cwd=where, capture_output=True,
                          text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    took = time.monotonic() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    return {"seconds": took, "load": before, "summary": summary.strip("= "), "counts": counts,
            "rc": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--args", default="-n 2", help="pytest arguments for this checkout (default: -n 2)")
    parser.add_argument("--baseline-args", default=None, help="pytest arguments for the baseline (default: --args)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    opts = parser.parse_args()
    extra = shlex.split(opts.args)
    base_extra = extra if opts.baseline_args is None else shlex.split(opts.baseline_args)
    rows = []
    for i in range(opts.rounds):
        for label, where, args in (("baseline", opts.baseline, base_extra), ("this", HERE, extra)):
            result = run(where, args)
            rows.append((i + 1, label, result))
            print(f"round {i + 1} {label}: {result['seconds']:.0f} s, load {result['load']}: {result['summary']}",
                  flush=True)
    base = [r["seconds"] for _, label, r in rows if label == "baseline"]
    this = [r["seconds"] for _, label, r in rows if label == "this"]
    ratio = sum(base) / sum(this)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                            text=True).stdout.strip()
    base_commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=opts.baseline, capture_output=True,
                                 text=True).stdout.strip()
    start, end = markers("test suite")
    lines = [start, "## test suite: the whole suite, side by side (`python bench/suite_bench.py`)", "",
             f"Baseline {base_commit} (`python -m pytest {' '.join(BASE_ARGS + base_extra)}`) against {commit} "
             f"(`python -m pytest {' '.join(BASE_ARGS + extra)}`), interleaved on this 2-core machine "
             "(load average before each run).", "",
             "| round | checkout | wall s | load (1, 5, 15 min) | pytest says |", "|---|---|---|---|---|"]
    for i, label, r in rows:
        lines.append(f"| {i} | {label} | {r['seconds']:.0f} | {r['load']} | {r['summary']} |")
    rounds = ", ".join(f"{b / t:.2f}x" for b, t in zip(base, this, strict=False))
    lines += ["", f"Total baseline {sum(base):.0f} s, this {sum(this):.0f} s: **{ratio:.2f}x** as fast "
              f"(round by round: {rounds}).", end]
    section = "\n".join(lines)
    print(section)
    if not opts.no_write:
        write_section("test suite", section)


if __name__ == "__main__":
    main()
