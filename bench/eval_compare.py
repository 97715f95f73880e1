"""Retrieval quality side by side: a baseline checkout's `bench/eval_bench.py` on SciFact, then this checkout's on
a copy of the same data directory, upgraded in place (issue 29: knowledge bases must not change retrieval, and
the upgrade must re-embed nothing).

    python bench/eval_compare.py --baseline /work/baseline [--data-dir bench/out/scifact-base]

The baseline ingests SciFact into --data-dir (its first run embeds ~11k chunks: about 10 minutes on an idle
2-core machine, 36 beside other work) and evaluates; the directory is copied (its embedded PostgreSQL stopped
first) and this checkout ingests the same corpus into the copy (the upgrade moves the tables into the knowledge
base `default`; the embedding cache answers every chunk) and evaluates. Figures go to bench/RESULTS.md, section
"eval_compare".
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from common import ROOT
from common.results import write_section


def run_eval(tree: Path, data_dir: Path) -> str:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "no-config.toml").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {"PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "bench/eval_bench.py", "--data-dir", str(data_dir), "--no-write"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def stop_embedded(data_dir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    env |= {"RAGVPS_DATA_DIR": str(data_dir), "RAGVPS_CONFIG": str(data_dir / "no-config.toml")}
    subprocess.run(
        [sys.executable, "-m", "ragvps", "server", "stop"], cwd=ROOT, env=env, check=True, capture_output=True
    )


def table(section: str) -> list[str]:
    return [line for line in section.splitlines() if re.match(r"\| (vector|keyword|hybrid) \|", line)]


def ingest_line(section: str) -> str:
    found = re.search(r"Ingest in this run: [^.]*\.", section)
    return found.group(0) if found else "(no ingest line)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "out" / "scifact-base")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    copy = args.data_dir.with_name(args.data_dir.name + "-upgraded")
    load_before = os.getloadavg()
    base = run_eval(args.baseline, args.data_dir)
    stop_embedded(args.data_dir)
    if copy.exists():
        stop_embedded(copy)
        shutil.rmtree(copy)
    subprocess.run(["cp", "-a", str(args.data_dir), str(copy)], check=True)  # owners kept (the embedded server's)
    this = run_eval(ROOT, copy)
    stop_embedded(copy)
    commit = subprocess.run(
        ["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    rows = [f"| baseline {commit} |{row[1:]}" for row in table(base)] + [f"| this |{row[1:]}" for row in table(this)]
    section = "\n".join(
        [
            "<!-- eval_compare:start -->",
            "## Retrieval quality beside the baseline (`python bench/eval_compare.py --baseline ...`)",
            "",
            f"{datetime.date.today().isoformat()}; load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} "
            "after (shared machine). SciFact train (809 queries), default settings, local model. The baseline "
            "ingested and evaluated; this checkout evaluated a copy of its data directory, upgraded in place into the "
            "knowledge base `default`.",
            "",
            "| checkout | mode | recall@10 | MRR@10 | nDCG@10 | no hit in top 40 chunks |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Baseline: {ingest_line(base)} This checkout, on the upgraded copy: {ingest_line(this)}",
            "<!-- eval_compare:end -->",
        ]
    )
    print(section)
    if not args.no_write:
        write_section("eval_compare", section)


if __name__ == "__main__":
    main()
