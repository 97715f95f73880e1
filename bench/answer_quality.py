"""Answer quality: are unanswerable questions refused, answerable ones answered from a gold document, and do
extractive quotes hit the sentences that answer? This checkout beside the code before issue 18.

    python bench/answer_quality.py --signals      # every question's relevance signals (retrieval only)
    python bench/answer_quality.py --calibrate    # the calibration half, gate low; prints the chosen defaults
    python bench/answer_quality.py --curve        # the evaluation half, gate low: the held-out trade-off curve
    flock -x /work/quiet.lock python bench/answer_quality.py --gate-cost
    python bench/answer_quality.py [--baseline /work/baseline] [--note "load ..."]   # before and after; RESULTS

Data (../shared/data): the even lines of SciFact's corpus are ingested (2,592 abstracts, whole). Claims whose
gold abstracts all lie in them are answerable; claims whose gold abstracts all lie in the odd lines are on
topic but unanswerable. Off topic: chroma_chunking's questions asked of SciFact and SciFact's claims asked of
chroma_chunking's corpus, both without chroma's PubMed document (biomedical: SciFact's topic), which is
reported apart. Quote quality: chroma_chunking's questions asked of its corpus, the quotes' character spans
against the reference excerpts. Every question is used, split in two fixed halves (crc32 of its id): the
defaults are chosen on the calibration half, the figures reported on the evaluation half. Both versions run
the default extractive generator on the same databases, each in a subprocess with its checkout on PYTHONPATH.
Per-question records go to bench/out/answer_quality/*.jsonl as they come (a rerun asks only what is missing;
the ingest reuses the stage caches); the calibration and the curve replay records of a run with the gate low.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import ROOT
from common import answer_signals as signals
from common.answer_report import section
from common.answers import LOW_GATE, OUT, SETS, jsonl, prepare, question_sets, score
from common.results import markers, write_section

START, END = markers("answer_quality")

# Run in a subprocess with either checkout on PYTHONPATH: asks each question, prints one JSON line each.
WORKER = r"""
import json, sys, time
from ragvps.app import App
try:
    from ragvps.app import AskRequest
except ImportError:
    from ragvps.generate import AskRequest
from ragvps.config import Settings
job = json.load(sys.stdin)
seen = []  # this version's extractive candidates and their signals, for the offline sweep of the floor
with App.open(Settings.of(data_dir=job["data_dir"], embedder="local", **job.get("settings", {}))) as app:
    gen = app.generator
    if hasattr(gen, "signals"):
        signals = gen.signals

        def record(question, found):
            cos, overlap = signals(question, found)
            seen[:] = [[f.source.number, f.source.chunk_id, f.source.start + f.a, f.source.start + f.b,
                        round(float(c), 4), round(float(o), 4), f.command, f.text]
                       for f, c, o in zip(found, cos, overlap)]
            return cos, overlap
        gen.signals = record
    for q in job["questions"]:
        t = time.perf_counter()
        seen.clear()
        a = app.ask(AskRequest(q["text"], use_cache=False))
        ms = (time.perf_counter() - t) * 1000
        if hasattr(a, "to_json"):  # typed records (issue 28 on), rendered as every interface prints them
            j = a.to_json()
        else:  # dicts (the code before)
            j = {"answered": a.answered, "answer": a.answer, "citations": a.citations, "sources": a.sources,
                 "evidence": getattr(a, "evidence", None), "quotes": getattr(a, "quotes", None),
                 "retrieved": getattr(a, "retrieved", None)}
        out = {"id": q["id"], "answered": j["answered"], "answer": j["answer"], "ms": ms,
               "citations": [c["chunk_id"] for c in j["citations"]],
               "sources": [{k: s.get(k) for k in ("number", "chunk_id", "start", "end", "text", "evidence")}
                           for s in j["sources"]],
               "evidence": j.get("evidence"), "quotes": j.get("quotes"), "retrieved": j.get("retrieved"),
               "candidates": list(seen)}
        print(json.dumps(out), flush=True)
