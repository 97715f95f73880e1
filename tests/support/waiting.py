"""The one way a test waits: on the condition it needs, until one generous deadline that a slow machine stretches.

A test never asserts that something happened within a time; it waits for it to happen, and gives up only at
`deadline(...)`, whose seconds are multiplied by `RAGVPS_TEST_TIME_SCALE` (default 1; a machine at a load of 16 on
two cores runs the suite with 3 or more). The bases are generous already: what they bound is a hang, not speed.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 120.0  # the deadline of a wait that names none: long enough for a loaded machine, short of a hang
POLL_S = 0.05


def scale() -> float:
    """RAGVPS_TEST_TIME_SCALE, at least 1."""
    try:
        return max(1.0, float(os.environ.get("RAGVPS_TEST_TIME_SCALE", "1")))
    except ValueError:
        raise SystemExit("RAGVPS_TEST_TIME_SCALE must be a number, such as 3") from None


def seconds(base: float = WAIT_S) -> float:
    """A time limit for the machine this runs on: `base` stretched by RAGVPS_TEST_TIME_SCALE."""
    return base * scale()


def deadline(base: float = WAIT_S) -> float:
    """time.monotonic() at which a wait of `base` seconds (stretched) gives up."""
    return time.monotonic() + seconds(base)


def wait_until(check: Callable[[], T | None], what: str, base: float = WAIT_S, poll: float = POLL_S) -> T:
    """check() once it is true (not None, not False); AssertionError naming `what` at the deadline."""
    end = deadline(base)
    while True:
        got = check()
        if got is not None and got is not False:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting after {seconds(base):.0f} s: {what}")
        time.sleep(poll)


def stopped(proc: subprocess.Popen[bytes], grace: float) -> None:
    """End a server the test started: asked to stop (SIGTERM), killed if it has not within `grace` (stretched)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(seconds(grace))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
