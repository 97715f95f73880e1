"""SciFact retrieval benchmark: ingest the corpus, `ragvps eval` its 809 train queries in three modes, write RESULTS.md.

    python bench/eval_bench.py [--data-dir bench/out/scifact] [--no-write]

The data directory keeps the embedded database and the embedding cache, so a rerun only re-embeds what
changed (a new chunker, a new model). Runs the real CLI in subprocesses, from this checkout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from common import DATA as SHARED_DATA
from common import ROOT
from common.results import RESULTS, markers, write_section

DATA = SHARED_DATA / "scifact-dev"
START, END = markers("eval_bench")

# Published figures (BEIR SciFact *test* split, nDCG@10), from ../shared/data/README.md and FACTS.md.
REFERENCES = [
    ("BM25 (bm25s)", "keyword", 0.687),
    ("Postgres full-text ts_rank", "keyword", 0.569),
    ("all-MiniLM-L6-v2", "vector", 0.645),
    ("nomic-embed-text-v1.5", "vector", 0.703),
    ("hybrid RRF, Postgres full-text + dense (QuackIR)", "hybrid", 0.680),
    ("hybrid RRF, BM25 + dense", "hybrid", 0.744),
    ("published recipe measured here (MiniLM int8, 300-word chunks, websearch ts_rank_cd, RRF 60)", "vector", 0.648),
    ("same recipe", "keyword", 0.072),
    ("same recipe", "hybrid", 0.660),
]


def ragvps(env: dict[str, str], *args: str, check: bool = True) -> tuple[dict | None, float]:
    """Run the CLI with --json; its JSON output and wall seconds (stderr passes through: the progress bars)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ragvps", *args, "--json"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    if done.returncode != 0:
        if check:
            sys.exit(f"ragvps {' '.join(args)} failed with exit code {done.returncode}")
        return None, time.perf_counter() - start
    return json.loads(done.stdout), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="A BEIR folder: corpus.jsonl, queries.jsonl, qrels.tsv")
    parser.add_argument("--data-dir", type=Path, default=ROOT / "bench" / "out" / "scifact")
    parser.add_argument("--no-write", action="store_true", help="Print the section, leave RESULTS.md alone.")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    env |= {
        "RAGVPS_DATA_DIR": str(args.data_dir),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(args.data_dir / "no-config.toml"),
    }
    args.data_dir.mkdir(parents=True, exist_ok=True)
    (args.data_dir / "no-config.toml").touch()  # none of this machine's config: the defaults
    load_before = os.getloadavg()

    data = args.data
    ingest, ingest_s = ragvps(env, "ingest", str(data / "corpus.jsonl"))
    report = args.data_dir / "eval-report.html"
    result, eval_s = ragvps(
        env,
        "eval",
        "--queries",
        str(data / "queries.jsonl"),
        "--qrels",
        str(data / "qrels.tsv"),
        "--report",
        str(report),
    )
    check, check_s = ragvps(env, "check-index", "--sample", "200", check=False)  # needs an HNSW index
    stats, _ = ragvps(env, "stats")
    assert ingest is not None and result is not None and stats is not None

    section = render(
        data, ingest, ingest_s, result, eval_s, check, check_s, stats, load_before, os.getloadavg(), report
    )
    print(section)
    if not args.no_write:
        write_section("eval_bench", section)
        print(f"written to {RESULTS}", file=sys.stderr)


def render(
    data: Path,
    ingest: dict,
    ingest_s: float,
    result: dict,
    eval_s: float,
    check: dict | None,
    check_s: float,
    stats: dict,
    load_before: tuple[float, ...],
    load_after: tuple[float, ...],
    report: Path,
) -> str:
    k = result["k"]
    rows = [
        f"| {mode} | {m[f'recall@{k}']:.3f} | {m[f'mrr@{k}']:.3f} | {m[f'ndcg@{k}']:.3f} | {m['no_hit']} |"
        for mode, m in result["modes"].items()
    ]
    refs = [f"| {name} | {kind} | {v:.3f} |" for name, kind, v in REFERENCES]
    curve = " | ".join(
        f"{mode} " + " / ".join(f"{m['recall_curve'][j - 1]:.3f}" for j in (1, 5, 20, result["depth"]))
        for mode, m in result["modes"].items()
    )
    if check is None:
        index = "Index: no HNSW index (fewer chunks than index_min_rows), so every search is exact."
    else:
        overlap = ", ".join(f"ef {ef}: {v:.3f}" for ef, v in check["overlap"].items())
        index = (
            f"Index: `ragvps check-index --sample 200` (chunk vectors, each without itself), top-{check['k']} "
            f"overlap of HNSW with exact search: {overlap}; ef_search {check['ef_search_for_target']} reaches "
            f"{check['target']} (current {check['current_ef_search']}; {check_s:.0f} s)."
        )
    vec = stats["tables"][stats["embedding_set"]["table"]]
    mb = 1024**2
    index_mb = (stats["vector_index"]["bytes"] or 0) / mb
    chunks_table = stats["tables"]["chunks"]
    terms = stats["tables"].get("chunk_terms", {"indexes": {}})  # the keyword leg's table (migration 010)
    gin = terms["indexes"].get("chunk_terms_tsv_idx", {}).get("bytes", 0)
    return "\n".join(
        [
            START,
            f"## eval_bench: {data.name}, three search modes",
            "",
            f"`python bench/eval_bench.py` ({datetime.date.today().isoformat()}; {platform.node()}, "
            f"{os.cpu_count()} cores, shared: load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
            "default settings, local model all-MiniLM-L6-v2 int8, the chunker and keyword leg of this checkout).",
            "",
            f"Corpus: {ingest['documents']:,} documents, {ingest['chunks']:,} chunks. Ingest in this run: "
            f"{ingest_s:.0f} s, with {ingest['embedded']:,} chunks embedded (the rest from the embedding cache). "
            f"Evaluation: {result['questions']} queries from `{data}` in {eval_s:.0f} s: questions embedded in "
            f"batches, then `search()` per question and mode; each mode returns its top {result['depth']} chunks, "
            "documents ranked by their best chunk.",
            "",
            f"| mode | recall@{k} | MRR@{k} | nDCG@{k} | no hit in top {result['depth']} chunks |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "| reference (SciFact *test* split) | mode | nDCG@10 |",
            "|---|---|---|",
            *refs,
            "",
            "The published figures are on the 300-query test split; the train split here has the same corpus and the "
            "same kind of claims, so they compare but are not identical. "
            f"recall@1 / @5 / @20 / @{result['depth']}: {curve}. HTML report: `{report}`.",
            "",
            index,
            "",
            f"`ragvps stats`: vector table {vec['total_bytes'] / mb:.1f} MiB = heap {vec['heap_bytes'] / mb:.1f} MiB "
            f"(the plan's raw estimate, rows x dims x 4 bytes: {stats['vectors']['plan_raw_bytes'] / mb:.1f} MiB) "
            f"+ HNSW index {index_mb:.1f} MiB + primary key; chunks table {chunks_table['total_bytes'] / mb:.1f} MiB "
            f"(GIN full-text index {gin / mb:.1f} MiB).",
            END,
        ]
    )


if __name__ == "__main__":
    main()
