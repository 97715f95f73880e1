"""Where the test suite's wall time goes, worker by worker: a pytest plugin and its report.

    SUITE_TIMELINE=/tmp/t.jsonl PYTHONPATH=bench python -m pytest -n 3 -p suite_timeline
    python bench/suite_timeline.py /tmp/t.jsonl

The plugin appends one JSON line per test phase (setup, call, teardown) with the xdist worker, the test's
xdist group and its start and stop times. The report says, per worker, how long it was busy and when it
finished (the suite ends with the last one), which groups and files it spent that on, and the longest
phases: what to move or shorten to bring the end forward.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """In the process that ran the test (an xdist worker), so each phase is written once."""
    outcome = yield
    path = os.environ.get("SUITE_TIMELINE")
    if not path:
        return
    group = next((str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args), "")
    line = {
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "test": item.nodeid,
        "when": call.when,
        "start": call.start,
        "stop": call.stop,
        "group": group,
    }
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    outcome.get_result()


def report(path: Path, top: int = 25) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    t0 = min(r["start"] for r in rows)
    by_worker: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_worker[r["worker"]].append(r)
    end = max(r["stop"] for r in rows) - t0
    print(f"{len(rows)} phases, first start to last stop {end:.1f} s")
    for worker, rs in sorted(by_worker.items()):
        busy = sum(r["stop"] - r["start"] for r in rs)
        first, last = min(r["start"] for r in rs) - t0, max(r["stop"] for r in rs) - t0
        print(f"\n{worker}: {first:.1f}-{last:.1f} s, busy {busy:.1f} s, idle at the end {end - last:.1f} s")
        groups: dict[str, float] = defaultdict(float)
        files: dict[str, float] = defaultdict(float)
        for r in rs:
            groups[r["group"] or "-"] += r["stop"] - r["start"]
            files[r["test"].split("::")[0]] += r["stop"] - r["start"]
        print("  groups: " + ", ".join(f"{g} {s:.1f}" for g, s in sorted(groups.items(), key=lambda x: -x[1])))
        print(
            "  files:  "
            + ", ".join(f"{Path(f).stem} {s:.1f}" for f, s in sorted(files.items(), key=lambda x: -x[1])[:12])
        )
    print(f"\nlongest {top} phases:")
    for r in sorted(rows, key=lambda r: r["start"] - r["stop"])[:top]:
        print(f"  {r['stop'] - r['start']:6.1f} s  {r['worker']:5} {r['when']:8} {r['test']} {r['group']}")


if __name__ == "__main__":
    report(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25)
