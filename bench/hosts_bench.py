"""Several Ollama hosts: embed-stage throughput with 1, 2 and 3 stand-in hosts, each one lane with a fixed
per-input delay (as Ollama embeds a batch's inputs one after another), interleaved in one run.

    python bench/hosts_bench.py [--chunks 576] [--delay-ms 30] [--rounds 2]

576 chunks are 18 batches of 32: 9 per host with two, 6 with three, so no host waits for a straggler.
Goal: 2 hosts >= 1.8x and 3 hosts >= 2.6x the chunks/s of one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT as REPO


def serve(delay: float) -> None:
    """One stand-in host in this process, until stdin closes (each host is its own process, as on a network)."""
    from support.ollama_server import FakeOllama

    fake = FakeOllama(real_vectors=False, delay_per_input=delay).start()
    print(fake.url, flush=True)
    sys.stdin.read()
    fake.stop()


def run(n_hosts: int, chunks: list, delay: float) -> dict:
    from ragvps.config import Settings
    from ragvps.embed.models import spec_for
    from ragvps.embed.registry import make_lanes
    from ragvps.ingest.embedding import embed_stage
    from ragvps.ingest.vectorcache import VectorCache

    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--serve", str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        for _ in range(n_hosts)
    ]
    try:
        urls = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
        settings = Settings.of(embedder="ollama", ollama_url=",".join(urls), batch_size=32)
        spec = spec_for(settings)
        with tempfile.TemporaryDirectory() as tmp:
            cache = VectorCache(Path(tmp), spec.identity, spec.dims)
            start = time.perf_counter()
            outcome = embed_stage(
                cache,
                chunks,
                spec,
                lambda: make_lanes(settings, spec, lambda: None),  # type: ignore[arg-type,return-value]
                settings.embed.batch_size,
                lambda *a: None,
            )
            took = time.perf_counter() - start
        sent = [outcome.hosts[u]["chunks"] for u in urls]
        assert outcome.embedded == len(chunks) == sum(sent), (outcome.embedded, sent)
        return {
            "hosts": n_hosts,
            "seconds": round(took, 2),
            "chunks_per_s": round(len(chunks) / took, 1),
            "per_host": sent,
        }
    finally:
        for p in procs:
            p.communicate(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=576)
    parser.add_argument("--delay-ms", type=float, default=30.0, help="each host's time per input")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve)
        return
    from ragvps.records import Chunk

    words = ["postgres", "vector", "index", "chunk", "query", "answer", "model", "server", "batch", "lane"]
    chunks = []
    for i in range(args.chunks):
        text = " ".join(words[(i * 7 + j) % len(words)] for j in range(40 + i % 60)) + f" number {i}"
        chunks.append(Chunk(f"doc{i // 10}.md", i % 10, "", text, 0, len(text), 0, 0))
    report: dict = {
        "load": os.getloadavg(),
        "cores": os.cpu_count(),
        "chunks": args.chunks,
        "delay_ms_per_input": args.delay_ms,
        "runs": [],
    }
    for _ in range(min(args.rounds, 5)):
        for n in (1, 2, 3):
            report["runs"].append(run(n, chunks, args.delay_ms / 1000))
            print(json.dumps(report["runs"][-1]), file=sys.stderr)
    best = {n: sum(r["chunks_per_s"] for r in report["runs"] if r["hosts"] == n) for n in (1, 2, 3)}
    report["speedup_2"] = round(best[2] / best[1], 2)
    report["speedup_3"] = round(best[3] / best[1], 2)
    report["load_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
