"""What the server's modules share: the App once it is open (`Ready`), running blocking work off the event
loop (`in_thread`, and `thread_events` for an answer streamed from its callbacks), turning any exception into
the `{error, kind}` body, the page. A leaf: it imports no sibling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

from ragvps.config import Settings
from ragvps.errors import HTTP_STATUS, ConfigError, RagvpsError, UnavailableError, UsageError, redact

if TYPE_CHECKING:
    from ragvps.app import App

log = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_OPEN_S = 5.0


class Ready:
    """The App once it is open (or the reason it is not yet), shared by the HTTP routes and the MCP tools."""

    def __init__(self, settings: Settings, app: App | None = None,
                 on_fatal: Callable[[RagvpsError], None] | None = None):
        self.settings = settings
        self.app = app
        self.on_fatal = on_fatal
        self.error = "starting: loading the model and connecting to the database"
        self._stack = contextlib.ExitStack()
        self._stop = threading.Event()

    def get(self) -> App:
        if self.app is None:
            raise UnavailableError(f"the server is not ready yet ({self.error}); retry in a few seconds")
        return self.app

    def open_forever(self) -> None:
        """Open the App (pool, embedder, a warm-up query), retrying until it works or the server stops."""
        from ragvps.app import App

        while not self._stop.is_set():
            stack = contextlib.ExitStack()
            try:
                app = stack.enter_context(App.open(self.settings, pooled=True))
                app.embed_query("warm up the model")
            except (ConfigError, UsageError) as exc:  # a wrong setting does not heal by waiting: stop
                stack.close()
                self.error = redact(str(exc))
                log.error("cannot start: %s", self.error)
                if self.on_fatal is not None:
                    self.on_fatal(exc)
                return
            except Exception as exc:  # any other failure to start is reported by /health and retried
                stack.close()
                self.error = redact(str(exc) if isinstance(exc, RagvpsError) else f"{exc.__class__.__name__}: {exc}")
                log.warning("not ready, retrying in %.0f s: %s", RETRY_OPEN_S, self.error)
                self._stop.wait(RETRY_OPEN_S)
                continue
            self._stack.enter_context(stack)
            self.app = app
            log.info("ready: model %s", self.settings.embed.model_name)
            return

    def close(self) -> None:
        self._stop.set()
        self._stack.close()


def for_serving(settings: Settings) -> Settings:
    """A server embeds one short query per request, several requests at once: one onnxruntime thread each
    (unless the setting threads says otherwise). Its spinning pool threads would otherwise take the CPU
    PostgreSQL needs for the same requests (bench/RESULTS.md: 3x slower searches on a 2-core machine)."""
    return settings.replace(threads=1) if settings.embed.threads == 0 else settings


SLOTS = 40  # blocking calls running at once (anyio's default thread limit, which this replaces)
_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


async def in_thread(fn: Callable[[], T], timeout: float) -> T:
    """Run blocking work (the app is synchronous) off the event loop, within the request timeout.

    The thread is a daemon of its own: work abandoned at the timeout (an LLM that stalls) neither holds a
    slot's place in the answer nor keeps the process alive once the server has stopped (anyio's worker
    threads did: a SIGTERM took as long as the stalled call). It still holds its slot until it ends, so at
    most SLOTS calls run at once."""
    loop = asyncio.get_running_loop()
    slots = _slots.setdefault(loop, asyncio.Semaphore(SLOTS))
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, exc: BaseException | None) -> None:
        slots.release()
        if done.done():  # cancelled: the client left, or the timeout passed
            return
        if exc is not None:
            done.set_exception(exc)
        else:
            done.set_result(result)

    def run() -> None:
        result, error = None, None
        try:
            result = fn()
        except BaseException as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this answer any more
            loop.call_soon_threadsafe(settle, result, error)

    try:
        async with asyncio.timeout(timeout):
            await slots.acquire()
            threading.Thread(target=run, name="ragvps-request", daemon=True).start()
            return await done
    except TimeoutError:
        raise UnavailableError(f"the request took longer than {timeout:g} s (setting request_timeout): try a "
                               "smaller k, or raise request_timeout", settings=("request_timeout",)) from None


def guarded(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """A route whose unexpected errors become RagvpsErrors (kind failed/unavailable), answered as JSON by the
    RagvpsError handler; Starlette's catch-all 500 handler would re-raise them and drop the connection."""
    import functools

    from starlette.exceptions import HTTPException

    @functools.wraps(fn)
    async def route(*args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except (RagvpsError, HTTPException):
            raise
        except Exception as exc:
            _, body = error_body(exc)
            raise RagvpsError(body["error"], kind=body["kind"]) from None  # type: ignore[arg-type]

    return route


def error_body(exc: BaseException) -> tuple[int, dict[str, str]]:
    """The status and `{error, kind}` for any exception; unexpected ones are logged, never shown (driver
    errors became RagvpsErrors at the db/ boundary)."""
    if isinstance(exc, RagvpsError):
        return HTTP_STATUS[exc.kind], {"error": redact(str(exc)), "kind": exc.kind}
    log.error("unexpected error", exc_info=exc)
    return 500, {"error": "unexpected server error; the server log has the details", "kind": "failed"}


def page() -> str:
    return resources.files("ragvps.serve.web").joinpath("index.html").read_text(encoding="utf-8")


class ClientGone(Exception):  # raised into the app to cancel the answer, not an error
    """The HTTP client disconnected (or request_timeout passed): stop generating."""


TIMED_OUT = object()  # what thread_events yields when request_timeout passes first
Emit = Callable[[Any], None]


async def thread_events(work: Callable[[Emit], Any], on_error: Callable[[BaseException], Any], timeout: float,
                        name: str) -> AsyncIterator[Any]:
    """Run `work(emit)` in a thread of its own (the app is synchronous) and yield what it emits as it comes,
    then ("done", what it returned), or on_error(exc) when it raised, or TIMED_OUT when `timeout` passed
    first. Once the consumer stops (the client left, or the time ran out), the thread's next emit raises
    ClientGone, which ends the answer, and the upstream request with it, without an error."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    gone = threading.Event()
    end = object()

    def put(item: Any) -> None:
        # The server may have stopped while this answer was still being made: then nobody is waiting for it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def emit(item: Any) -> None:  # emit(None) only checks that the consumer is still there
        if gone.is_set():
            raise ClientGone
        if item is not None:
            put(item)

    def run() -> None:
        try:
            put(("done", work(emit)))
        except ClientGone:
            pass
        except BaseException as exc:  # reported to the client, in the caller's shape
            put(on_error(exc))
        finally:
            put(end)

    threading.Thread(target=run, name=name, daemon=True).start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                gone.set()
                yield TIMED_OUT
                return
            if item is end:
                return
            yield item
    finally:
        gone.set()
