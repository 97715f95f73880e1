"""Embedding benchmark: pipeline overhead on SciFact, batched vs per-chunk Ollama requests, local model speed.

    python bench/embed_bench.py [--chunks 160] [--latency-ms 20] [--ollama-chunks 64] [--sweep-chunks 96]
    python bench/embed_bench.py --only padding [--padding-chunks 192] [--rounds 2]

1. overhead: embed_stage's wall time / the pure model time for the same texts in the same batches
   (same process, interleaved: pure, stage, pure, stage). Goal <= 1.10.
2. batched (32) vs one request per chunk against the in-process fake Ollama with a fixed latency.
3. local model: chunks/s, tokens/s and peak RSS per (threads, sub-batch), each in a fresh subprocess.
4. padding: real (non-pad) tokens/s of ragvps's embed stage (the whole work list sorted by length, then
   batches of 32 in sub-batches of 8) against the naive loop (batches of 8 in arrival order), same chunks,
   interleaved in one process; then each alone in a fresh process for its peak RSS. Goal >= 1.28x, <= 0.5 GB.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import DATA
from common import ROOT as REPO

SCIFACT = DATA / "scifact-dev" / "corpus.jsonl"


def scifact_chunks(n: int):  # type: ignore[no-untyped-def]
    """The first n chunks of SciFact, cut with the local model's default chunker settings."""
    from ragvps.config import Settings
    from ragvps.embed.models import spec_for
    from ragvps.ingest import sources
    from ragvps.ingest.chunk import chunk_document
    from ragvps.ingest.chunking import chunker_config

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
    from ragvps.embed.hosts import OneLane
    from ragvps.embed.local import LocalEmbedder
    from ragvps.ingest.embedding import embed_stage
    from ragvps.ingest.vectorcache import VectorCache

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
            embed_stage(cache, chunks, spec, lambda: OneLane(embedder), batch, lambda *a: None)
            stage.append(time.perf_counter() - start)
    return {
        "chunks": len(texts),
        "pure_s": [round(x, 2) for x in pure],
        "stage_s": [round(x, 2) for x in stage],
        "ratio": round(sum(stage) / sum(pure), 3),
    }


def batched_vs_single(n: int, latency: float, real_vectors: bool) -> dict:
    from support.ollama_server import FakeOllama

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
    return {
        "threads": threads,
        "sub_batch": sub_batch,
        "arena": arena,
        "chunks": len(texts),
        "chunks_per_s": round(len(texts) / took, 1),
        "tokens_per_s": round(n_tokens / took),
        "mean_tokens": round(n_tokens / len(texts)),
        "rss_after_load_mb": round(loaded),
        "peak_rss_mb": round(peak),
    }


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


def _layouts(chunks: list, spec) -> tuple[list[str], list[int], list[list[int]], list[list[int]]]:  # type: ignore[no-untyped-def]
    """The distinct texts, their real token counts (capped at the model's 256), and the sub-batches (lists of
    indices) each side pads together: naive = 8 in arrival order; ragvps = embed_stage's sort, batches of 32,
    sub-batches of 8 in LocalEmbedder's order (by token count)."""
    from ragvps.ingest.embedding import token_counts

    unique = list({c.content_hash: c for c in chunks}.values())
    texts = [c.embed_text for c in unique]
    counts = [min(n, spec.max_tokens) for n in token_counts(unique, spec)]
    naive = [list(range(lo, min(lo + 8, len(texts)))) for lo in range(0, len(texts), 8)]
    order = sorted(range(len(texts)), key=token_counts(unique, spec).__getitem__)
    ragvps = []
    for lo in range(0, len(order), 32):
        batch = order[lo : lo + 32]
        inner = sorted(range(len(batch)), key=lambda i: counts[batch[i]])
        ragvps.extend([batch[i] for i in inner[k : k + 8]] for k in range(0, len(inner), 8))
    return texts, counts, naive, ragvps


def _pad(counts: list[int], groups: list[list[int]]) -> float:
    padded = sum(max(counts[i] for i in g) * len(g) for g in groups)
    return round(1 - sum(counts) / padded, 4)


