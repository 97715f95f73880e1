"""The memory a keyless `ragvps serve` (extractive answers, the local model) keeps after bursts of questions (issue 51
part 7): RSS after a warm-up, then after each of three rounds of 64 /ask at once (questions it has not seen, each
answer embedding its candidate sentences), then after 12 s idle. This checkout beside another (--baseline), one after
the other in one run, each over its own copy of docs/ in the embedded PostgreSQL.

    flock -x /work/quiet.lock python bench/serve_memory.py --baseline ../base    # rewrites its section of RESULTS.md
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import subprocess
import time
from pathlib import Path

import httpx
import psutil
from common import OUT, ROOT
from common.results import markers, write_section
from support.serve_server import Server, ragvps, ragvps_env

WORK = OUT / "serve_memory"
AT_ONCE = 64
ROUNDS = 3


def questions() -> list[str]:
    import json

    rows = (ROOT / "bench" / "data" / "docs_gold.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["question"] for line in rows if line.strip()]


def measure(label: str, checkout: Path) -> dict[str, object]:
    data = WORK / label.split()[0]
    shutil.rmtree(data, ignore_errors=True)
    env = ragvps_env("", data / "data") | {"PYTHONPATH": str(checkout)}
    done = ragvps(env, "ingest", str(ROOT / "docs"))
    assert done.returncode == 0, done.stderr
    srv = Server(env, data / "serve.log", key=None, cwd=checkout).start(timeout=300)
    assert srv.proc is not None
    proc = psutil.Process(srv.proc.pid)

    def rss() -> float:
        return float(proc.memory_info().rss / 2**20)

    asked = questions()
    try:
        with httpx.Client(base_url=srv.url, timeout=300) as c:
            for q in asked[:4]:
                c.post("/ask", json={"question": q}).raise_for_status()
        time.sleep(1)
        out: dict[str, object] = {"label": label, "start": rss(), "rounds": [], "failed": 0}
        for rnd in range(ROUNDS):
            texts = [f"{asked[i % len(asked)]} ({rnd}.{i}.{os.getpid()})" for i in range(AT_ONCE)]

            def ask(text: str) -> int:
                with httpx.Client(base_url=srv.url, timeout=300) as c:
                    return c.post("/ask", json={"question": text}).status_code

            with concurrent.futures.ThreadPoolExecutor(AT_ONCE) as pool:
                codes = list(pool.map(ask, texts))
            out["failed"] = int(out["failed"]) + sum(code != 200 for code in codes)  # type: ignore[call-overload]
            time.sleep(2)
            out["rounds"].append(rss())  # type: ignore[attr-defined]
        time.sleep(12)
        out["idle"] = rss()
        return out
    finally:
        srv.stop()


def row(r: dict[str, object]) -> str:
    rounds = " / ".join(f"{x:.0f}" for x in r["rounds"])  # type: ignore[attr-defined]
    grew = float(r["idle"]) - float(r["start"])  # type: ignore[arg-type]
    return f"| {r['label']} | {r['start']:.0f} | {rounds} | {r['idle']:.0f} | **{grew:+.0f}** | {r['failed']} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="Another checkout, measured first.")
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    args = parser.parse_args()
    uptime = [subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()]
    runs = [measure("baseline", args.baseline)] if args.baseline else []
    runs.append(measure("this checkout", ROOT))
    uptime.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    start, end = markers("serve_memory")
    section = "\n".join(
        [
            start,
            "## The server's memory after bursts of questions (bench/serve_memory.py)",
            "",
            "`flock -x /work/quiet.lock python bench/serve_memory.py --baseline ../base`: a keyless `ragvps serve`"
            f" (extractive answers, the local model) over docs/; RSS in MB after 4 warm-up asks, after each of"
            f" {ROUNDS} rounds of {AT_ONCE} /ask at once (questions it has not seen), and after 12 s idle.",
            "",
            "| server | start | after each round | after 12 s idle | grew | failed asks |",
            "|---|---|---|---|---|---|",
            *[row(r) for r in runs],
            "",
            f"Load: `{uptime[0]}` before, `{uptime[-1]}` after.",
            end,
        ]
    )
    print(section)
    if not args.no_write:
        write_section("serve_memory", section)


if __name__ == "__main__":
    main()
