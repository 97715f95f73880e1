"""The default test suite on a busy machine (issue 51): processes spinning at normal priority keep the 1-minute
load average near --load on this machine's cores while `python -m pytest -n 3` runs with every deadline stretched
(RAGVPS_TEST_TIME_SCALE), bounded in time. One command, from the repository root, under the exclusive quiet lock:

    flock -x /work/quiet.lock python bench/suite_under_load.py --spin 9 --scale 3
    python bench/suite_under_load.py --compare QUIET.log LOADED.log     # which tests grew most, from two logs

Prints pytest's verdict, the load average every 30 s, and the slowest tests (--durations); with --compare, the
tests both logs list by how many times longer they took in the second: what grows worst with contention.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import ROOT
from common.busy import spinners as spinning

DURATION = re.compile(r"([\d.]+)s (setup|call|teardown)\s+(\S+)")


def durations(log: str) -> dict[tuple[str, str], float]:
    """pytest's --durations lines of a log: (test, phase) -> seconds."""
    found: dict[tuple[str, str], float] = {}
    listing = False
    for line in log.splitlines():
        if "slowest" in line and "durations" in line:
            listing = True
        elif listing and (m := DURATION.match(line)):
            found[(m.group(3), m.group(2))] = float(m.group(1))
        elif listing and line.startswith("="):
            break
    return found


def compare(quiet: str, loaded: str) -> list[str]:
    a, b = durations(quiet), durations(loaded)
    rows = sorted(((b[k] / a[k], a[k], b[k], k) for k in a.keys() & b.keys()), reverse=True)
    out = ["| test (phase) | quiet s | loaded s | ratio |", "|---|---:|---:|---:|"]
    out += [f"| {k[0]} ({k[1]}) | {q:.1f} | {x:.1f} | {r:.1f}x |" for r, q, x, k in rows]
    return out


def run(spin: int, scale: float, max_s: int, settle_s: int, args: list[str]) -> None:
    spinners = spinning(spin, max_s + settle_s)
    loads: list[str] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(30 if loads else 0):
            loads.append(f"{time.strftime('%H:%M:%S', time.gmtime())} {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

    threading.Thread(target=sample, daemon=True).start()
    try:
        time.sleep(settle_s)  # the 1-minute average reaches the spinners' level before the suite starts
        env = os.environ | {"RAGVPS_TEST_TIME_SCALE": str(scale)}
        start = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "3", "-q", "-p", "no:cacheprovider", "--durations=40", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=max_s,
        )
        took = time.monotonic() - start
    finally:
        done.set()
        for p in spinners:
            p.kill()
            p.wait()
    verdict = [line for line in out.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)][-1:]
    print(f"{spin} spinners, RAGVPS_TEST_TIME_SCALE={scale}: exit {out.returncode} in {took:.0f} s: {verdict}")
    print("load (1, 5, 15 min):", "; ".join(loads))
    print("\n".join(line for line in out.stdout.splitlines() if line.startswith("FAILED")))
    print("\n".join(f"{s:.1f}s {ph} {t}" for (t, ph), s in durations(out.stdout).items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spin", type=int, default=9, help="Processes spinning at normal priority.")
    parser.add_argument("--scale", type=float, default=3.0, help="RAGVPS_TEST_TIME_SCALE for the suite.")
    parser.add_argument("--max-seconds", type=int, default=3600, help="The suite is stopped after this long.")
    parser.add_argument("--settle", type=int, default=60, help="Seconds of spinning before the suite starts.")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("QUIET", "LOADED"), help="Two pytest logs.")
    parser.add_argument("pytest_args", nargs="*", help="Test files or options for pytest (default: the suite).")
    args = parser.parse_args()
    if args.compare:
        print("\n".join(compare(args.compare[0].read_text(), args.compare[1].read_text())))
        return
    run(args.spin, args.scale, args.max_seconds, args.settle, args.pytest_args)


if __name__ == "__main__":
    main()
