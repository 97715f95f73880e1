"""Retrieval quality and latency of the three search modes on SciFact (doc-level nDCG@10, recall@10, MRR@10).

    python bench/quality_bench.py                      # ingest (incremental, cached) + every variant
    python bench/quality_bench.py --variants main      # just hybrid / vector / keyword

Ingests ../shared/data/scifact-dev/corpus.jsonl into --data-dir (default bench/out/scifact: its
embedding cache makes reruns cheap), embeds the queries once (cached there too), then runs every
query through each variant. A document's rank is that of its best chunk. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from common.scifact import DATASET, load_eval, query_vectors

from ragvps.config import Settings, load_settings
from ragvps.db import store
from ragvps.db.database import connect
from ragvps.measure import metrics
from ragvps.retrieve import fusion, search

# Published recipes, kept here only as baselines to beat (the product's SQL is in sql/queries.sql).
TSRANK_WEBSEARCH = """
SELECT c.id FROM chunks c, websearch_to_tsquery(%(language)s::regconfig, %(text)s) q
WHERE c.tsv @@ q ORDER BY ts_rank_cd(c.tsv, q) DESC, c.id LIMIT %(candidates)s"""
TSRANK_OR = """
WITH q AS (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query
           FROM unnest(to_tsvector(%(language)s::regconfig, %(text)s)))
