"""Blocking work off the event loop. The App is synchronous: each request's work runs on a thread of the
server's own set, and at most SLOTS of them run at once, streamed answers included (a stream's thread holds
its slot until it ends). `in_thread` returns the work's result; `thread_events` yields what a streamed answer
emits.

The threads are daemons rather than anyio's workers: work abandoned at request_timeout (an LLM that stalls)
neither holds the answer nor keeps the process alive once the server has stopped (a SIGTERM took as long as
the stalled call). It still holds its slot until it ends. A thread waits for the next request's work when
done: starting one per request cost the event loop a thread handshake each time (about 1 ms of a busy
2-core server's loop, measured with py-spy). Each piece of work runs in a copy of the request's context (its
request record, serve/gate/request_log.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import queue
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ragvps.errors import UnavailableError

log = logging.getLogger(__name__)
T = TypeVar("T")
E = TypeVar("E")

SLOTS = 40  # blocking calls running at once (anyio's default thread limit, which this replaces)
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


class _Workers:
    """Daemon threads that take work from one queue, started only when none is idle: with work handed over
    only under a slot, there are never more than the slots taken, over every loop of the process."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], None], str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def start(self, fn: Callable[[], None], name: str) -> None:
        """Run `fn` on a waiting thread (named `name` while it runs), or on a new one when none waits."""
        self._work.put((fn, name))
        with self._lock:
            if self._idle:
                self._idle -= 1
                return
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            fn, me.name = self._work.get()
            try:
                fn()
            except BaseException:  # the work reports its own failures: this is a defect, and the thread lives on
                log.exception("unexpected failure in %s", me.name)
            me.name = "ragvps-idle"
            with self._lock:
                self._idle += 1


_workers = _Workers()


def _start(run: Callable[[], None], name: str) -> None:
    """`run` on one of the server's threads, in a copy of the caller's context."""
    context = contextvars.copy_context()
    _workers.start(lambda: context.run(run), name)


def slots() -> asyncio.Semaphore:
    """The running loop's slots (one set per loop: a test's in-process server has a loop of its own)."""
    return _slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(SLOTS))


def _too_slow(timeout: float) -> UnavailableError:
    return UnavailableError(
        f"the request took longer than {timeout:g} s (setting request_timeout): try a "
        "smaller k, or raise request_timeout",
        settings=("request_timeout",),
    )


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
            _start(run, "ragvps-request")
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


async def thread_events(work: Callable[[Emit[E]], T], timeout: float, name: str) -> AsyncGenerator[Event[E, T], None]:
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
        _start(run, name)
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
