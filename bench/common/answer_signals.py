"""Relevance signals per question, recorded once (retrieval only, no answer), for choosing the evidence
signal offline: `python bench/answer_quality.py --signals` collects them.

Per question: the retrieved hits (cosine, IDF share, evidence, chunk id), the query's lexemes with their
BM25 idf, and for each hit its sentences' lexemes (PostgreSQL's own stemming, to_tsvector) and, for the
top hits, the best query-sentence cosines of the local model (timed: what that signal would cost the gate).
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

from common.answers import calibration

QUERY_TERMS = """
WITH stats AS (SELECT chunks FROM corpus_stats)
SELECT DISTINCT t.lexeme,
       ln(1 + (stats.chunks - coalesce(s.df, 0) + 0.5)::float8 / (coalesce(s.df, 0) + 0.5)) AS idf
FROM unnest(tsvector_to_array(to_tsvector(%(language)s::regconfig, %(text)s))) AS t (lexeme)
CROSS JOIN stats LEFT JOIN term_stats s ON s.lexeme = t.lexeme
"""
SENTENCE_TERMS = """
SELECT t.i, tsvector_to_array(to_tsvector(%(language)s::regconfig, t.s))
FROM unnest(%(texts)s::text[]) WITH ORDINALITY AS t (s, i)
"""
TOP_FOR_COSINE = 3  # hits whose sentences are embedded for the sentence-cosine signal
MARGIN_SPAN = 0.4  # a hit's cosine above the k-th hit's, mapped onto 0..1 over this span


def collect(db: Path, questions: list[dict[str, Any]], out: Path, embed_sentences: bool = True) -> None:
    """One JSON line per question (appended; questions already in `out` are skipped)."""
    from ragvps.app import App, SearchRequest
    from ragvps.config import Settings
    from ragvps.embed import embed_documents
    from ragvps.text import quotable

    done = {json.loads(line)["id"] for line in out.read_text().splitlines()} if out.exists() else set()
    with App.open(Settings.of(data_dir=db, embedder="local")) as app, out.open("a") as f:
        k = max(app.settings.generate.answer_chunks, app.settings.search.top_k)
        lang = app.settings.search.language
        for q in questions:
            if q["id"] in done:
                continue
            hits = app.search(SearchRequest(q["text"], k=k)).hits
            vector = app.embed_query(q["text"])
            sentences = [[h.text[a:b] for a, b in quotable(h.text)[0]] for h in hits]
            flat = [s for ss in sentences for s in ss]
            with app.connection() as conn:
                terms = {r[0]: r[1] for r in conn.execute(QUERY_TERMS, {"language": lang, "text": q["text"]})}
                lex = {r[0]: r[1] for r in conn.execute(SENTENCE_TERMS, {"language": lang, "texts": flat})}
                conn.commit()
            it = iter(range(1, len(flat) + 1))
            per_hit = [[lex[next(it)] for _ in ss] for ss in sentences]
            cosines: list[list[float]] = []
            ms = 0.0
            if embed_sentences:
                top = [s for ss in sentences[:TOP_FOR_COSINE] for s in ss if len(s.split()) >= 4]
                t = time.perf_counter()
                vecs = embed_documents(app.embedder, top) if top else None
                ms = (time.perf_counter() - t) * 1000
                sims = (vecs @ vector).tolist() if vecs is not None else []
                pos = 0
                for ss in sentences[:TOP_FOR_COSINE]:
                    n = sum(len(s.split()) >= 4 for s in ss)
                    cosines.append([round(x, 4) for x in sims[pos : pos + n]])
                    pos += n
            row = {
                "id": q["id"],
                "gold": q["gold"],
                "terms": terms,
                "hits": [
                    {
                        "chunk_id": h.chunk_id,
                        "vector_rank": h.vector_rank,
                        "keyword_rank": h.keyword_rank,
                        "cosine": h.cosine,
                        "terms": h.terms,
                        "evidence": h.evidence,
                        "sentences": per_hit[i],
                        "lexemes": sorted({x for s in per_hit[i] for x in s}),
                    }
                    for i, h in enumerate(hits)
                ],
                "sentence_cosines": cosines,
                "sentence_ms": round(ms, 2),
                "sentences_embedded": sum(map(len, cosines)),
            }
            f.write(json.dumps(row) + "\n")
            f.flush()


# --- the signals, offline, from the records ------------------------------------------------------------


def scaled(cosine: float | None) -> float:
    from ragvps.retrieve.evidence import scaled as s

    return s(cosine) if cosine is not None else 0.0


def share(terms: dict[str, float], lexemes: set[str] | list[str]) -> float:
    total = sum(terms.values())
    return sum(v for t, v in terms.items() if t in set(lexemes)) / total if total else 0.0


def rare_share(terms: dict[str, float], lexemes: list[str], r: int = 2) -> float:
    top = dict(sorted(terms.items(), key=lambda kv: -kv[1])[:r])
    return share(top, lexemes)


def hit_features(row: dict[str, Any]) -> list[dict[str, float]]:
    """Per hit: the signals a gate could combine (the hit's own, and the question's margin)."""
    terms = row["terms"]
    low = min((h["cosine"] or 0.0 for h in row["hits"]), default=0.0)
    out = []
    for i, h in enumerate(row["hits"]):
        sents = [share(terms, s) for s in h["sentences"]] or [0.0]
        sc = row["sentence_cosines"][i] if i < len(row["sentence_cosines"]) else []
        out.append(
            {
                "cosine": scaled(h["cosine"]),
                "terms": h["terms"] or 0.0,
                "evidence": h["evidence"],
                "sentence_terms": max(sents),
                "rare": rare_share(terms, h["lexemes"] or [x for s in h["sentences"] for x in s]),
                "margin": min(1.0, max(0.0, ((h["cosine"] or 0.0) - low) / MARGIN_SPAN)),
                "sentence_cosine": max(sc, default=0.0) if i < TOP_FOR_COSINE else 0.0,
                "raw_cosine": h["cosine"] or 0.0,
            }
        )
    return out


def auc(pos: list[float], neg: list[float]) -> float:
    """P(a positive scores above a negative), ties half."""
    import numpy as np

    p, n = np.asarray(pos), np.asarray(neg)
    if not len(p) or not len(n):
        return float("nan")
    return float(((p[:, None] > n[None, :]).sum() + 0.5 * (p[:, None] == n[None, :]).sum()) / (len(p) * len(n)))


SIGNALS = ("cosine", "terms", "sentence_terms", "rare", "margin", "sentence_cosine")


def question_score(features: list[dict[str, float]], weights: dict[str, float]) -> float:
    """The best hit's weighted mean of the signals (the gate passes a question when its best hit passes)."""
    total = sum(weights.values()) or 1.0
    return max((sum(w * f[k] for k, w in weights.items()) / total for f in features), default=0.0)


