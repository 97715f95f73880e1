"""Peak memory of `ragvps chunk` on one large file of each shape, each run in a fresh process.

    python bench/memory_bench.py                      # 50 MB per shape, this tree
    python bench/memory_bench.py --baseline /work/main --size-mb 50 --shapes one_line,paragraphs

Each shape is written once under bench/out/memory/, then `python -m ragvps chunk FILE` runs in a child
process with its own data directory; the child's peak RSS comes from os.wait4's rusage (ru_maxrss), so no
sampling can miss a peak. With --baseline, the same file is chunked by another checkout (its path first on
PYTHONPATH), side by side. Every run is bounded by --timeout seconds.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import OUT as BENCH_OUT
from common import ROOT

OUT = BENCH_OUT / "memory"
GOAL_MB = 600

WORDS = (
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "with",
    "was",
    "on",
    "be",
    "by",
    "this",
    "are",
    "from",
    "at",
    "or",
    "an",
    "have",
    "not",
    "which",
    "database",
    "index",
    "vector",
    "chunk",
    "embedding",
    "server",
    "query",
    "search",
    "token",
    "model",
    "memory",
    "document",
)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def write_shape(shape: str, size: int, path: Path) -> None:
    """`size` bytes of Markdown of one shape."""
    rng = random.Random(7)
    with path.open("w", encoding="utf-8") as f:
        written = 0

        def put(s: str) -> None:
            nonlocal written
            f.write(s)
            written += len(s)

        if shape == "one_line":  # prose, one line, no newline at all
            while written < size:
                put(_words(rng, 2000) + ". ")
        elif shape == "no_spaces":  # one 50 MB "word"
            alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
            block = "".join(rng.choice(alphabet) for _ in range(1 << 16))
            while written < size:
                put(block)
        elif shape == "paragraphs":
            put("# A large document\n\n")
            n = 0
            while written < size:
                n += 1
                if n % 20 == 0:
                    put(f"## Section {n // 20}\n\n")
                put(_words(rng, rng.randint(40, 160)) + ".\n\n")
        elif shape == "table_row":  # a table whose one body row is the whole file
            put("| name | value |\n| --- | --- |\n|")
            while written < size:
                put(f" {_words(rng, 6)} |")
            put("\n")
        elif shape == "lines":  # short lines, never a blank one
            while written < size:
                put(_words(rng, rng.randint(3, 12)) + "\n")
        elif shape == "word_lines":  # one word a line: the most lines a file of this size holds
            while written < size:
                put(rng.choice(WORDS) + "\n")
        else:
            raise SystemExit(f"unknown shape {shape!r}")


SHAPES = ("one_line", "no_spaces", "paragraphs", "table_row", "lines", "word_lines")


def run_chunk(tree: Path, file: Path, timeout: float) -> dict[str, object]:
    """`ragvps chunk FILE` from `tree` in a child process: peak RSS (MB), seconds, exit status, chunks."""
    data = Path(tempfile.mkdtemp(prefix="membench-"))
    env = os.environ | {
        "PYTHONPATH": str(tree),
        "RAGVPS_DATA_DIR": str(data / "data"),
        "RAGVPS_CONFIG": str(data / "empty.toml"),
        "RAGVPS_EMBEDDER": "local",
    }
    (data / "empty.toml").write_text("")
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "chunk", str(file), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=data,
    )
    deadline = start + timeout
    status, usage = None, None
    while status is None:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = st, ru
        elif time.monotonic() > deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            status = -9
        else:
            time.sleep(0.2)
    seconds = time.monotonic() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    shutil.rmtree(data, ignore_errors=True)
    chunks = None
    if status == 0:
        import json

        chunks = json.loads(out)["chunks"]
    return {
        "peak_mb": usage.ru_maxrss / 1024 if usage else None,
        "seconds": seconds,
        "status": status,
        "chunks": chunks,
        "stderr": err.strip().splitlines()[-1:] if status else [],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=50)
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with (e.g. /work/main)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    size = int(args.size_mb * (1 << 20))
    print(f"{'shape':<11} {'tree':<9} {'peak RSS MB':>12} {'seconds':>8} {'chunks':>8}  goal <= {GOAL_MB} MB")
    for shape in args.shapes.split(","):
        file = OUT / f"{shape}-{args.size_mb:g}mb.md"
        if not file.exists():
            write_shape(shape, size, file)
        trees = [("this", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
        rows = {}
        for name, tree in trees:
            r = rows[name] = run_chunk(tree, file, args.timeout)
            verdict = ("ok" if r["peak_mb"] <= GOAL_MB else "OVER") if r["status"] == 0 else f"exit {r['status']}"
            print(
                f"{shape:<11} {name:<9} {r['peak_mb']:>12.0f} {r['seconds']:>8.1f} {r['chunks'] or '-':>8}  "
                f"{verdict} {' '.join(r['stderr'])}",
                flush=True,
            )
        if "baseline" in rows and rows["baseline"]["peak_mb"]:
            print(f"{shape:<11} ratio     {rows['this']['peak_mb'] / rows['baseline']['peak_mb']:>12.2f}")


if __name__ == "__main__":
    main()
