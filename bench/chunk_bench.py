"""Chunking speed and fit, side by side: ragvps (structure / fixed / sentences, exact token counts) against
langchain-text-splitters' RecursiveCharacterTextSplitter (characters) and semchunk (counted with the same
WordPiece tokenizer), on SciFact and the Chroma corpus; plus the published 300-word recipe's overflow.

    python bench/chunk_bench.py [--data ../shared/data] [--repeat 1] [--json]

Bench-only dependencies: pip install 'langchain-text-splitters>=1,<2' 'semchunk>=3,<5'
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from common import DATA

from ragvps import tokens
from ragvps.ingest.chunk import ChunkerConfig, chunk_documents
from ragvps.ingest.sources import SourceFile, load
from ragvps.records import Document

LIMIT = 256  # all-MiniLM-L6-v2's input, [CLS] and [SEP] included
SIZE, OVERLAP = 200, 30  # ragvps's defaults for the local model
CORPORA = {"scifact": "scifact-dev/corpus.jsonl", "chroma": "chroma_chunking/corpus.jsonl"}


def corpus(path: Path) -> list[Document]:
    return load(SourceFile(path, path.name, "jsonl"), print)


def flat(doc: Document) -> str:
    """The text the other splitters get: title, blank line, text (what ragvps reads too)."""
    return f"{doc.title}\n\n{doc.text}" if doc.title else doc.text


def timed(fn: Callable[[], list[str]], repeat: int) -> tuple[float, float, list[str]]:
    best_wall, best_cpu, out = float("inf"), float("inf"), []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best_wall, best_cpu, out


def fit(texts: list[str]) -> dict[str, float]:
    """How the chunks fit the local model: share over its input, tokens it would silently drop."""
    counts = tokens.count_many(texts)
    over = [n + 2 - LIMIT for n in counts if n + 2 > LIMIT]
    return {
        "over_limit_pct": 100 * len(over) / len(counts),
        "tokens_dropped_pct": 100 * sum(over) / sum(counts),
        "median_tokens": statistics.median(counts),
        "max_tokens": max(counts),
    }


def run(docs: list[Document], repeat: int, check_fit: bool) -> list[dict[str, object]]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    from semchunk import chunkerify

    texts = [flat(d) for d in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    wp = tokens.wordpiece()
    tokens.count_llm("warm up")
    chars = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    semchunker = chunkerify(lambda t: len(wp.encode(t, add_special_tokens=False).ids), SIZE)

    def ragvps(mode: str) -> Callable[[], list[str]]:
        config = ChunkerConfig(mode, SIZE, OVERLAP, LIMIT)
        return lambda: [c.embed_text for cs in chunk_documents(docs, config) for c in cs]

    def words300() -> list[str]:
        return [" ".join(w[i : i + 300]) for t in texts for w in [t.split()] for i in range(0, len(w), 300)]

    methods: dict[str, Callable[[], list[str]]] = {
        "tokenize once (batch, offsets)": lambda: [
            str(len(e.ids)) for e in wp.encode_batch(texts, add_special_tokens=False)
        ],
        "langchain RecursiveCharacterTextSplitter 1000/200 chars": lambda: [
            c for t in texts for c in chars.split_text(t)
        ],
        f"semchunk {SIZE} WordPiece tokens": lambda: [c for t in texts for c in semchunker(t)],
        "300-word recipe": words300,
        f"ragvps structure {SIZE}/{OVERLAP} (exact, + cl100k)": ragvps("structure"),
        f"ragvps fixed {SIZE}/{OVERLAP}": ragvps("fixed"),
        "ragvps sentences": ragvps("sentences"),
    }
    rows = []
    for name, fn in methods.items():
        wall, cpu, out = timed(fn, repeat)
        row: dict[str, object] = {
            "method": name,
            "MB/s": round(mb / wall, 2),
            "MB/s cpu": round(mb / cpu, 2),
            "seconds": round(wall, 2),
            "chunks": len(out) if "tokenize" not in name else None,
        }
        if check_fit and "tokenize" not in name:
            row |= {k: round(v, 1) for k, v in fit(out).items()}
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs")
    parser.add_argument("--no-fit", action="store_true", help="skip counting every chunk's tokens")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {"load_avg_1min": os.getloadavg()[0], "cpus": os.cpu_count()}
    for name, rel in CORPORA.items():
        docs = corpus(args.data / rel)
        results[name] = run(docs, args.repeat, not args.no_fit)
        if not args.json:
            mb = sum(len(flat(d).encode()) for d in docs) / 1e6
            print(f"\n{name}: {len(docs)} documents, {mb:.1f} MB (load {os.getloadavg()[0]:.1f})")
            for row in results[name]:
                print("  " + " | ".join(f"{k} {v}" for k, v in row.items() if v is not None))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
