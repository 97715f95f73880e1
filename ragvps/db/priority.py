"""A lowered client's database work lowered with it.

A worker under the server (SCHED_BATCH, nice 5) or a nightly `nice -n 19 ragvps reindex` does much of its CPU work in
PostgreSQL: the HNSW and GIN inserts of the chunks it stores, the index it builds. That work runs in the
connection's backend process, which would otherwise keep PostgreSQL's normal priority and take its share of the
cores from the searches beside it. So each connection's backend gets the client's scheduling class and nice
value when the client runs below normal priority.

Only for a backend on this host: its process id names a `postgres` process here that started when PostgreSQL
says the backend did. A server elsewhere, or in a container (another PID namespace, where the same number may
name another process here), is left as it is, and so is one of another user where this user may not lower it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger(__name__)
BELOW_NICE = 5  # a worker below the server: a third of a normal process's CPU share when the cores are contended
SAME_START_S = 2.0  # a backend's start by PostgreSQL's clock and by this host's /proc, at most this far apart


@dataclass(frozen=True)
class Priority:
    """A process's CPU priority: its scheduling policy (os.SCHED_*) and nice value."""

    policy: int
    nice: int

    @property
    def lowered(self) -> bool:
        idle = getattr(os, "SCHED_IDLE", None)
        return self.nice > 0 or (idle is not None and self.policy == idle)


def of(pid: int = 0) -> Priority | None:
    """A process's priority (this one's by default); None where the platform cannot tell."""
    try:
        return Priority(policy=os.sched_getscheduler(pid), nice=os.getpriority(os.PRIO_PROCESS, pid))
    except (AttributeError, OSError):
        return None


def below_server(pid: int = 0) -> str:
    """Put a process (this one by default) below the server, but never out of the CPU: SCHED_BATCH (Linux: no
    wake-up preference, so a search waking up runs first) at nice BELOW_NICE, a share small beside the server's and
    a search's yet never nothing. Not SCHED_IDLE: it runs only on CPU time nothing else wants, and a VPS that also
    runs Ollama, Open WebUI or a website is rarely idle, so an upload waited there for minutes (issue 51). What it
    got, for the log."""
    got = []
    try:
        os.sched_setscheduler(pid, os.SCHED_BATCH, os.sched_param(0))
        got.append("SCHED_BATCH")
    except (AttributeError, OSError):  # not Linux, or not allowed
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, max(BELOW_NICE, os.getpriority(os.PRIO_PROCESS, pid)))
        got.append(f"nice {os.getpriority(os.PRIO_PROCESS, pid)}")
    except OSError as exc:
        got.append(f"its nice value ({exc})")
    return ", ".join(got)


def follow_client(conn: psycopg.Connection) -> Priority | None:
    """Give the connection's backend this process's priority when this process runs lowered and the backend is
    a process on this host; the backend's priority then, or None when nothing was changed. Costs one round trip,
    and only for a lowered client."""
    mine = of()
    if mine is None or not mine.lowered:
        return None
    pid = conn.info.backend_pid
    try:
        if not on_this_host(conn, pid):
            return None
        if mine.policy != os.sched_getscheduler(pid):
            os.sched_setscheduler(pid, mine.policy, os.sched_param(0))
        if mine.nice > os.getpriority(os.PRIO_PROCESS, pid):
            os.setpriority(os.PRIO_PROCESS, pid, mine.nice)  # raising a nice value needs no privilege
    except OSError as exc:  # no /proc, the backend gone, or not allowed: its work runs at its priority
        log.debug("could not lower database backend %d: %s", pid, exc)
        return None
    return of(pid)


def on_this_host(conn: psycopg.Connection, pid: int) -> bool:
    """Whether the backend's process id names it on this host: a `postgres` process that started when the
    database says the backend started (reads /proc; OSError where there is none)."""
    if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
        return False
    row = conn.execute(
        "SELECT extract(epoch FROM backend_start)::float8 FROM pg_stat_activity WHERE pid = pg_backend_pid()"
    ).fetchone()
    conn.commit()
    if row is None or row[0] is None:
        return False
    ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22: starttime
    boot = next(
        int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
    )
    return abs(boot + ticks / os.sysconf("SC_CLK_TCK") - float(row[0])) <= SAME_START_S