"""


def run(
    code: Path,
    db: Path,
    questions: list[dict[str, Any]],
    record: Path,
    limit_s: float,
    settings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Ask every question with the checkout at `code`, at most `limit_s` seconds; the answers are recorded in
    `record` as they come, and a rerun asks only the questions not recorded yet (delete it to ask again)."""
    wanted = {q["id"] for q in questions}
    done = [r for r in jsonl(record) if r["id"] in wanted] if record.exists() else []
    have = {r["id"] for r in done}
    todo = [q for q in questions if q["id"] not in have]
    if not todo or record.with_suffix(".done").exists():
        return done
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {"PYTHONPATH": str(code)}
    job = json.dumps(
        {
            "data_dir": str(db),
            "questions": [{"id": q["id"], "text": q["text"]} for q in todo],
            "settings": settings or {},
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER], env=env, cwd=code, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(job)
    proc.stdin.close()
    rows, started = list(done), time.monotonic()
    with record.open("a") as f:
        for line in proc.stdout:
            rows.append(json.loads(line))
            f.write(line)
            f.flush()
            if time.monotonic() - started > limit_s:
                proc.terminate()
                break
    proc.wait()
    if len(rows) < len(questions):  # cut by the time limit: this is the sample
        spent = time.monotonic() - started
        record.with_suffix(".done").write_text(f"{len(rows)} of {len(questions)} ({spent:.0f} s)\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline",
        type=Path,
        default=Path("/work/baseline"),
        help="a checkout of the code before issue 18 (git worktree add DIR COMMIT)",
    )
    parser.add_argument("--limit", type=float, default=1800, help="seconds per set and version at most")
    parser.add_argument(
        "--before-limit",
        type=float,
        default=240,
        help="seconds per set the code before must refuse (it has no gate: it refuses nothing)",
    )
    parser.add_argument(
        "--signals", action="store_true", help="record every question's relevance signals (both halves, retrieval only)"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help=f"run this checkout on the calibration half with the gate at {LOW_GATE}, print the grid",
    )
    parser.add_argument(
        "--curve",
        action="store_true",
        help=f"run this checkout on the evaluation half with the gate at {LOW_GATE} (held-out curve)",
    )
    parser.add_argument("--gate-cost", action="store_true", help="time the gate (under the exclusive quiet lock)")
    parser.add_argument("--only", choices=("before", "after"), default=None)
    parser.add_argument("--sets", default="", help="comma-separated subset of the sets (default: all)")
    parser.add_argument("--no-run", action="store_true", help="score the records there are; run nothing")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--note", default="", help="said in RESULTS beside the command (e.g. the load during the runs)")
    args = parser.parse_args()
    load_before = os.getloadavg()
    OUT.mkdir(parents=True, exist_ok=True)
    names = [n for n in SETS if not args.sets or n in args.sets.split(",")]
    half = "calib" if args.calibrate else "eval"
    sets = {n: v for n, v in question_sets(half).items() if n in names}
    dbs = {name: OUT / f"db_{name}" for name in ("scifact", "chroma", "chroma_other")}
    if not args.no_run:
        dbs = prepare(OUT, {db for db, _ in sets.values()})
    if args.signals:
        for name, (db, questions) in question_sets("all").items():
            if name in names:
                embed = name in ("answerable", "unanswerable")
                signals.collect(dbs[db], questions, OUT / f"signals-{name}.jsonl", embed)
        print("\n".join(signals.signal_table(signals.load(OUT, list(SETS)))))
        return
    if args.gate_cost:
        found = signals.gate_cost(dbs["chroma"], question_sets("eval")["quotes"][1])
        found["load"] = os.getloadavg()[0]
        (OUT / "gate-cost.json").write_text(json.dumps(found))
        print(found)
        return
    if args.calibrate or args.curve:
        kind = "calib" if args.calibrate else "curve"
        records = {
            n: run(ROOT, dbs[db], qs, OUT / f"{kind}-{n}.jsonl", args.limit, {"answer_min_evidence": LOW_GATE})
            for n, (db, qs) in sets.items()
            if not args.no_run or (OUT / f"{kind}-{n}.jsonl").exists()
        }
        questions = {n: qs for n, (_, qs) in sets.items()}
        for line in signals.answer_curve(records, questions, score):
            print(line)
        if args.calibrate and len(records) == len(SETS):
            chosen, grid = signals.choose(records, questions, score)
            print("\n".join(grid) + f"\nchosen: {chosen}")
        return
    rows_by: dict[str, dict[str, list[dict[str, Any]]]] = {"before": {}, "after": {}}
    for version, code in (("before", args.baseline), ("after", ROOT)):
        if args.only and args.only != version:
            continue
        for name, (db, questions) in sets.items():
            # the code before has no gate: on the sets it should refuse it answers everything, so fewer suffice
            limit = args.limit if version == "after" or name in ("answerable", "quotes") else args.before_limit
            record = OUT / f"{version}-{name}.jsonl"
            if args.no_run and not record.exists():
                continue
            rows_by[version][name] = run(code, dbs[db], questions, record, limit)
    results: dict[str, dict[str, dict[str, float]]] = {"before": {}, "after": {}}
    for name, (_, questions) in sets.items():  # the quotes are compared on the questions both versions asked
        both = {r["id"] for r in rows_by["before"].get(name, [])} & {r["id"] for r in rows_by["after"].get(name, [])}
        for version in ("before", "after"):
            rows = rows_by[version].get(name, [])
            if name == "quotes" and both:
                rows = [r for r in rows if r["id"] in both]
            if rows:
                results[version][name] = score(rows, questions)
                print(version, name, json.dumps(results[version][name]), flush=True)
    if args.no_write or args.only or args.sets:
        return
    write_section("answer_quality", section(results, args, load_before, START, END))


if __name__ == "__main__":
    main()
