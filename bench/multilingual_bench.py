"""Retrieval per language and search mode, a tree and its settings beside another (issue 52).

    flock -x /work/quiet.lock python bench/multilingual_bench.py --baseline ../base-lang --write

For each data set (Spanish SQuAD-es paragraphs, Chinese CMRC 2018 paragraphs, English SciFact abstracts) and each
configuration (a source tree and its settings: the baseline's defaults, this tree's defaults, ...), a fresh data
directory is ingested (its embedded PostgreSQL, nothing cached) and every sampled question is searched in the
three modes through `App.search`, as `ragvps ask` does. It prints, per language and mode, R@1 and nDCG@10 at the
document level, ingest chunks/s (the whole ingest: parse, chunk, embed, store) and question milliseconds (the
question's embedding alone, median over 200 questions not seen before). Each configuration runs in a child process
with its tree first on sys.path, so the baseline's code is the baseline's.

SciFact is sampled (its 5,183 abstracts take the baseline's model about ten minutes to embed here): --scifact-queries
questions, every abstract judged for them, and --scifact-distractors other abstracts.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import DATA, OUT, ROOT  # noqa: E402
from common.results import markers, write_section  # noqa: E402

SETS = {"es": DATA / "squad_es_dev", "zh": DATA / "cmrc2018_trial_zh", "en": DATA / "scifact-dev"}
MODES = ("vector", "keyword", "hybrid")


def read_set(folder: Path) -> tuple[list[dict[str, str]], dict[str, str], dict[str, dict[str, int]]]:
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line]
    queries = {}
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            queries[str(record["_id"])] = record["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    return corpus, {q: t for q, t in queries.items() if q in qrels}, qrels


def sample(lang: str, args: argparse.Namespace) -> tuple[list[dict[str, str]], dict[str, str], dict]:
    """The corpus and the questions a run uses, the same for every configuration (seeded)."""
    corpus, queries, qrels = read_set(SETS[lang])
    rng = random.Random(52)
    qids = sorted(q for q, text in queries.items() if re.search(r"\w", text))  # CMRC has an empty question
    limit = args.scifact_queries if lang == "en" else args.queries
    if limit and limit < len(qids):
        qids = sorted(rng.sample(qids, limit))
    if lang == "en":
        judged = {d for q in qids for d in qrels[q]}
        others = sorted(d["_id"] for d in corpus if d["_id"] not in judged)
        keep = judged | set(rng.sample(others, min(args.scifact_distractors, len(others))))
        corpus = [d for d in corpus if d["_id"] in keep]
    return corpus, {q: queries[q] for q in qids}, {q: qrels[q] for q in qids}


def child(args: argparse.Namespace) -> None:
    """One configuration on one data set, in this process: prints one JSON line."""
    sys.path.insert(0, str(Path(args.tree).resolve()))
    from ragvps.app import App
    from ragvps.app.requests import SearchRequest
    from ragvps.config import load_settings
    from ragvps.embed import embed_queries
    from ragvps.measure import metrics

    corpus, queries, qrels = sample(args.lang, args)
    data_dir = OUT / "multilingual" / f"{''.join(c if c.isalnum() else '_' for c in args.name)}-{args.lang}"
    if data_dir.exists():  # its embedded server first, if a run left it up
        from ragvps.db.embedded import stop_embedded

        try:
            stop_embedded(load_settings(env={}, data_dir=data_dir))
        except Exception as exc:
            print("warning:", exc, file=sys.stderr)
    shutil.rmtree(data_dir, ignore_errors=True)
    folder = data_dir / "corpus"
    folder.mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as f:
        for doc in corpus:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    overrides = dict(json.loads(args.settings))
    settings = load_settings(env={}, data_dir=data_dir).replace(**overrides)
    out: dict[str, object] = {"name": args.name, "lang": args.lang, "documents": len(corpus), "questions": len(queries)}
    with App.open(settings) as app:
        t0 = time.perf_counter()
        report = app.ingest(folder, lambda *_: None, lambda m: print("warning:", m, file=sys.stderr))
        seconds = time.perf_counter() - t0
        out |= {"chunks": report.chunks, "ingest_s": round(seconds, 1), "chunks_per_s": report.chunks / seconds}
        out["model"] = app.spec.name
        texts = list(queries.values())
        fresh = [f"{t} ({i})" for i, t in enumerate(texts[:200])]  # never embedded before: no memo
        embed_queries(app.embedder, ["warm up"])
        costs = []
        for text in fresh:
            t1 = time.perf_counter()
            embed_queries(app.embedder, [text])
            costs.append((time.perf_counter() - t1) * 1000)
        out["question_ms"] = statistics.median(costs)
        for mode in MODES:
            r1, ndcg = [], []
            for qid, text in queries.items():
                hits = app.search(SearchRequest(text, k=20, mode=mode)).hits  # type: ignore[arg-type]
                docs = metrics.dedupe([h.doc_id for h in hits])
                r1.append(1.0 if docs and qrels[qid].get(docs[0], 0) > 0 else 0.0)
                ndcg.append(metrics.ndcg_at(docs, qrels[qid], 10))
            out[mode] = {"r1": statistics.fmean(r1), "ndcg": statistics.fmean(ndcg)}
        if args.legs:
            legs(app, queries, qrels, Path(args.legs))
    print(json.dumps(out), flush=True)


def legs(app, queries: dict[str, str], qrels: dict, path: Path) -> None:  # type: ignore[no-untyped-def]
    """Each question's two legs, scored, with the documents they name and the judgements: what
    bench/fusion_bench.py fuses offline."""
    from ragvps.embed import embed_queries
    from ragvps.retrieve import search

    records = []
    with app.connection() as conn:
        eset = app.active_set(conn, "search")
        doc_of = dict(conn.execute("SELECT c.id, d.doc_id FROM chunks c JOIN documents d ON d.id = c.document_id"))
        for qid, text in queries.items():
            vector = embed_queries(app.embedder, [text])[0]
            vec = search.vector_scored(conn, eset, vector, app.settings)
            kw = search.keyword_scored(conn, text, app.settings)
            records.append(
                {
                    "q": qid,
                    "rel": qrels[qid],
                    "vec": [(doc_of[c], s, c) for c, s in vec],
                    "kw": [(doc_of[c], s, c) for c, s in kw],
                }
            )
            conn.rollback()
    path.write_text(json.dumps(records), encoding="utf-8")


def run(name: str, tree: Path, settings: dict[str, object], lang: str, args: argparse.Namespace) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--name", name, "--tree", str(tree)]
    command += ["--lang", lang, "--settings", json.dumps(settings), "--queries", str(args.queries)]
    command += ["--scifact-queries", str(args.scifact_queries), "--scifact-distractors", str(args.scifact_distractors)]
    if args.save_legs and tree == ROOT:
        command += [
            "--legs",
            str(OUT / "multilingual" / f"legs-{''.join(c if c.isalnum() else '_' for c in name)}-{lang}.json"),
        ]
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=tree)
    if done.returncode:
        sys.exit(f"{name} {lang} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def table(rows: list[dict]) -> str:
    lines = [
        "| language | configuration | model | vector R@1 | vector nDCG@10 | keyword R@1 | keyword nDCG@10 | "
        "hybrid R@1 | hybrid nDCG@10 | ingest chunks/s | question ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        legs = " | ".join(f"{r[m]['r1']:.3f} | {r[m]['ndcg']:.3f}" for m in MODES)
        lines.append(
            f"| {r['lang']} ({r['documents']} docs, {r['questions']} q) | {r['name']} | {r['model']} | {legs} | "
            f"{r['chunks_per_s']:.1f} | {r['question_ms']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout of the baseline (git worktree add ../base af33e0a)")
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        help="NAME=JSON settings on this tree, e.g. "
        'minilm={"embedder":"local"}; default: this tree\'s defaults as "new"',
    )
    parser.add_argument("--langs", default="es,zh,en")
    parser.add_argument("--queries", type=int, default=1000, help="questions per set (es, zh); 0: all")
    parser.add_argument("--scifact-queries", type=int, default=300)
    parser.add_argument("--scifact-distractors", type=int, default=1200)
    parser.add_argument("--write", action="store_true", help="write the table into bench/RESULTS.md")
    parser.add_argument("--save-legs", action="store_true", help="keep each question's legs for bench/fusion_bench.py")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--name", default="", help=argparse.SUPPRESS)
    parser.add_argument("--tree", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--lang", default="", help=argparse.SUPPRESS)
    parser.add_argument("--settings", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--legs", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    configs: list[tuple[str, Path, dict[str, object]]] = []
    if args.baseline:
        configs.append(("baseline af33e0a", args.baseline.resolve(), {}))
    for spec in args.config or ["new={}"]:
        name, _, settings = spec.partition("=")
        configs.append((name, ROOT, json.loads(settings or "{}")))
    load_before = os.getloadavg()
    rows = []
    for lang in args.langs.split(","):
        for name, tree, settings in configs:
            rows.append(run(name, tree, settings, lang, args))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    load_after = os.getloadavg()
    text = table(rows)
    print("\n" + text)
    head = (
        f"## Languages (bench/multilingual_bench.py, issue 52)\n\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
        f", 2 cores, load {load_before[0]:.1f} before and {load_after[0]:.1f} after; "
        f"`{' '.join(sys.argv[1:])}`. Document level; R@1: the first document is a judged one. Ingest chunks/s: the "
        "whole ingest of a fresh data directory; question ms: one question's embedding, median of 200 unseen.\n\n"
    )
    if args.write:
        start, end = markers("multilingual_bench")
        write_section("multilingual_bench", f"{start}\n{head}{text}\n{end}")


if __name__ == "__main__":
    main()
