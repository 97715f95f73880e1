"""The MiniLM model's vectors (embedder `local`), shared by the xdist workers of one test run.

Every worker ingests the user guide early (the served database, the corpus of most integration tests), at the
default chunk size and at nomic's through the fake Ollama: about 6 s of one core each time, in every worker. The
model's own memo (ragvps/embed/local.py) saves repeats within a process only. Here a worker's model runs go
through one file in the run's temporary directory: before running the model, a worker takes the file's lock and
reads the vectors the other workers appended since it last looked; it runs the model only on texts none of them
embedded, and appends those. The guide is then embedded once a run, not once a worker.

Nothing a test checks changes: the memo sits below the pipeline's own counts (what ingest reports as embedded, the
on-disk vector cache, the fake Ollama's recorded inputs), and a vector read back is the one the same model gave
the same text in another process. Only this test run's workers share the file; runs never do.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

KEY_BYTES = 16  # ragvps.embed.memo.text_key: blake2b, 16 bytes


class SharedVectors:
    """An append-only file of (text key, vector) records and what this process has read of it."""

    def __init__(self, path: Path, dims: int):
        self.path, self.lock = path, path.with_suffix(".lock")
        self.record = KEY_BYTES + 4 * dims
        self.dims = dims
        self.known: dict[bytes, np.ndarray] = {}
        self.offset = 0

    def run(
        self, texts: Sequence[str], key: Callable[[str], bytes], model: Callable[[Sequence[str]], np.ndarray]
    ) -> np.ndarray:
        keys = [key(t) for t in texts]
        with self.lock.open("a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)  # one worker at a time reads, runs the model and appends
            self._read_new()
            missing = [i for i, k in enumerate(keys) if k not in self.known]
            if missing:
                fresh = np.asarray(model([texts[i] for i in missing]), dtype=np.float32)
                self._append([keys[i] for i in missing], fresh)
        return np.stack([self.known[k] for k in keys]) if keys else np.zeros((0, self.dims), np.float32)

    def _read_new(self) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = len(data) - len(data) % self.record  # a record is appended whole under the lock; be safe anyway
        for at in range(0, whole, self.record):
            row = data[at : at + self.record]
            self.known[row[:KEY_BYTES]] = np.frombuffer(row[KEY_BYTES:], dtype=np.float32)
        self.offset += whole

    def _append(self, keys: Sequence[bytes], vectors: np.ndarray) -> None:
        with self.path.open("ab") as f:
            f.write(b"".join(k + v.tobytes() for k, v in zip(keys, vectors, strict=True)))
        self.offset = self.path.stat().st_size
        self.known.update(zip(keys, vectors.copy(), strict=True))


@pytest.fixture(scope="session", autouse=True)
def shared_model_vectors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """In an xdist worker, the local model runs through the run's shared vectors (this module's docstring)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process (or no xdist at all): nothing to share
        yield
        return
    from ragvps.backends import LOCAL_MODEL
    from ragvps.embed import local, memo
    from ragvps.embed.models import model_spec

    run_dir = tmp_path_factory.getbasetemp().parent  # the run's base directory; each worker's is inside it
    spec = model_spec(LOCAL_MODEL)
    assert spec is not None
    shared = SharedVectors(run_dir / "local-model-vectors.bin", spec.dims)
    real = local.LocalEmbedder._run

    def run(self: local.LocalEmbedder, texts: Sequence[str]) -> np.ndarray:
        return shared.run(
            texts,
            lambda t: memo.text_key(t, "" if self.graph == local.DOCUMENTS else self.graph),
            lambda batch: real(self, batch),
        )

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local.LocalEmbedder, "_run", run)
        yield