SELECT c.id FROM chunks c, q WHERE c.tsv @@ q.query
ORDER BY ts_rank_cd(c.tsv, q.query) DESC, c.id LIMIT %(candidates)s"""


def ingest(settings: Settings, dataset: Path) -> None:
    from ragvps.app import App

    last = {"t": 0.0}

    def progress(stage: str, done: int, total: int) -> None:
        if time.monotonic() - last["t"] > 10 or done == total:
            last["t"] = time.monotonic()
            print(f"  {stage} {done}/{total}", file=sys.stderr)

    t0 = time.perf_counter()
    with App.open(settings) as app:
        report = app.ingest(dataset / "corpus.jsonl", progress, lambda m: print("warning:", m, file=sys.stderr))
    print(
        f"ingest: {report.documents} documents, {report.chunks} chunks, embedded {report.embedded}, "
        f"stored {report.stored} in {time.perf_counter() - t0:.1f} s",
        file=sys.stderr,
    )


Leg = Callable[[object, str, np.ndarray], list[int]]


def variants(settings: Settings, eset: store.EmbeddingSet) -> dict[str, tuple[str, ...]]:
    """Variant name -> the legs it fuses (names in `legs`)."""
    return {
        "vector": ("vector",),
        "keyword (BM25)": ("bm25",),
        "hybrid (RRF vector + BM25)": ("vector", "bm25"),
        "keyword ts_rank_cd websearch_to_tsquery": ("tsrank_web",),
        "keyword ts_rank_cd OR": ("tsrank_or",),
        "hybrid RRF vector + ts_rank_cd OR": ("vector", "tsrank_or"),
        "hybrid RRF vector + ts_rank_cd websearch_to_tsquery (published recipe)": ("vector", "tsrank_web"),
        "keyword BM25, no candidate budget": ("bm25_all",),
        "keyword BM25, budget 100": ("bm25_100",),
        "keyword BM25, budget 1000": ("bm25_1000",),
        "hybrid RRF vector + BM25 budget 1000": ("vector", "bm25_1000"),
        "keyword BM25 k1 0.9 b 0.4": ("bm25_k09",),
        "keyword BM25 k1 1.5 b 0.75": ("bm25_k15",),
    }


def legs(settings: Settings, eset: store.EmbeddingSet) -> dict[str, Leg]:
    def sql_leg(query: str) -> Leg:
        def run(conn, text, _vec):  # type: ignore[no-untyped-def]
            params = {"language": settings.search.language, "text": text, "candidates": settings.search.candidates}
            return [r[0] for r in conn.execute(query, params)]

        return run

    def bm25(**kw: float | int) -> Leg:
        params = search.Bm25(**kw)
        return lambda conn, text, _vec: search.keyword_leg(conn, text, settings, bm25=params)  # type: ignore[arg-type]

    return {
        "vector": lambda conn, _text, vec: search.vector_leg(conn, eset, vec, settings),  # type: ignore[arg-type]
        "bm25": bm25(),
        "bm25_all": bm25(budget=2**31 - 1),
        "bm25_100": bm25(budget=100),
        "bm25_1000": bm25(budget=1000),
        "bm25_k09": bm25(k1=0.9, b=0.4),
        "bm25_k15": bm25(k1=1.5),
        "tsrank_web": sql_leg(TSRANK_WEBSEARCH),
        "tsrank_or": sql_leg(TSRANK_OR),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("bench/out/scifact"))
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--database-url", default="", help="default: the embedded server in the data dir")
    parser.add_argument("--variants", choices=["main", "all", "keyword"], default="all")
    parser.add_argument("--match", default="", help="only variants whose name contains this")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--limit", type=int, default=0, help="only the first N queries")
    args = parser.parse_args()

    settings = load_settings(env={}, data_dir=args.data_dir, database_url=args.database_url)
    if not args.skip_ingest:
        ingest(settings, args.dataset)
    queries, qrels = load_eval(args.dataset)
    qids = sorted(queries)[: args.limit or None]
    texts = [search.check_query(queries[q]) for q in qids]

    with connect(settings) as conn:
        eset = store.active_set(conn)
        assert eset is not None, "nothing ingested"
        doc_of = dict(conn.execute("SELECT c.id, d.doc_id FROM chunks c JOIN documents d ON d.id = c.document_id"))
        n_chunks = len(doc_of)
        chosen = variants(settings, eset)
        if args.variants == "main":
            chosen = {k: v for k, v in chosen.items() if k.startswith(("vector", "keyword (BM25)", "hybrid (RRF"))}
        elif args.variants == "keyword":
            chosen = {k: v for k, v in chosen.items() if "vector" not in v}
        chosen = {k: v for k, v in chosen.items() if args.match in k}
        needed = {leg for names in chosen.values() for leg in names}
        vectors = query_vectors(settings, texts) if "vector" in needed else np.zeros((len(texts), 1))
        run_legs = legs(settings, eset)
        ranked: dict[str, list[list[int]]] = {}
        times: dict[str, list[float]] = {}
        for leg in sorted(needed):
            ranked[leg], times[leg] = [], []
            for text, vec in zip(texts, vectors, strict=True):
                t0 = time.perf_counter()
                ranked[leg].append(run_legs[leg](conn, text, vec))
                times[leg].append((time.perf_counter() - t0) * 1000)

    print(
        f"SciFact dev: {len(qids)} queries, {n_chunks} chunks, doc-level; candidates {settings.search.candidates} "
        f"per leg, RRF k={settings.search.rrf_k}\n"
    )
    print("| variant | nDCG@10 | recall@10 | MRR@10 | found anything | DB ms p50 | DB ms p95 |")
    print("|---|---|---|---|---|---|---|")
    for name, names in chosen.items():
        scores: dict[str, list[float]] = {"ndcg": [], "recall": [], "mrr": []}
        found = 0
        for i, qid in enumerate(qids):
            lists = [ranked[leg][i] for leg in names]
            fused = [c for c, _ in fusion.rrf([x for x in lists if x], settings.search.rrf_k)]
            docs = metrics.dedupe([doc_of[c] for c in fused])
            found += bool(docs)
            scores["ndcg"].append(metrics.ndcg_at(docs, qrels[qid], 10))
            scores["recall"].append(metrics.recall_at(docs, qrels[qid], 10))
            scores["mrr"].append(metrics.mrr_at(docs, qrels[qid], 10))
        total = [sum(parts) for parts in zip(*(times[leg] for leg in names), strict=True)]
        p50, p95 = statistics.median(total), float(np.percentile(total, 95))
        print(
            f"| {name} | {np.mean(scores['ndcg']):.3f} | {np.mean(scores['recall']):.3f} | "
            f"{np.mean(scores['mrr']):.3f} | {found}/{len(qids)} | {p50:.1f} | {p95:.1f} |"
        )


if __name__ == "__main__":
    main()
