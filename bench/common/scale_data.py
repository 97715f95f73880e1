"""The scale bench's corpus: real text resampled by word frequency, and perturbed real embeddings.

Base: up to --base real passages from ../shared/data (SciFact abstracts with their titles, the Chroma
chunking study's documents and the NASA pages cut into 200-word passages), each embedded once with the
local model and cached in the bench's data directory (base.npz).

Synthetic chunk i is built from base passage b (every base in turn, shuffled):
- text: as many words as b (+-25%), each drawn with probability TOPICAL from b's own words (so b's term
  frequencies) and otherwise from the unigram distribution of all passages (so a Zipf tail of common
  words), keeping real term frequencies and document lengths rather than one paragraph repeated;
- vector: normalise(w * e_b + (1 - w) * e_n + noise), with e_n one of b's 10 nearest base passages,
  w ~ U(0.6, 1) and Gaussian noise 0.03 per dimension: a continuum between related passages rather than
  tight clusters of near-copies (which make every top-10 an arbitrary pick among ties).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common import DATA

WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*|\d+")
TOPICAL = 0.6
NOISE = 0.03
PASSAGE_WORDS = 200


def passages(limit: int, data: Path = DATA) -> list[str]:
    """Real passages from the shared corpora: SciFact abstracts first, then the long documents in pieces."""
    out = []
    for line in (data / "scifact-dev" / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            doc = json.loads(line)
            out.append(f"{doc['title']}. {doc['text']}".strip())
    long_texts = [
        json.loads(line)["text"]
        for line in (data / "chroma_chunking" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    long_texts += [
        p.read_text(encoding="utf-8", errors="replace") for p in sorted((data / "pdf_sample").rglob("*.txt"))
    ]
    for text in long_texts:
        words = text.split()
        out += [" ".join(words[i : i + PASSAGE_WORDS]) for i in range(0, len(words), PASSAGE_WORDS)]
    rng = np.random.default_rng(7)
    picked = rng.permutation(len(out))[:limit]
    return [out[i] for i in sorted(picked)]


def base_set(cache: Path, limit: int) -> tuple[list[str], np.ndarray]:
    """The base passages and their local-model embeddings, embedded once and cached."""
    if cache.exists():
        z = np.load(cache, allow_pickle=False)
        if len(z["texts"]) >= limit:
            return [str(t) for t in z["texts"][:limit]], z["vectors"][:limit]
    import multiprocessing

    texts = passages(limit)
    # Two processes of one thread each: onnxruntime's threads spin when a busy machine preempts them.
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        vectors = np.concatenate(pool.map(_embed, [texts[i : i + 32] for i in range(0, len(texts), 32)]))
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, texts=np.array(texts), vectors=vectors.astype(np.float32))
    return texts, vectors.astype(np.float32)


def _embed(texts: list[str]) -> np.ndarray:
    from ragvps.config import Settings
    from ragvps.embed import embed_documents
    from ragvps.embed.registry import make_embedder

    global _EMBEDDER
    if _EMBEDDER is None:
        _EMBEDDER = make_embedder(Settings.of(embedder="local", threads=1))
    print(f"embedding {len(texts)} base passages", file=sys.stderr, flush=True)
    return embed_documents(_EMBEDDER, texts)


_EMBEDDER = None


@dataclass
class Generator:
    texts: list[str]
    vectors: np.ndarray
    seed: int = 0

    def __post_init__(self) -> None:
        self.words = [WORD.findall(t) for t in self.texts]
        counts = Counter(w.lower() for ws in self.words for w in ws)
        self.vocab = np.array(list(counts), dtype=object)
        own = [ws or ["empty"] for ws in self.words]
        self.lengths = np.array([len(ws) for ws in own])
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]])
        self.all_words = np.array([w for ws in own for w in ws], dtype=object)
        freq = np.array([counts[w] for w in self.vocab], dtype=np.float64)
        self.cdf = np.cumsum(freq / freq.sum())
        sims = self.vectors @ self.vectors.T
        np.fill_diagonal(sims, -1)
        self.neighbours = np.argsort(-sims, axis=1)[:, :10]
        self.order = np.random.default_rng(self.seed).permutation(len(self.texts))

    def bases(self, lo: int, n: int) -> np.ndarray:
        return self.order[np.arange(lo, lo + n) % len(self.order)]

    def texts_at(self, lo: int, n: int) -> list[str]:
        """The texts of rows [lo, lo + n): the same for the same rows, whoever generates them."""
        rng = np.random.default_rng((self.seed, lo, 0))
        bases = self.bases(lo, n)
        lengths = np.maximum(5, (self.lengths[bases] * rng.uniform(0.75, 1.25, n)).astype(int))
        total = int(lengths.sum())
        words = self.vocab[np.searchsorted(self.cdf, rng.random(total))]  # the Zipf tail of all passages
        owner = np.repeat(bases, lengths)
        topical = rng.random(total) < TOPICAL  # else one of the base passage's own words, as often as it has it
        pick = self.offsets[owner] + (rng.random(total) * self.lengths[owner]).astype(int)
        words[topical] = self.all_words[pick[topical]]
        ends = np.cumsum(lengths)
        return [" ".join(words[s:e].tolist()) for s, e in zip(ends - lengths, ends, strict=True)]

    def vectors_at(self, lo: int, n: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, lo, 1))
        bases = self.bases(lo, n)
        nb = self.neighbours[bases, rng.integers(10, size=n)]
        w = rng.uniform(0.6, 1.0, size=(n, 1)).astype(np.float32)
        vecs = w * self.vectors[bases] + (1 - w) * self.vectors[nb]
        vecs += rng.normal(scale=NOISE, size=vecs.shape).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs.astype(np.float32)

    def batches(self, lo: int, hi: int, batch: int) -> Iterator[tuple[int, list[str], np.ndarray]]:
        """(first row, texts, vectors) for rows [lo, hi), `batch` rows at a time (batch-aligned)."""
        for start in range(lo, hi, batch):
            n = min(batch, hi - start)
            yield start, self.texts_at(start, n), self.vectors_at(start, n)
