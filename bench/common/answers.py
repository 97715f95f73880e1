"""bench/answer_quality.py's data and scores: the question sets (SciFact and chroma_chunking, split into fixed
calibration and evaluation halves), the databases they are asked of, and how a run's records are scored.
Shared with answer_signals (the halves) and answer_report (the RESULTS section)."""

from __future__ import annotations

import json
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

from common import DATA
from common import OUT as BENCH_OUT

OUT = BENCH_OUT / "answer_quality"


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
    for path, text in (
        (half / "corpus.jsonl", [x for i, x in enumerate(lines) if ingested(i, json.loads(x))]),
        (other / "corpus.jsonl", [x for x in chroma if json.loads(x)["_id"] != BIOMEDICAL]),
    ):
        body = "\n".join(text) + "\n"
        if not path.exists() or path.read_text() != body:
            path.write_text(body)
    dbs = {name: out / f"db_{name}" for name in ("scifact", "chroma", "chroma_other")}
    cache, seeded = dbs["chroma"] / "embeddings", dbs["chroma_other"] / "embeddings"
    if "chroma_other" in needed and not seeded.exists() and cache.exists():
        shutil.copytree(cache, seeded)
    for name, path in (
        ("scifact", half),
        ("chroma", DATA / "chroma_chunking" / "corpus.jsonl"),
        ("chroma_other", other),
    ):
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
        return {
            "id": q["_id"],
            "text": q["text"],
            "gold": sorted({d for d, _, _ in refs[q["_id"]]}),
            "refs": refs[q["_id"]],
        }

    return {
        "answerable": ("scifact", [sci(q) for q in claims if gold[q["_id"]] <= ours and keep(q)]),
        "unanswerable": ("scifact", [sci(q) for q in claims if gold[q["_id"]] <= other and keep(q)]),
        "off_topic_scifact": ("scifact", [chr_(q) for q in chroma if keep(q) and not biomedical(q)]),
        "off_topic_chroma": ("chroma_other", [sci(q) for q in claims if keep(q)]),
        "biomedical_scifact": ("scifact", [chr_(q) for q in chroma if keep(q) and biomedical(q)]),
        "claims_chroma": ("chroma", [sci(q) for q in claims if keep(q)]),
        "quotes": ("chroma", [chr_(q) for q in chroma if keep(q)]),
    }


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
    out = {
        "n": len(rows),
        "answered": len(answered) / n,
        "refused": 1 - len(answered) / n,
        "gold_cited": len(gold_cited) / n,
        "gold_cited_of_answered": len(gold_cited) / max(1, len(answered)),
        "citation_precision": len(cited_gold) / max(1, len(cited)),
        "quotes_per_answer": sum(r["answer"].count('\n- "') for r in answered) / max(1, len(answered)),
        "ms_p50": sorted(r["ms"] for r in rows)[len(rows) // 2] if rows else 0.0,
    }
    if all("refs" in q for q in questions):
        hit = quoted = ref = 0
        for r in rows:
            got, want = chars(quote_spans(r) if r["answered"] else []), chars(by_id[r["id"]]["refs"])
            hit, quoted, ref = hit + len(got & want), quoted + len(got), ref + len(want)
        out |= {"span_precision": hit / max(1, quoted), "span_recall": hit / max(1, ref)}
    return out


SETS = (
    "answerable",
    "unanswerable",
    "off_topic_scifact",
    "off_topic_chroma",
    "biomedical_scifact",
    "claims_chroma",
    "quotes",
)


LOW_GATE = 0.25  # the calibration and curve runs: the gate this low, so the records hold every candidate that
# any threshold worth trying would send (their replay at a higher threshold is exact)
