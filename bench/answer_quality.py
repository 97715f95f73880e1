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
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
import answer_signals as signals  # noqa: E402  (bench/ is the script's folder)
from results import markers, write_section  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
OUT = ROOT / "bench" / "out" / "answer_quality"
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
        out = {"id": q["id"], "answered": a.answered, "answer": a.answer, "ms": (time.perf_counter() - t) * 1000,
               "citations": [c["chunk_id"] for c in a.citations],
               "sources": [{k: s.get(k) for k in ("number", "chunk_id", "start", "end", "text", "evidence")}
                           for s in a.sources],
               "evidence": getattr(a, "evidence", None), "quotes": getattr(a, "quotes", None),
               "retrieved": getattr(a, "retrieved", None), "candidates": list(seen)}
        print(json.dumps(out), flush=True)
"""


def ingested(line: int, doc: dict[str, Any]) -> bool:
    """The fixed half: every other line of the corpus (the even ones), whole."""
    return line % 2 == 0


BIOMEDICAL = "pubmed"  # chroma_chunking's one biomedical document: SciFact's topic, so not off topic for it


def prepare(out: Path, needed: set[str]) -> dict[str, Path]:
    """The databases (ingest is incremental: a second run costs a scan). chroma_other, chroma_chunking without
    its biomedical document, starts from chroma's embedding cache (keyed by chunk hash): nothing is re-embedded."""
    from ragvps.app import App
    from ragvps.config import Settings

    half, other = out / "scifact_half", out / "chroma_other"
    for folder in (half, other):
        folder.mkdir(parents=True, exist_ok=True)
    lines = (DATA / "scifact-dev" / "corpus.jsonl").read_text().splitlines()
    chroma = (DATA / "chroma_chunking" / "corpus.jsonl").read_text().splitlines()
    for path, text in ((half / "corpus.jsonl", [x for i, x in enumerate(lines) if ingested(i, json.loads(x))]),
                       (other / "corpus.jsonl", [x for x in chroma if json.loads(x)["_id"] != BIOMEDICAL])):
        body = "\n".join(text) + "\n"
        if not path.exists() or path.read_text() != body:
            path.write_text(body)
    dbs = {name: out / f"db_{name}" for name in ("scifact", "chroma", "chroma_other")}
    cache, seeded = dbs["chroma"] / "embeddings", dbs["chroma_other"] / "embeddings"
    if "chroma_other" in needed and not seeded.exists() and cache.exists():
        shutil.copytree(cache, seeded)
    for name, path in (("scifact", half), ("chroma", DATA / "chroma_chunking" / "corpus.jsonl"),
                       ("chroma_other", other)):
        if name in needed:
            with App.open(Settings.of(data_dir=dbs[name], embedder="local")) as app:
                app.ingest(path)
    return dbs


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def calibration(qid: str) -> bool:
    """The fixed half of the questions thresholds and weights are fitted on; the other half is reported."""
    return zlib.crc32(qid.encode()) % 2 == 0


def question_sets(half: str = "eval") -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """name -> (database, questions with id, text, gold documents, reference spans): every question the data
    gives, of one half ("calib", "eval", or "all")."""
    docs = [json.loads(line) for line in (DATA / "scifact-dev" / "corpus.jsonl").read_text().splitlines()]
    ours = {d["_id"] for i, d in enumerate(docs) if ingested(i, d)}
    other = {d["_id"] for i, d in enumerate(docs) if not ingested(i, d)}
    gold: dict[str, set[str]] = {}
    for row in (DATA / "scifact-dev" / "qrels.tsv").read_text().splitlines()[1:]:
        qid, doc, score = row.split("\t")
        if int(score) > 0:
            gold.setdefault(qid, set()).add(doc)
    claims = [q for q in jsonl(DATA / "scifact-dev" / "queries.jsonl") if q["_id"] in gold]
    refs: dict[str, list[tuple[str, int, int]]] = {}
    for r in jsonl(DATA / "chroma_chunking" / "references.jsonl"):
        refs.setdefault(r["query-id"], []).append((r["corpus-id"], r["start"], r["end"]))
    chroma = [q for q in jsonl(DATA / "chroma_chunking" / "queries.jsonl") if q["_id"] in refs]

    def biomedical(q: dict[str, Any]) -> bool:
        return bool(q.get("metadata", {}).get("corpus_id") == BIOMEDICAL)

    def keep(q: dict[str, Any]) -> bool:
        return half == "all" or calibration(q["_id"]) == (half == "calib")

    def sci(q: dict[str, Any]) -> dict[str, Any]:
        return {"id": q["_id"], "text": q["text"], "gold": sorted(gold[q["_id"]])}

    def chr_(q: dict[str, Any]) -> dict[str, Any]:
        return {"id": q["_id"], "text": q["text"], "gold": sorted({d for d, _, _ in refs[q["_id"]]}),
                "refs": refs[q["_id"]]}

    return {
        "answerable": ("scifact", [sci(q) for q in claims if gold[q["_id"]] <= ours and keep(q)]),
        "unanswerable": ("scifact", [sci(q) for q in claims if gold[q["_id"]] <= other and keep(q)]),
        "off_topic_scifact": ("scifact", [chr_(q) for q in chroma if keep(q) and not biomedical(q)]),
        "off_topic_chroma": ("chroma_other", [sci(q) for q in claims if keep(q)]),
        "biomedical_scifact": ("scifact", [chr_(q) for q in chroma if keep(q) and biomedical(q)]),
        "claims_chroma": ("chroma", [sci(q) for q in claims if keep(q)]),
        "quotes": ("chroma", [chr_(q) for q in chroma if keep(q)]),
    }