def load(out: Path, names: list[str]) -> dict[str, list[dict[str, Any]]]:
    rows = {}
    for name in names:
        path = out / f"signals-{name}.jsonl"
        if path.exists():
            by_id: dict[str, dict[str, Any]] = {}
            for line in path.read_text().splitlines():
                row = json.loads(line)
                by_id.setdefault(row["id"], row)
            rows[name] = list(by_id.values())
    return rows


def split(rows: dict[str, list[dict[str, Any]]], half: str) -> dict[str, list[list[dict[str, float]]]]:
    """Per set, each question's per-hit features, of one half of the questions."""
    return {
        n: [hit_features(r) for r in rs if half == "all" or calibration(r["id"]) == (half == "calib")]
        for n, rs in rows.items()
    }


POSITIVE, NEGATIVE = ("answerable", "quotes"), ("unanswerable", "off_topic_scifact", "off_topic_chroma")


def rates(feats: dict[str, list[list[dict[str, float]]]], weights: dict[str, float], t: float) -> dict[str, float]:
    """The share of each set's questions the gate at `t` lets through."""
    return {n: sum(question_score(f, weights) >= t for f in qs) / max(1, len(qs)) for n, qs in feats.items()}


def fit(
    feats: dict[str, list[list[dict[str, float]]]], grid: list[dict[str, float]], min_pass: float, min_off_topic: float
) -> list[tuple[float, dict[str, float], float, dict[str, float]]]:
    """For each weighting, the highest threshold that lets min_pass of the answerable questions through, and
    what it does there; sorted by on-topic unanswerable refused, among those that refuse min_off_topic of
    both off-topic sets (the others after them)."""
    import numpy as np

    out = []
    for weights in grid:
        scores = {n: np.array([question_score(f, weights) for f in qs]) for n, qs in feats.items()}
        t = float(np.quantile(scores["answerable"], 1 - min_pass)) if len(scores["answerable"]) else 0.0
        through = {n: float(np.mean(s >= t)) if len(s) else 0.0 for n, s in scores.items()}
        off = min(1 - through.get("off_topic_scifact", 0.0), 1 - through.get("off_topic_chroma", 0.0))
        out.append((1 - through.get("unanswerable", 1.0) if off >= min_off_topic else -1 + off, weights, t, through))
    return sorted(out, key=lambda x: -x[0])


