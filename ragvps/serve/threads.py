"""Blocking work off the event loop. The App is synchronous: each request's work runs on a daemon thread of
its own, and at most SLOTS of them run at once, streamed answers included (a stream's thread holds its slot
until it ends). `in_thread` returns the work's result; `thread_events` yields what a streamed answer emits.

The threads are daemons of their own rather than anyio's workers: work abandoned at request_timeout (an LLM
that stalls) neither holds the answer nor keeps the process alive once the server has stopped (a SIGTERM
took as long as the stalled call). It still holds its slot until it ends. Each runs in a copy of the
request's context (its request record, serve/request_log.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ragvps.errors import UnavailableError

T = TypeVar("T")
E = TypeVar("E")

SLOTS = 40  # blocking calls running at once (anyio's default thread limit, which this replaces)
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def slots() -> asyncio.Semaphore:
    """The running loop's slots (one set per loop: a test's in-process server has a loop of its own)."""
    return _slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(SLOTS))


def _too_slow(timeout: float) -> UnavailableError:
    return UnavailableError(f"the request took longer than {timeout:g} s (setting request_timeout): try a "
                            "smaller k, or raise request_timeout", settings=("request_timeout",))


async def in_thread(fn: Callable[[], T], timeout: float) -> T:
    """Run blocking work off the event loop, within the request timeout (waiting for a slot included)."""
    loop = asyncio.get_running_loop()
    free = slots()
    done: asyncio.Future[T] = loop.create_future()

    def settle(outcome: T | BaseException) -> None:
        free.release()
        if done.done():  # cancelled: the client left, or the timeout passed
            return
        if isinstance(outcome, BaseException):
            done.set_exception(outcome)
        else:
            done.set_result(outcome)

    def run() -> None:
        outcome: T | BaseException
        try:
            outcome = fn()
        except BaseException as exc:
            outcome = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this answer any more
            loop.call_soon_threadsafe(settle, outcome)

    try:
        async with asyncio.timeout(timeout):
            await free.acquire()
            threading.Thread(target=contextvars.copy_context().run, args=(run,), name="ragvps-request",
                             daemon=True).start()
            return await done
    except TimeoutError:
        raise _too_slow(timeout) from None


class ClientGone(Exception):  # raised into the app to cancel the answer, not an error
    """The HTTP client disconnected (or request_timeout passed): stop generating."""


@dataclass(frozen=True)
class Emitted(Generic[E]):
    """Something the work emitted while it ran."""

    value: E


@dataclass(frozen=True)
class Finished(Generic[T]):
    """What the work returned."""

    value: T


@dataclass(frozen=True)
class Failed:
    """The work raised."""

    error: BaseException


@dataclass(frozen=True)
class TimedOut:
    """request_timeout passed first (waiting for a slot included)."""

    timeout: float


Event = Emitted[E] | Finished[T] | Failed | TimedOut


class Emit(Generic[E]):
    """What the work calls with each thing it streams; `check()` only asks whether the client is still there.
    Once the consumer stops, the next call raises ClientGone, which ends the answer (and the upstream request
    with it) without an error."""

    def __init__(self, put: Callable[[Emitted[E]], None], gone: threading.Event):
        self._put, self._gone = put, gone

    def __call__(self, value: E) -> None:
        self.check()
        self._put(Emitted(value))

    def check(self) -> None:
        if self._gone.is_set():
            raise ClientGone


async def thread_events(work: Callable[[Emit[E]], T], timeout: float,
                        name: str) -> AsyncGenerator[Event[E, T], None]:
    """Run `work(emit)` on a thread of its own, once a slot is free, and yield what it emits as it comes, then
    Finished (what it returned), or Failed when it raised, or TimedOut when `timeout` passed first."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event[E, T] | None] = asyncio.Queue()  # None: the thread has ended
    gone = threading.Event()
    free = slots()
    deadline = time.monotonic() + timeout

    def put(item: Event[E, T] | None) -> None:
        # The server may have stopped while this answer was still being made: then nobody is waiting for it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        try:
            put(Finished(work(Emit(put, gone))))
        except ClientGone:
            pass
        except BaseException as exc:  # reported to the client, in the caller's shape
            put(Failed(exc))
        finally:
            put(None)
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(free.release)

    try:
        async with asyncio.timeout(timeout):
            await free.acquire()
    except TimeoutError:
        yield TimedOut(timeout)
        return
    try:
        threading.Thread(target=contextvars.copy_context().run, args=(run,), name=name, daemon=True).start()
    except BaseException:
        free.release()
        raise
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                gone.set()
                yield TimedOut(timeout)
                return
            if item is None:
                return
            yield item
    finally:
        gone.set()
