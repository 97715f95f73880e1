"""The SciFact data set as the retrieval benches use it: its queries and judgements, the query vectors (cached),
the chunks and vectors an ingest into bench/out/scifact left (run bench/quality_bench.py once first), and that
corpus enlarged with perturbed copies to any size (store_bench, serve_bench)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from common import DATA
from ragvps.config import Settings
from ragvps.embed.models import spec_for
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import Chunk, Document

DATASET = DATA / "scifact-dev"


def load_eval(dataset: Path) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    queries = {}
    for line in (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            queries[str(record["_id"])] = record["text"]
    qrels: dict[str, dict[str, int]] = {}
    for line in (dataset / "qrels.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        qid, did, score = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(score)
    return {q: t for q, t in queries.items() if q in qrels}, qrels


def query_vectors(settings: Settings, texts: list[str]) -> np.ndarray:
    """Query embeddings, cached in the data directory by the texts' hash."""
    from ragvps.embed import embed_queries
    from ragvps.embed.registry import make_embedder

    key = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = settings.database.data_dir / "bench" / f"queries-{settings.embed.model_name}-{key}.npy"
    if path.exists():
        return np.load(path)
    embedder = make_embedder(settings)
    vectors = np.concatenate([embed_queries(embedder, texts[i : i + 64]) for i in range(0, len(texts), 64)])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def queries(dataset: Path = DATASET) -> list[str]:
    """Every query's text, judged or not."""
    texts = []
    for line in (dataset / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            texts.append(json.loads(line)["text"])
    return texts


def unseen_questions(warm: int = 50) -> tuple[list[str], list[str]]:
    """Questions a server has not seen (issue 34: its embedding memo would answer a repeated one): SciFact's claims
    and the Chroma chunking study's questions, each once, in a fixed shuffled order; the last `warm` apart, to warm
    a server with before a phase that sends the others, none twice."""
    import random

    texts = list(dict.fromkeys(t.strip() for t in queries(DATASET) + queries(DATA / "chroma_chunking") if t.strip()))
    random.Random(34).shuffle(texts)
    return texts[:-warm], texts[-warm:]


CHUNK_FIELDS = frozenset(f.name for f in dataclasses.fields(Chunk))


def base_corpus(settings: Settings) -> tuple[list[Document], list[Chunk], np.ndarray]:
    """The chunk files in the data dir, keeping the chunks whose vectors are cached."""
    spec = spec_for(settings)
    cache = VectorCache(settings.database.data_dir, spec.identity, spec.dims)
    docs, chunks = [], []
    for path in sorted((settings.database.data_dir / "chunks").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines()[1:]:
            record = json.loads(line)
            if record.pop("type") == "document":
                docs.append(record)
            else:  # the file also carries derived fields (id, content_hash): keep the Chunk's own
                chunks.append(Chunk(**{k: v for k, v in record.items() if k in CHUNK_FIELDS}))
    missing = set(cache.missing(c.content_hash for c in chunks))
    kept = [c for c in chunks if c.content_hash not in missing]
    if not kept:
        sys.exit(f"no cached embeddings in {settings.database.data_dir}: run bench/quality_bench.py first")
    doc_ids = {c.doc_id for c in kept}
    documents = [Document(**d) for d in docs if d["doc_id"] in doc_ids]
    return documents, kept, cache.get([c.content_hash for c in kept])


def perturb_text(text: str, rng: np.random.Generator) -> str:
    words = text.split(" ")
    if len(words) > 3:
        del words[int(rng.integers(len(words)))]
        i, j = rng.integers(len(words), size=2)
        words[i], words[j] = words[j], words[i]
    return " ".join(words)


def enlarge(docs: list[Document], chunks: list[Chunk], vectors: np.ndarray, rows: int, noise: float, seed: int = 0):
    """Batches of (document, chunks, vectors): the originals, then perturbed copies, up to `rows` chunks."""
    rng = np.random.default_rng(seed)
    by_doc: dict[str, list[int]] = {}
    for i, c in enumerate(chunks):
        by_doc.setdefault(c.doc_id, []).append(i)
    out, n, copy = [], 0, 0
    while n < rows:
        for doc in docs:
            idx = by_doc[doc.doc_id][: rows - n]
            if not idx:
                break
            vecs = vectors[idx]
            new_doc, new_chunks = doc, [chunks[i] for i in idx]
            if copy:
                new_doc = dataclasses.replace(doc, doc_id=f"{doc.doc_id}~{copy}", source=f"copy{copy}/{doc.source}")
                new_chunks = [
                    dataclasses.replace(c, doc_id=new_doc.doc_id, text=perturb_text(c.text, rng)) for c in new_chunks
                ]
                vecs = vecs + rng.normal(scale=noise, size=vecs.shape).astype(np.float32)
                vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            out.append((new_doc, new_chunks, vecs.astype(np.float32)))
            n += len(idx)
        copy += 1
    return out