# --- replaying a run with the gate low, at other settings ------------------------------------------------


def simulate(row: dict[str, Any], threshold: float, floor: float | None = None) -> dict[str, Any]:
    """A record of a run with the gate low (candidates recorded), as the gate at `threshold` and the extractive
    choice at `floor` would have answered it: the sources under the threshold not sent, their sentences not
    candidates, the rest ranked and cut as ragvps.generate.extractive does."""
    from ragvps.generate import extractive as ex

    floor = ex.FLOOR if floor is None else floor
    evidence = {s["number"]: s.get("evidence") or 0.0 for s in row["sources"]}
    sent = {n for n, e in evidence.items() if e >= threshold}

    def score(c: list[Any]) -> float:
        return float(ex.combined(ex.COSINE_WEIGHT * c[4] + (1 - ex.COSINE_WEIGHT) * c[5], evidence[c[0]]))

    found = sorted((c for c in row.get("candidates", []) if c[0] in sent), key=lambda c: -score(c))
    chosen: list[list[Any]] = []
    best = score(found[0]) if found else 0.0
    for c in found:  # as ragvps.generate.extractive.choose (near-duplicates aside: rare, and never first)
        if score(c) < floor or score(c) < ex.RELATIVE * best or len(chosen) >= ex.MAX_QUOTES:
            break
        chosen.append(c)
    return {
        "id": row["id"],
        "answered": bool(chosen),
        "ms": row["ms"],
        "citations": [c[1] for c in chosen],
        "answer": "".join(f'\n- "{c[7]}" [{c[0]}]' for c in chosen),
        "sources": row["sources"],
        "quotes": [{"chunk_id": c[1], "start": c[2], "end": c[3]} for c in chosen],
    }


def gate_cost(db: Path, questions: list[dict[str, Any]]) -> dict[str, float]:
    """What the gate adds to an answer: the hits' details query with the evidence columns against the same
    query without them (what search ran before), plus combining and filtering; wall time and PostgreSQL's
    own execution time (EXPLAIN ANALYZE), p50 and p95 in ms, over the hits each question retrieves."""
    from psycopg import sql

    from ragvps.app import App, SearchRequest
    from ragvps.config import Settings
    from ragvps.db.sql import compose, q
    from ragvps.db.store import as_param
    from ragvps.embed import embed_documents
    from ragvps.retrieve.evidence import combine
    from ragvps.retrieve.search import chunk_evidence
    from ragvps.text import quotable

    wall: dict[str, list[float]] = {"details": [], "evidence": [], "sentences": []}
    server: dict[str, list[float]] = {"details": [], "evidence": []}
    with App.open(Settings.of(data_dir=db, embedder="local")) as app:
        k = max(app.settings.generate.answer_chunks, app.settings.search.top_k)
        floor = app.settings.generate.min_evidence
        for question in questions:
            text = question["text"]
            hits = app.search(SearchRequest(text, k=k)).hits
            vector = app.embed_query(text)
            if len(wall["sentences"]) < 40:  # what the sentence-cosine signal would add: the top 3's sentences
                said = [h.text[a:b] for h in hits[:TOP_FOR_COSINE] for a, b in quotable(h.text)[0]]
                t = time.perf_counter()
                embed_documents(app.embedder, [x for x in said if len(x.split()) >= 4] or ["-"])
                wall["sentences"].append((time.perf_counter() - t) * 1000)
            with app.connection() as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id"
                        " WHERE d.doc_id || '#' || c.seq = ANY(%s)",
                        ([h.chunk_id for h in hits],),
                    )
                ]
                eset = app.active_set(conn, "query")
                conn.commit()
                params = {
                    "language": app.settings.search.language,
                    "text": text,
                    "ids": ids,
                    "embedding": as_param(eset, vector),
                }
                queries = {
                    "details": sql.SQL(q("chunk_details")),
                    "evidence": compose("chunk_evidence", cosine=compose("chunk_cosine", table=eset.table)),
                }
                for name in ("details", "evidence"):
                    t = time.perf_counter()
                    if name == "details":
                        conn.execute(queries[name], params, prepare=False).fetchall()
                    else:
                        rows = chunk_evidence(conn, eset, ids, text, vector, app.settings)
                        _ = [i for i, r in rows.items() if combine(r[-2], r[-1]) >= floor]
                    wall[name].append((time.perf_counter() - t) * 1000)
                    plan = conn.execute(
                        sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + queries[name], params, prepare=False
                    ).fetchone()
                    server[name].append(plan[0][0]["Execution Time"] if plan else 0.0)
                conn.commit()

    def p(values: list[float], share: float) -> float:
        values = sorted(values)
        return values[min(len(values) - 1, int(len(values) * share))]

    return {
        "n": len(questions),
        "wall_p50": p(wall["evidence"], 0.5) - p(wall["details"], 0.5),
        "wall_details_p50": p(wall["details"], 0.5),
        "wall_evidence_p50": p(wall["evidence"], 0.5),
        "server_p50": p(server["evidence"], 0.5) - p(server["details"], 0.5),
        "server_details_p50": p(server["details"], 0.5),
        "server_evidence_p50": p(server["evidence"], 0.5),
        "server_evidence_p95": p(server["evidence"], 0.95),
        "sentences_p50": p(wall["sentences"], 0.5),
        "sentences_n": len(wall["sentences"]),
    }


