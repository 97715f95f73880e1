"""Embedding benchmark: pipeline overhead on SciFact, batched vs per-chunk Ollama requests, local model speed.

    python bench/embed_bench.py [--chunks 160] [--latency-ms 20] [--ollama-chunks 64] [--sweep-chunks 96]

1. overhead: embed_stage's wall time / the pure model time for the same texts in the same batches
   (same process, interleaved: pure, stage, pure, stage). Goal <= 1.10.
2. batched (32) vs one request per chunk against the in-process fake Ollama with a fixed latency.
3. local model: chunks/s, tokens/s and peak RSS per (threads, sub-batch), each in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact-dev" / "corpus.jsonl"
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def scifact_chunks(n: int):  # type: ignore[no-untyped-def]
    """The first n chunks of SciFact, cut with the local model's default chunker settings."""
    from ragvps.config import Settings
    from ragvps.embed.models import spec_for
    from ragvps.ingest import sources
    from ragvps.ingest.chunk import chunk_document
    from ragvps.ingest.pipeline import chunker_config

    spec = spec_for(Settings())
    config = chunker_config(Settings(), spec)
    [source] = [f for f in sources.scan(SCIFACT).files]
    chunks = []
    for doc in sources.load(source, lambda m: None):
        chunks.extend(chunk_document(doc, config))
        if len(chunks) >= n:
            break
    return spec, chunks[:n]


def overhead(n: int, batch: int) -> dict:
    from ragvps.embed import embed_documents
    from ragvps.embed.local import LocalEmbedder
    from ragvps.ingest.artifacts import VectorCache
    from ragvps.ingest.pipeline import IngestReport, embed_stage

    spec, chunks = scifact_chunks(n)
    embedder = LocalEmbedder(sub_batch=8)
    embed_documents(embedder, ["warm up"])
    texts = list({c.content_hash: c.embed_text for c in chunks}.values())
    pure, stage = [], []
    for _ in range(2):
        start = time.perf_counter()
        for lo in range(0, len(texts), batch):
            embed_documents(embedder, texts[lo : lo + batch])
        pure.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as tmp:
            cache = VectorCache(Path(tmp), spec.identity, spec.dims)
            start = time.perf_counter()
            embed_stage(cache, chunks, spec, lambda: embedder, batch, IngestReport(), lambda *a: None)
            stage.append(time.perf_counter() - start)
    return {"chunks": len(texts), "pure_s": [round(x, 2) for x in pure], "stage_s": [round(x, 2) for x in stage],
            "ratio": round(sum(stage) / sum(pure), 3)}


def batched_vs_single(n: int, latency: float, real_vectors: bool) -> dict:
    from ollama_server import FakeOllama

    from ragvps.embed.models import model_spec
    from ragvps.embed.ollama import OllamaEmbedder

    _, chunks = scifact_chunks(n)
    texts = [c.embed_text for c in chunks]
    fake = FakeOllama(latency=latency, real_vectors=real_vectors).start()
    try:
        spec = model_spec("all-minilm")
        assert spec is not None
        client = OllamaEmbedder(fake.url, spec)
        client.embed(["warm up"])
        out = {}
        for name, size in (("batched_32", 32), ("per_chunk", 1)):
            start = time.perf_counter()
            for lo in range(0, len(texts), size):
                client.embed(texts[lo : lo + size])
            out[name] = round(time.perf_counter() - start, 2)
        out["speedup"] = round(out["per_chunk"] / out["batched_32"], 2)
        return {"chunks": len(texts), "latency_ms": latency * 1000, "real_vectors": real_vectors} | out
    finally:
        fake.stop()


def local_run(texts_file: Path, threads: int, sub_batch: int, arena: bool) -> dict:
    """One configuration, in this (fresh) process: throughput and peak RSS."""
    from ragvps import tokens
    from ragvps.embed import embed_documents
    from ragvps.embed.local import LocalEmbedder

    texts = json.loads(texts_file.read_text())
    n_tokens = sum(min(t + 2, 256) for t in tokens.count_many(texts))
    embedder = LocalEmbedder(threads=threads, sub_batch=sub_batch, arena=arena)
    embed_documents(embedder, ["warm up"])
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    for lo in range(0, len(texts), 32):
        embed_documents(embedder, texts[lo : lo + 32])
    took = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"threads": threads, "sub_batch": sub_batch, "arena": arena, "chunks": len(texts),
            "chunks_per_s": round(len(texts) / took, 1), "tokens_per_s": round(n_tokens / took),
            "mean_tokens": round(n_tokens / len(texts)), "rss_after_load_mb": round(loaded),
            "peak_rss_mb": round(peak)}


def sweep(n: int, configs: list[tuple[int, int, bool]]) -> list[dict]:
    _, chunks = scifact_chunks(n)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        texts = Path(tmp) / "texts.json"
        texts.write_text(json.dumps([c.embed_text for c in chunks]))
        for threads, sub_batch, arena in configs:
            cmd = [sys.executable, __file__, "--one", f"{threads},{sub_batch},{int(arena)},{texts}"]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout
            results.append(json.loads(out.splitlines()[-1]))
            print(json.dumps(results[-1]), file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=160, help="SciFact chunks for the overhead ratio")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="fake Ollama's added latency per request")
    parser.add_argument("--ollama-chunks", type=int, default=64)
    parser.add_argument("--sweep-chunks", type=int, default=96)
    parser.add_argument("--only", choices=("overhead", "ollama", "local"), default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        threads, sub_batch, arena, texts = args.one.split(",", 3)
        print(json.dumps(local_run(Path(texts), int(threads), int(sub_batch), arena == "1")))
        return
    report: dict = {"load": os.getloadavg()[0], "cores": os.cpu_count()}
    if args.only in (None, "overhead"):
        report["overhead"] = overhead(args.chunks, args.batch)
        print(json.dumps(report["overhead"]), file=sys.stderr)
    if args.only in (None, "ollama"):
        report["ollama"] = [batched_vs_single(args.ollama_chunks, args.latency_ms / 1000, real)
                            for real in (False, True)]
        print(json.dumps(report["ollama"]), file=sys.stderr)
    if args.only in (None, "local"):
        configs = [(2, 8, False), (1, 8, False), (2, 4, False), (2, 32, False), (2, 8, True)]
        report["local"] = sweep(args.sweep_chunks, configs)
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