def run(code: Path, db: Path, questions: list[dict[str, Any]], record: Path, limit_s: float,
        settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Ask every question with the checkout at `code`, at most `limit_s` seconds; the answers are recorded in
    `record` as they come, and a rerun asks only the questions not recorded yet (delete it to ask again)."""
    wanted = {q["id"] for q in questions}
    done = [r for r in jsonl(record) if r["id"] in wanted] if record.exists() else []
    have = {r["id"] for r in done}
    todo = [q for q in questions if q["id"] not in have]
    if not todo or record.with_suffix(".done").exists():
        return done
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {"PYTHONPATH": str(code)}
    job = json.dumps({"data_dir": str(db), "questions": [{"id": q["id"], "text": q["text"]} for q in todo],
                      "settings": settings or {}})
    proc = subprocess.Popen([sys.executable, "-c", WORKER], env=env, cwd=code, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
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


def doc_of(chunk_id: str) -> str:
    return chunk_id.rsplit("#", 1)[0]


def quote_spans(row: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(document, start, end) of each quote: given (this version) or found in the cited chunk's text (before)."""
    if row.get("quotes"):
        return [(doc_of(q["chunk_id"]), q["start"], q["end"]) for q in row["quotes"]]
    by_number = {s["number"]: s for s in row["sources"]}
    spans = []
    for text, number in re.findall(r'^- "(.+)" \[(\d+)\]$', row["answer"], re.M):
        s = by_number.get(int(number))
        if s is None:
            continue
        m = None
        for form in (re.sub(r"\((\s*\d[\d,\s]*)\)", r"[\1]", text), text):  # the old code wrote [n] as (n)
            m = m or re.search(r"\s+".join(re.escape(w) for w in form.split()), s["text"])
        if m:
            spans.append((doc_of(s["chunk_id"]), s["start"] + m.start(), s["start"] + m.end()))
    return spans


def chars(spans: list[tuple[str, int, int]]) -> set[tuple[str, int]]:
    return {(d, i) for d, a, b in spans for i in range(a, b)}


def score(rows: list[dict[str, Any]], questions: list[dict[str, Any]]) -> dict[str, float]:
    by_id = {q["id"]: q for q in questions}
    n = len(rows) or 1
    answered = [r for r in rows if r["answered"]]
    gold_cited = [r for r in answered if set(map(doc_of, r["citations"])) & set(by_id[r["id"]]["gold"])]
    cited = [c for r in answered for c in r["citations"]]
    cited_gold = [c for r in answered for c in r["citations"] if doc_of(c) in by_id[r["id"]]["gold"]]
    out = {"n": len(rows), "answered": len(answered) / n, "refused": 1 - len(answered) / n,
           "gold_cited": len(gold_cited) / n, "gold_cited_of_answered": len(gold_cited) / max(1, len(answered)),
           "citation_precision": len(cited_gold) / max(1, len(cited)),
           "quotes_per_answer": sum(r["answer"].count('\n- "') for r in answered) / max(1, len(answered)),
           "ms_p50": sorted(r["ms"] for r in rows)[len(rows) // 2] if rows else 0.0}
    if all("refs" in q for q in questions):
        hit = quoted = ref = 0
        for r in rows:
            got, want = chars(quote_spans(r) if r["answered"] else []), chars(by_id[r["id"]]["refs"])
            hit, quoted, ref = hit + len(got & want), quoted + len(got), ref + len(want)
        out |= {"span_precision": hit / max(1, quoted), "span_recall": hit / max(1, ref)}
    return out


SETS = ("answerable", "unanswerable", "off_topic_scifact", "off_topic_chroma", "biomedical_scifact", "claims_chroma",
        "quotes")
LOW_GATE = 0.25  # the calibration and curve runs: the gate this low, so the records hold every candidate that
# any threshold worth trying would send (their replay at a higher threshold is exact)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=Path("/work/baseline"),
                        help="a checkout of the code before issue 18 (git worktree add DIR COMMIT)")
    parser.add_argument("--limit", type=float, default=1800, help="seconds per set and version at most")
    parser.add_argument("--before-limit", type=float, default=240,
                        help="seconds per set the code before must refuse (it has no gate: it refuses nothing)")
    parser.add_argument("--signals", action="store_true",
                        help="record every question's relevance signals (both halves, retrieval only)")
    parser.add_argument("--calibrate", action="store_true",
                        help=f"run this checkout on the calibration half with the gate at {LOW_GATE}, print the grid")
    parser.add_argument("--curve", action="store_true",
                        help=f"run this checkout on the evaluation half with the gate at {LOW_GATE} (held-out curve)")
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
        records = {n: run(ROOT, dbs[db], qs, OUT / f"{kind}-{n}.jsonl", args.limit, {"answer_min_evidence": LOW_GATE})
                   for n, (db, qs) in sets.items() if not args.no_run or (OUT / f"{kind}-{n}.jsonl").exists()}
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
    from report_answers import section

    write_section("answer_quality", section(results, args, load_before, START, END))


if __name__ == "__main__":
    main()