# --- tables -----------------------------------------------------------------------------------------------

LABELS = {
    "cosine": "query-chunk cosine (mapped 0.15..0.75)",
    "terms": "IDF share of the query in the chunk",
    "sentence_terms": "IDF share in the chunk's best sentence",
    "rare": "share of the 2 rarest terms",
    "margin": "cosine above the k-th hit's (over 0.4)",
    "sentence_cosine": "best query-sentence cosine, top 3",
    "evidence": "evidence as shipped (0.6 cosine + 0.4 terms)",
}


def signal_table(rows: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Each signal's power to tell answerable from on-topic unanswerable (AUC, best hit per question), per half,
    and its median per set (the off-topic sets too). The sentence cosine counts only the questions whose
    sentences were embedded (the answerable and unanswerable ones, while the machine allowed)."""
    import numpy as np

    names = [n for n in ("answerable", "unanswerable", "off_topic_scifact", "off_topic_chroma") if n in rows]
    out = [
        "| signal (best hit) | AUC answerable vs unanswerable, calibration half | evaluation half | "
        + " | ".join(f"median {n}" for n in names)
        + " |",
        "|---" * (3 + len(names)) + "|",
    ]

    def best(k: str, name: str, half: str) -> list[float]:
        return [
            max((f[k] for f in hit_features(r)), default=0.0)
            for r in rows.get(name, [])
            if (k != "sentence_cosine" or r["sentence_cosines"])
            and (half == "all" or calibration(r["id"]) == (half == "calib"))
        ]

    for k in LABELS:
        aucs = [auc(best(k, "answerable", h), best(k, "unanswerable", h)) for h in ("calib", "eval")]
        med = [f"{np.median(v):.3f}" if (v := best(k, n, "all")) else "-" for n in names]
        n = (
            f" ({len(best(k, 'answerable', 'all'))} / {len(best(k, 'unanswerable', 'all'))} questions)"
            if k == "sentence_cosine"
            else ""
        )
        out.append(f"| {LABELS[k]}{n} | {aucs[0]:.3f} | {aucs[1]:.3f} | " + " | ".join(med) + " |")
    return out


def answer_curve(
    records: dict[str, list[dict[str, Any]]],
    questions: dict[str, list[dict[str, Any]]],
    score: Any,
    thresholds: tuple[float, ...] = (0.25, 0.30, 0.35, 0.40, 0.45, 0.50, 0.55, 0.60),
    floors: tuple[float | None, ...] = (None,),
) -> list[str]:
    """The figures at each threshold (and extractive floor), from the records of a run with the gate low."""
    from ragvps.generate.extractive import FLOOR

    cols = [
        ("answerable", "answered"),
        ("answerable", "gold_cited"),
        ("unanswerable", "refused"),
        ("off_topic_scifact", "refused"),
        ("off_topic_chroma", "refused"),
        ("biomedical_scifact", "refused"),
        ("claims_chroma", "refused"),
        ("quotes", "answered"),
        ("quotes", "span_precision"),
    ]
    cols = [(n, k) for n, k in cols if n in records]
    out = [
        "| answer_min_evidence | floor | " + " | ".join(f"{n}: {k}" for n, k in cols) + " |",
        "|---" * (2 + len(cols)) + "|",
    ]
    for floor in floors:
        for t in thresholds:
            f = {n: score([simulate(r, t, floor) for r in rows], questions[n]) for n, rows in records.items()}
            out.append(
                f"| {t:.2f} | {FLOOR if floor is None else floor:.2f} | "
                + " | ".join(f"{f[n].get(k, 0.0):.2f}" for n, k in cols)
                + " |"
            )
    return out


GRID = {
    "evidence_weight": (0.0, 0.3, 0.5),
    "floor": (0.34, 0.36, 0.38, 0.40, 0.42, 0.45),
    "threshold": (0.30, 0.35, 0.40, 0.45, 0.50),
    "quotes": (1, 2),
}


def choose(
    records: dict[str, list[dict[str, Any]]],
    questions: dict[str, list[dict[str, Any]]],
    score: Any,
) -> tuple[dict[str, float], list[str]]:
    """The rule the defaults follow, on the calibration half: the highest on-topic refusal among the settings that
    answer >= 0.91 of the answerable claims and refuse >= 0.95 of both off-topic sets; among those within 0.02
    of it, the highest gold-cited + quote span precision (then refusal). Returns the choice and the grid's lines."""
    from ragvps.generate import extractive as ex

    keep = ex.EVIDENCE_WEIGHT, ex.MAX_QUOTES
    table: list[tuple[dict[str, float], dict[str, dict[str, float]]]] = []
    try:
        for w, floor, t, cap in itertools.product(*GRID.values()):
            ex.EVIDENCE_WEIGHT, ex.MAX_QUOTES = w, int(cap)
            f = {n: score([simulate(r, t, floor) for r in rows], questions[n]) for n, rows in records.items()}
            table.append(({"evidence_weight": w, "floor": floor, "threshold": t, "quotes": cap}, f))
    finally:
        ex.EVIDENCE_WEIGHT, ex.MAX_QUOTES = keep

    def ok(f: dict[str, dict[str, float]]) -> bool:
        return (
            f["answerable"]["answered"] >= 0.91
            and f["off_topic_scifact"]["refused"] >= 0.95
            and f["off_topic_chroma"]["refused"] >= 0.95
        )

    fine = [(p, f) for p, f in table if ok(f)]
    best = max((f["unanswerable"]["refused"] for _, f in fine), default=0.0)
    near = [(p, f) for p, f in fine if f["unanswerable"]["refused"] >= best - 0.02]

    def merit(x: tuple[dict[str, float], dict[str, dict[str, float]]]) -> tuple[float, float]:
        f = x[1]
        total = f["answerable"]["gold_cited"] + f["quotes"].get("span_precision", 0.0)
        return round(total, 3), f["unanswerable"]["refused"]

    chosen = max(near, key=merit, default=table[0])[0]
    lines = [
        f"{p} "
        + " ".join(
            f"{n} {f[n]['answered']:.3f}/{f[n].get('gold_cited', 0):.3f}"
            + (f" P {f[n]['span_precision']:.3f}" if "span_precision" in f[n] else "")
            for n in f
        )
        + (" <- chosen" if p == chosen else "")
        for p, f in table
    ]
    return chosen, lines


def held_out_weights(rows: dict[str, list[dict[str, Any]]], min_pass: float = 0.90) -> str:
    """The best weighting of the gate's signals on the calibration half (off-topic refusal no worse than the
    shipped evidence's), and what it and the shipped one do on the evaluation half: the gate alone."""
    names = ["cosine", "terms", "sentence_terms", "margin", "rare"]
    grid = [
        dict(zip(names, w, strict=True))
        for w in itertools.product((0, 1, 2, 3, 4, 6), (0, 1, 2, 3, 4, 6), (0, 1, 2, 3, 4, 6), (0, 1, 2), (0, 1))
        if sum(w)
    ]
    shipped = {"cosine": 6.0, "terms": 4.0, "sentence_terms": 0.0, "margin": 0.0, "rare": 0.0}
    calib, held = split(rows, "calib"), split(rows, "eval")
    fitted = fit(calib, grid, min_pass, 0.0)
    ours = next(r for r in fitted if r[1] == shipped)

    def off(r: dict[str, float]) -> float:
        return min(1 - r["off_topic_scifact"], 1 - r["off_topic_chroma"])

    best = next(r for r in fitted if off(r[3]) >= off(ours[3]) - 0.02)
    out = []
    for label, r in (("the best weighting on the calibration half", best), ("the shipped evidence", ours)):
        e = rates(held, r[1], r[2])
        w = ", ".join(f"{k} {v:g}" for k, v in r[1].items() if v)
        out.append(
            f"{label} ({w}; threshold {r[2]:.2f}, fitted to let {min_pass:.2f} of the calibration half's "
            f"answerable claims through) lets {e['answerable']:.2f} of the held-out answerable claims through "
            f"and refuses {1 - e['unanswerable']:.2f} of the on-topic unanswerable ones and "
            f"{1 - e['off_topic_scifact']:.2f} / {1 - e['off_topic_chroma']:.2f} of the off-topic ones"
        )
    return "; ".join(out)
