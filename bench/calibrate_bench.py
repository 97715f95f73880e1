"""`ragvps calibrate` against what is then measured (issue 33): the fusion it fits, and the refusal line it picks.

    python bench/calibrate_bench.py [--scifact-dir bench/out/scifact] [--no-write]

Fusion. On each corpus the calibration set is the knowledge base's own (sentences of its chunks, never the gold:
ragvps/measure/fusion_fit.py); the fitted fusion (rrf or convex, the vector leg's weight, rrf_k) is then judged by
`ragvps eval` on the gold, hybrid nDCG@10, against equal-weight RRF (rrf_k 60, the default), with the convex
fusion at equal weights beside it:
- SciFact (809 train claims) in eval_bench's data directory (--scifact-dir; `python bench/eval_bench.py` fills it);
- chroma_chunking (its queries and qrels) and SciFact's ingested half, in bench/answer_quality.py's databases;
- this repository's docs/ with bench/data/docs_gold.jsonl (36 questions, written by hand).

The line. On answer_quality's SciFact half and on chroma_chunking, `calibrate` picks a line and predicts the
share of answerable questions answered and of the others refused; `python bench/answer_quality.py --curve` (the
held-out half, asked once with the gate low, replayed at any line) says what the answers then do at that line
and at the default 0.40. The calibrate commands run the real CLI in subprocesses, from this checkout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import DATA, ROOT
from common import answer_signals as signals
from common.answers import OUT as AQ_OUT
from common.answers import prepare, question_sets, score
from common.results import write_section

SECTION = "calibrate_bench"
DOCS_GOLD = ROOT / "bench" / "data" / "docs_gold.jsonl"
DEFAULT_LINE = 0.40
# what answer_quality measures for each corpus: answered, refused on topic, refused off topic (chroma has no
# on-topic unanswerable set; its off-topic questions are SciFact's claims asked of it)
MEASURED = {
    "SciFact half": ("answerable: answered", "unanswerable: refused", "off_topic_scifact: refused"),
    "chroma": ("quotes: answered", None, "claims_chroma: refused"),
}


def env_for(data_dir: Path, **settings: str) -> dict[str, str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "no-config.toml").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    return (
        env
        | {
            "RAGVPS_DATA_DIR": str(data_dir),
            "RAGVPS_EMBEDDER": "local",
            "RAGVPS_CONFIG": str(data_dir / "no-config.toml"),
        }
        | settings
    )


def ragvps(env: dict[str, str], *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ragvps", *args, "--json"], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE
    )
    if done.returncode != 0:
        sys.exit(f"ragvps {' '.join(args)} failed with exit code {done.returncode}")
    return json.loads(done.stdout)


def ndcg(env: dict[str, str], gold: tuple[str, ...], **fusion: object) -> float:
    settings = {f"RAGVPS_{k.upper()}": str(v) for k, v in fusion.items()}
    report = ragvps(env | settings, "eval", *gold, "--modes", "hybrid")
    return float(report["modes"]["hybrid"]["ndcg@10"])


def fusion_row(name: str, env: dict[str, str], gold: tuple[str, ...]) -> dict[str, Any]:
    fitted = ragvps(env, "calibrate")["fusion"]
    equal = ndcg(env, gold)
    leaned = ndcg(env, gold, fusion=fitted["fusion"], rrf_k=fitted["rrf_k"], vector_weight=fitted["vector_weight"])
    row = {
        "corpus": name,
        "fitted_fusion": fitted,
        "equal": equal,
        "fitted": leaned,
        "convex_equal": ndcg(env, gold, fusion="convex"),
    }
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def curve_records(sets: list[str]) -> dict[str, list[dict[str, Any]]]:
    """answer_quality's held-out half asked once with the gate low (its records are kept: a rerun asks nothing)."""
    subprocess.run(
        [sys.executable, "bench/answer_quality.py", "--curve", "--sets", ",".join(sets)],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return {
        n: [json.loads(x) for x in (AQ_OUT / f"curve-{n}.jsonl").read_text().splitlines() if x.strip()] for n in sets
    }


def measured(records: dict[str, list[dict[str, Any]]], line: float) -> dict[str, float]:
    questions = {n: qs for n, (_, qs) in question_sets("eval").items()}
    found = {n: score([signals.simulate(r, line, None) for r in rows], questions[n]) for n, rows in records.items()}
    out = {
        f"{n}: {k}": found[n][k]
        for n, k in (
            ("answerable", "answered"),
            ("unanswerable", "refused"),
            ("off_topic_scifact", "refused"),
            ("quotes", "answered"),
            ("claims_chroma", "refused"),
        )
        if n in found
    }
    return out


def line_rows(dbs: dict[str, Path]) -> list[dict[str, Any]]:
    records = curve_records(["answerable", "unanswerable", "off_topic_scifact", "quotes", "claims_chroma"])
    rows = []
    for corpus, db in (("SciFact half", dbs["scifact"]), ("chroma", dbs["chroma"])):
        shown = ragvps(env_for(db), "calibrate")
        chosen = shown["chosen"]
        rows.append(
            {
                "corpus": corpus,
                "line": chosen["line"],
                "predicted": chosen,
                "at_line": measured(records, chosen["line"]),
                "at_default": measured(records, DEFAULT_LINE),
                "questions": shown["questions"],
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--scifact-dir",
        type=Path,
        default=ROOT / "bench" / "out" / "scifact",
        help="eval_bench's data directory (SciFact ingested whole)",
    )
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    before = os.getloadavg()
    dbs = prepare(AQ_OUT, {"scifact", "chroma", "chroma_other"})
    docs = ROOT / "bench" / "out" / "calibrate" / "docs"
    subprocess.run(
        [sys.executable, "-m", "ragvps", "ingest", str(ROOT / "docs")],
        cwd=ROOT,
        env=env_for(docs),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    scifact, chroma = DATA / "scifact-dev", DATA / "chroma_chunking"
    fusion = [
        fusion_row(
            "SciFact (809 claims)",
            env_for(args.scifact_dir),
            ("--queries", str(scifact / "queries.jsonl"), "--qrels", str(scifact / "qrels.tsv")),
        ),
        fusion_row(
            "chroma_chunking",
            env_for(dbs["chroma"]),
            ("--queries", str(chroma / "queries.jsonl"), "--qrels", str(chroma / "qrels.tsv")),
        ),
        fusion_row("docs/ (36 hand-written)", env_for(docs), (str(DOCS_GOLD),)),
    ]
    lines = line_rows(dbs)
    section = render(fusion, lines, before, os.getloadavg())
    print(section)
    if not args.no_write:
        write_section(SECTION, section)


def render(
    fusion: list[dict[str, Any]], lines: list[dict[str, Any]], before: tuple[float, ...], after: tuple[float, ...]
) -> str:
    out = [
        f"<!-- {SECTION}:start -->",
        "## calibrate_bench: the fusion and the line that `ragvps calibrate` fits (`python bench/calibrate_bench.py`)",
        "",
        f"{datetime.date.today().isoformat()}, {platform.machine()} with {os.cpu_count()} cores; load average "
        f"{before[0]:.2f} before, {after[0]:.2f} after. Local model, default settings but the fusion.",
        "",
        "**Fusion** fitted on each corpus's own calibration set (never its gold), judged on the gold: hybrid nDCG@10.",
        "",
        "| corpus | fitted on | fitted fusion | vector weight | rrf_k | calibration MRR@10 fitted / in force "
        "| nDCG@10 RRF, equal weights (default) | nDCG@10 fitted | change | convex, equal weights (not fitted) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in fusion:
        f = r["fitted_fusion"]
        out.append(
            f"| {r['corpus']} | {f['questions']} {f['source']} | {f['fusion']} | {f['vector_weight']:g} | "
            f"{f['rrf_k']} | {f['mrr']:.3f} / {f['current_mrr']:.3f} | {r['equal']:.4f} | {r['fitted']:.4f} | "
            f"**{r['fitted'] - r['equal']:+.4f}** | {r['convex_equal'] - r['equal']:+.4f} |"
        )
    out += [
        "",
        "**The line** chosen (the highest that answers 0.90 of the calibration set's answerable questions), "
        "what calibrate predicts there, and what bench/answer_quality.py's held-out half measures at that line "
        "and at the default 0.40 (its records of a run with the gate low, replayed).",
        "",
        "| corpus | line | predicted answered | measured answered | at 0.40 | predicted refused on-topic "
        "unanswerable | measured | at 0.40 | predicted refused off topic | measured | at 0.40 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in lines:
        p, m, d = r["predicted"], r["at_line"], r["at_default"]
        cells = [r["corpus"], f"{r['line']:.2f}"]
        predicted_keys = ("answered", "refused_unanswerable", "refused_off_topic")
        for predicted, key in zip(predicted_keys, MEASURED[r["corpus"]], strict=True):
            cells += [
                f"{p[predicted]:.2f}" if p[predicted] is not None else "-",
                f"{m[key]:.2f}" if key else "-",
                f"{d[key]:.2f}" if key else "-",
            ]
        out.append("| " + " | ".join(cells) + " |")
    out.append(f"<!-- {SECTION}:end -->")
    return "\n".join(out)


if __name__ == "__main__":
    main()
