"""The vectors a process embedded lately, by a hash of the exact text (and of the graph or model that made them).

A server embedding a question asked before, or an App opened again over the same documents, does not run the
model twice. The on-disk vector cache (ingest/artifacts.py) is what makes a rerun of ingest free; this memo only
saves repeats within one process. Shared by the in-process embedders (embed/local.py, embed/use.py, embed/e5.py);
`Remembered` is the whole of it for one whose questions run the same model as its documents.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ragvps.records import ModelSpec

MEMO_TEXTS = 8192  # vectors remembered per process: 12 MB at 384 dimensions, 16 MB at 512

_lock = threading.Lock()
_memo: OrderedDict[bytes, np.ndarray] = OrderedDict()


def text_key(text: str, salt: str = "") -> bytes:
    """The memo's key: a hash of the exact text, and of `salt` (a graph or model whose vectors differ)."""
    prefix = salt.encode() + b"\0" if salt else b""
    return hashlib.blake2b(prefix + text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def recall(keys: Sequence[bytes]) -> list[np.ndarray | None]:
    with _lock:
        found = [_memo.get(k) for k in keys]
        for k, v in zip(keys, found, strict=True):
            if v is not None:
                _memo.move_to_end(k)
    return found


def remember(keys: Sequence[bytes], vectors: np.ndarray) -> None:
    with _lock:
        for k, v in zip(keys, vectors, strict=True):
            _memo[k] = v.copy()
            _memo.move_to_end(k)
        while len(_memo) > MEMO_TEXTS:
            _memo.popitem(last=False)


def embed_remembered(keys: Sequence[bytes], texts: Sequence[str], dims: int, run) -> np.ndarray:  # type: ignore[no-untyped-def]
    """One vector a text: remembered ones from the memo, the others from `run(texts)` (then remembered)."""
    found = recall(keys)
    missing = [i for i, v in enumerate(found) if v is None]
    out = np.zeros((len(texts), dims), dtype=np.float32)
    for i, v in enumerate(found):
        if v is not None:
            out[i] = v
    if missing:
        fresh = run([texts[i] for i in missing])
        out[missing] = fresh
        remember([keys[i] for i in missing], fresh)
    return out


class Remembered:
    """An in-process embedder whose questions run the same model as its documents (the prefixes tell them apart):
    vectors by the memo, keyed by the model's name, and `_run` for the texts it has not seen lately."""

    spec: ModelSpec

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised vector a text; texts this process embedded lately come from the memo."""
        keys = [text_key(t, self.spec.name) for t in texts]
        return embed_remembered(keys, texts, self.spec.dims, self._run)

    def embed_questions(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def _run(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError
