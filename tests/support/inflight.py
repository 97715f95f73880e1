"""Searches kept running while a test switches what they read (vector types, models), as a server's would."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ragvps.app import App, SearchRequest
from ragvps.config import Settings


@dataclass
class InFlight:
    failures: list[str] = field(default_factory=list)
    answered: int = 0


@contextmanager
def queries_in_flight(settings: Settings, questions: Sequence[str], readers: int = 2) -> Iterator[InFlight]:
    """While the block runs, `readers` threads (each its own App, with its own connection and embedder, as a
    server would be) search `questions` over and over; every error and every top hit other than the one
    before the block is a failure. Ingest before entering; assert on the result after the block."""
    with App.open(settings) as app:
        expected = {q: [h.chunk_id for h in app.search(SearchRequest(q, k=3)).hits] for q in questions}
    flight, stop = InFlight(), threading.Event()

    def ask() -> None:
        with App.open(settings) as reader:
            while not stop.is_set():
                for q in questions:
                    try:
                        hits = reader.search(SearchRequest(q, k=3)).hits
                    except Exception as exc:  # every failure is counted, whatever its kind
                        flight.failures.append(repr(exc))
                        continue
                    flight.answered += 1
                    if [h.chunk_id for h in hits][:1] != expected[q][:1]:
                        flight.failures.append(f"{q!r}: top hit {hits[0].chunk_id if hits else None}")

    threads = [threading.Thread(target=ask) for _ in range(readers)]
    for t in threads:
        t.start()
    try:
        yield flight
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
