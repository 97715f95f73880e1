"""A background thread for the length of a `with` block: the lease heartbeats of the embedding worker and of
upload jobs. The subclass's `_run` waits on `done` (set when the block ends) between its rounds."""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    def __init__(self, every: float, name: str):
        self.every = every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    def _run(self) -> None:
        raise NotImplementedError
