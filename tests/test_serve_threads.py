"""The server's thread limit holds for streamed answers too: a stream takes a slot for as long as its thread
runs, so the next request waits for one instead of starting a thread of its own."""

from __future__ import annotations

import asyncio
import threading

import pytest

from ragvps.errors import UnavailableError
from ragvps.serve.shared import threads
from ragvps.serve.shared.threads import Emit, Emitted, Finished, TimedOut, in_thread, thread_events


def running(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == name)


async def _streams_hold_the_slots(release: threading.Event) -> None:
    def work(emit: Emit[str]) -> str:
        emit("first")
        release.wait(10)
        return "done"

    streams = [thread_events(work, 10, "test-stream") for _ in range(threads.SLOTS)]
    firsts = [await anext(s) for s in streams]  # each stream has started and emitted
    assert all(isinstance(f, Emitted) and f.value == "first" for f in firsts)
    assert running("test-stream") == threads.SLOTS
    started = threading.Event()
    waiting = asyncio.ensure_future(in_thread(started.set, 10))
    await asyncio.sleep(0.3)
    assert not started.is_set() and not waiting.done()  # no slot: the request waits, no thread is started
    assert running("ragvps-request") == 0
    with pytest.raises(UnavailableError, match="request_timeout"):  # waiting for a slot counts in the timeout
        await in_thread(lambda: None, 0.2)
    late = [e async for e in thread_events(lambda emit: "never", 0.2, "test-late")]
    assert len(late) == 1 and isinstance(late[0], TimedOut) and running("test-late") == 0
    release.set()
    ends = [[e async for e in s] for s in streams]
    assert all(isinstance(e[-1], Finished) and e[-1].value == "done" for e in ends)
    await asyncio.wait_for(waiting, 5)  # a stream's end gave its slot to the waiting request
    assert started.is_set()


def test_streams_take_slots_and_the_next_request_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "SLOTS", 3)
    release = threading.Event()
    try:
        asyncio.run(_streams_hold_the_slots(release))
    finally:
        release.set()
