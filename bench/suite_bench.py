"""The whole test suite, timed side by side with another checkout of the project (today's main before a
change, say), interleaved so that both see the same machine load:

    python bench/suite_bench.py --baseline /work/baseline --rounds 2

Each round runs the baseline's suite, then this checkout's, each with its pytest arguments, as each one's .ci/run
runs it (defaults: `-n 3` here, three pytest-xdist workers with one embedded PostgreSQL each; `-n 2` for the
baseline, 4799254, whose README said so; `--baseline-args ""` for a baseline from before xdist), and records
wall time, the counts pytest reports and the load average before each run.
Each side runs its own code: pytest starts in its checkout with PYTHONPATH set to it (and the tests give their
`ragvps` subprocesses the same), which the bench checks before it times anything.

`--like-for-like` adds a third run to each round: this checkout's suite cut to the tests the baseline has too (by
test function: a node id without its parameters, so a test whose parameters were renamed or added still counts;
the others are deselected by node id), against the baseline's whole suite, so that the tests added since do not hide
what became of the old ones. The table goes to bench/RESULTS.md (section `test suite`).
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


def env_for(where: Path) -> dict[str, str]:
    """This environment with PYTHONPATH set to the checkout: `import ragvps` finds its code, not an editable one."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(where)}


def check_imports(where: Path) -> str:
    """Where `ragvps` comes from for a run in `where`; stops the bench if it is not that checkout."""
    found = subprocess.run(
        [sys.executable, "-c", "import ragvps; print(ragvps.__file__)"],
        cwd=where,
        env=env_for(where),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(where.resolve()):
        sys.exit(f"a run in {where} imports ragvps from {found}")
    return found


def collected(where: Path) -> list[str]:
    """The node ids pytest collects in `where` (the default selection: `-m 'not slow'`)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *BASE_ARGS, "--collect-only"],
        cwd=where,
        env=env_for(where),
        capture_output=True,
        text=True,
    )
    return [line for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def function(node_id: str) -> str:
    return node_id.split("[", 1)[0]


def added_since(baseline: Path) -> list[str]:
    """This checkout's tests whose test function the baseline does not have."""
    old = {function(n) for n in collected(baseline)}
    return [n for n in collected(HERE) if function(n) not in old]


def run(where: Path, extra: list[str]) -> dict[str, object]:
    before = load()
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *BASE_ARGS, *extra],
        cwd=where,
        capture_output=True,
        text=True,
        env=env_for(where),
    )
    took = time.monotonic() - start
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", summary)}
    return {"seconds": took, "load": before, "summary": summary.strip("= "), "counts": counts, "rc": done.returncode}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--args", default="-n 3", help="pytest arguments for this checkout (default: -n 3)")
    parser.add_argument("--baseline-args", default="-n 2", help="pytest arguments for the baseline (default: -n 2)")
    parser.add_argument(
        "--like-for-like",
        action="store_true",
        help="also run this checkout's suite cut to the test functions the baseline has",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; leave bench/RESULTS.md alone")
    opts = parser.parse_args()
    extra = shlex.split(opts.args)
    base_extra = shlex.split(opts.baseline_args)
    for where in (opts.baseline, HERE):
        print(f"{where}: ragvps from {check_imports(where)}", flush=True)
    runs = [("baseline", opts.baseline, base_extra), ("this", HERE, extra)]
    new: list[str] = []
    if opts.like_for_like:
        new = added_since(opts.baseline)
        print(
            f"like for like: {len(new)} tests of this checkout deselected (test functions the baseline lacks)",
            flush=True,
        )
        runs.append(("this, like for like", HERE, extra + [a for n in new for a in ("--deselect", n)]))
    rows = []
    for i in range(opts.rounds):
        for label, where, args in runs:
            result = run(where, args)
            rows.append((i + 1, label, result))
            print(
                f"round {i + 1} {label}: {result['seconds']:.0f} s, load {result['load']}: {result['summary']}",
                flush=True,
            )
    seconds = {label: [r["seconds"] for _, lab, r in rows if lab == label] for label, _, _ in runs}
    base = seconds["baseline"]
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
    ).stdout.strip()
    base_commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=opts.baseline, capture_output=True, text=True
    ).stdout.strip()
    start, end = markers("test suite")
    lines = [
        start,
        "## test suite: the whole suite, side by side (`python bench/suite_bench.py`)",
        "",
        f"Baseline {base_commit} (`python -m pytest {' '.join(BASE_ARGS + base_extra)}`) against {commit} "
        f"(`python -m pytest {' '.join(BASE_ARGS + extra)}`), interleaved on this 2-core machine "
        "(load average before each run), each side with PYTHONPATH set to its own checkout.",
    ]
    if opts.like_for_like:
        lines += [
            "",
            f"Like for like: {commit}'s suite without the {len(new)} tests whose test function the baseline "
            "lacks (a node id without its parameters; deselected by node id), against the baseline's whole "
            "suite.",
        ]
    lines += ["", "| round | checkout | wall s | load (1, 5, 15 min) | pytest says |", "|---|---|---|---|---|"]
    for i, label, r in rows:
        lines.append(f"| {i} | {label} | {r['seconds']:.0f} | {r['load']} | {r['summary']} |")
    lines.append("")
    for label, this in seconds.items():
        if label == "baseline":
            continue
        rounds = ", ".join(f"{b / t:.2f}x" for b, t in zip(base, this, strict=False))
        lines.append(
            f"- {label}: baseline {sum(base):.0f} s, this {sum(this):.0f} s: **{sum(base) / sum(this):.2f}x** "
            f"as fast (round by round: {rounds})."
        )
    lines.append(end)
    section = "\n".join(lines)
    print(section)
    if not opts.no_write:
        write_section("test suite", section)


if __name__ == "__main__":
    main()