def padding(n: int, rounds: int) -> dict:
    from ragvps.embed.hosts import OneLane
    from ragvps.embed.local import LocalEmbedder
    from ragvps.ingest.embedding import embed_stage
    from ragvps.ingest.vectorcache import VectorCache

    spec, chunks = scifact_chunks(n)
    texts, counts, naive_groups, ragvps_groups = _layouts(chunks, spec)
    real = sum(counts)
    embedder = LocalEmbedder(sub_batch=8)
    embedder.embed(["warm up"])
    naive_s, ragvps_s = [], []
    for _ in range(min(rounds, 5)):
        start = time.perf_counter()
        for lo in range(0, len(texts), 8):  # the naive loop: batches of 8 in arrival order
            embedder.embed(texts[lo : lo + 8])
        naive_s.append(time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as tmp:
            cache = VectorCache(Path(tmp), spec.identity, spec.dims)
            start = time.perf_counter()
            embed_stage(cache, chunks, spec, lambda: OneLane(embedder), 32, lambda *a: None)
            ragvps_s.append(time.perf_counter() - start)
    out = {
        "chunks": len(texts),
        "real_tokens": real,
        "mean_tokens": round(real / len(texts)),
        "naive_padding": _pad(counts, naive_groups),
        "ragvps_padding": _pad(counts, ragvps_groups),
        "naive_s": [round(x, 2) for x in naive_s],
        "ragvps_s": [round(x, 2) for x in ragvps_s],
        "naive_real_tokens_per_s": round(real * len(naive_s) / sum(naive_s)),
        "ragvps_real_tokens_per_s": round(real * len(ragvps_s) / sum(ragvps_s)),
        "ratio": round(sum(naive_s) / sum(ragvps_s), 3),
    }
    with tempfile.TemporaryDirectory() as tmp:  # the chunks in a file: the fresh process loads no corpus
        saved = Path(tmp) / "chunks.json"
        saved.write_text(json.dumps([dataclasses.asdict(c) for c in chunks]))
        for side in ("naive", "ragvps"):
            cmd = [sys.executable, __file__, "--one-padding", f"{side},{saved}"]
            result = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout
            out[f"{side}_peak_rss_mb"] = json.loads(result.splitlines()[-1])["peak_rss_mb"]
    return out


def padding_alone(side: str, saved: Path) -> dict:
    """One side of the padding comparison in this (fresh) process, for its peak RSS (MiB)."""
    from ragvps.config import Settings
    from ragvps.embed.hosts import OneLane
    from ragvps.embed.local import LocalEmbedder
    from ragvps.embed.models import spec_for
    from ragvps.ingest.embedding import embed_stage
    from ragvps.ingest.vectorcache import VectorCache
    from ragvps.records import Chunk

    spec = spec_for(Settings())
    chunks = [Chunk(**c) for c in json.loads(saved.read_text())]
    embedder = LocalEmbedder(sub_batch=8)
    if side == "naive":
        texts = list({c.content_hash: c.embed_text for c in chunks}.values())
        for lo in range(0, len(texts), 8):
            embedder.embed(texts[lo : lo + 8])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            embed_stage(
                VectorCache(Path(tmp), spec.identity, spec.dims),
                chunks,
                spec,
                lambda: OneLane(embedder),
                32,
                lambda *a: None,
            )
    return {"side": side, "peak_rss_mb": round(_vm_hwm_kib() / 1024)}


def _vm_hwm_kib() -> int:
    """This process's peak RSS since exec (ru_maxrss would keep the forking parent's peak, on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=160, help="SciFact chunks for the overhead ratio")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--latency-ms", type=float, default=20.0, help="fake Ollama's added latency per request")
    parser.add_argument("--ollama-chunks", type=int, default=64)
    parser.add_argument("--sweep-chunks", type=int, default=96)
    parser.add_argument("--padding-chunks", type=int, default=192)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of the padding comparison")
    parser.add_argument("--only", choices=("overhead", "ollama", "local", "padding"), default=None)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--one-padding", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_padding:
        side, saved = args.one_padding.split(",", 1)
        print(json.dumps(padding_alone(side, Path(saved))))
        return
    if args.one:
        threads, sub_batch, arena, texts = args.one.split(",", 3)
        print(json.dumps(local_run(Path(texts), int(threads), int(sub_batch), arena == "1")))
        return
    report: dict = {"load": os.getloadavg()[0], "cores": os.cpu_count()}
    if args.only in (None, "overhead"):
        report["overhead"] = overhead(args.chunks, args.batch)
        print(json.dumps(report["overhead"]), file=sys.stderr)
    if args.only in (None, "ollama"):
        report["ollama"] = [
            batched_vs_single(args.ollama_chunks, args.latency_ms / 1000, real) for real in (False, True)
        ]
        print(json.dumps(report["ollama"]), file=sys.stderr)
    if args.only in (None, "local"):
        configs = [(2, 8, False), (1, 8, False), (2, 4, False), (2, 32, False), (2, 8, True)]
        report["local"] = sweep(args.sweep_chunks, configs)
    if args.only in (None, "padding"):
        report["padding"] = padding(args.padding_chunks, args.rounds)
        print(json.dumps(report["padding"]), file=sys.stderr)
    report["load_after"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
