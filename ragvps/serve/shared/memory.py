"""Memory the server gives back. After a burst (64 answers at once, each embedding its sentences) glibc keeps the
freed heap of every thread's arena for reuse, so the server's RSS stays at the burst's peak; a thread here hands
the free pages back to the system (`malloc_trim`) every TRIM_EVERY_S. Nothing where the C library is not glibc."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)
TRIM_EVERY_S = 5.0


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None
    return trim


def give_back(stop: threading.Event, every: float = TRIM_EVERY_S) -> threading.Thread | None:
    """A daemon thread that trims the heap every `every` seconds until `stop` is set; None where it cannot."""
    trim = _malloc_trim()
    if trim is None:
        return None

    def run() -> None:
        while not stop.wait(every):
            trim(0)

    thread = threading.Thread(target=run, name="ragvps-give-back", daemon=True)
    thread.start()
    return thread
