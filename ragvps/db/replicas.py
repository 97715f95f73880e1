"""Read replicas (issue 54): hot standbys a server reads searches and answers from, each watched by a thread of its
own, and the primary watched the same way.

A replica is read from while it answers and is at most `replica_max_lag` seconds behind. Its lag is how long the
primary has held WAL the replica has not replayed: measured against the primary's `pg_current_wal_lsn()` sampled by
the watcher and, with the primary away, against the replica's own `pg_last_wal_receive_lsn()` and
`pg_last_xact_replay_timestamp()`. Replay timestamp alone would call a replica of an idle primary late: it is the
time of the last transaction replayed, old whenever nothing was written.

Reads of a knowledge base see the writes a client saw complete: each primary checkout notes the WAL position after
its commit for its schema (`note`), and a read of that schema waits up to `replica_wait` for a replica to have
replayed it (`pg_last_wal_replay_lsn()`), else reads from the primary.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

import psycopg

from ragvps.config import Settings
from ragvps.errors import redact

log = logging.getLogger(__name__)

WATCH_S = 0.2  # how often each replica and the primary are checked
CHECK_CONNECT_S = 2  # the watcher's connect timeout
CHECK_STATEMENT_MS = 2000
PRIMARY_MISSES = 2  # checks of the primary failed in a row before it is taken for away (writes refused)
REPLAY_POLL_S = 0.005  # a read waiting for its own write polls the replica this often
SAMPLES_S = 600.0  # primary WAL positions kept, to date a replica's lag

State = Literal["ok", "lagging", "down"]


def lsn_int(text: str | None) -> int:
    """A pg_lsn ('16/B374D848') as a number; 0 for none."""
    if not text:
        return 0
    hi, _, lo = str(text).partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def target_name(url: str, fallback: str) -> str:
    """A replica's name for /metrics and stats: host:port from its URL (never a user or a password)."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        host = parts.hostname or (query.get("host") or [""])[0]
        port = parts.port or (query.get("port") or ["5432"])[0]
    except ValueError:
        return fallback
    if not host and "=" in url:  # key=value form
        fields = dict(p.split("=", 1) for p in url.split() if "=" in p)
        host, port = fields.get("host", ""), fields.get("port", "5432")
    return f"{host}:{port}" if host else fallback


@dataclass(frozen=True)
class ReplicaStatus:
    """One replica as last checked: ok, lagging or down; its lag in seconds (None when down), why it is not ok."""

    name: str
    state: State
    lag_s: float | None
    problem: str | None = None


class Watched:
    """A server the watcher checks (the primary or a replica): its own connection with short timeouts."""

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name
        self._conn: psycopg.Connection | None = None
        self._using = threading.Lock()  # its watcher thread, and a read that found its pool empty

    def query(self, sql: str) -> tuple[object, ...]:
        with self._using:
            return self._query(sql)

    def _query(self, sql: str) -> tuple[object, ...]:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.url,
                connect_timeout=CHECK_CONNECT_S,
                autocommit=True,
                options=f"-c statement_timeout={CHECK_STATEMENT_MS}",
            )
        try:
            row = self._conn.execute(sql).fetchone()
        except psycopg.Error:
            self.close()
            raise
        assert row is not None
        return tuple(row)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def problem_of(exc: BaseException) -> str:
    lines = redact(str(exc)).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class Replica(Watched):
    def __init__(self, url: str, name: str):
        super().__init__(url, name)
        self.state: State = "down"
        self.lag_s: float | None = None
        self.replayed = 0  # the WAL position replayed at the last check
        self.problem: str | None = "not checked yet"
        self.failed_at = 0.0

    def status(self) -> ReplicaStatus:
        return ReplicaStatus(self.name, self.state, None if self.lag_s is None else round(self.lag_s, 3), self.problem)


class Watcher:
    """The primary and the replicas, each checked every WATCH_S by a thread of its own; their last states."""

    def __init__(self, settings: Settings, on_primary_back: Callable[[], None]):
        self.settings = settings
        self.primary = Watched(settings.database.url, target_name(settings.database.url, "primary"))
        self.replicas = [
            Replica(url, target_name(url, f"replica{i}")) for i, url in enumerate(settings.database.replica_urls, 1)
        ]
        self.primary_problem: str | None = None
        self.primary_lsn = 0
        self._misses = 0  # the primary's checks failed in a row
        self._samples: deque[tuple[float, int]] = deque()  # (when, the primary's WAL position then)
        self._on_back = on_primary_back
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.check_primary()
        for replica in self.replicas:
            self.check(replica)
        loops: list[Callable[[], None]] = [self.check_primary, *(lambda r=r: self.check(r) for r in self.replicas)]
        for n, loop in enumerate(loops):
            thread = threading.Thread(target=self._every, args=(loop,), name=f"ragvps-watch-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _every(self, check: Callable[[], None]) -> None:
        while not self._stop.wait(WATCH_S):
            try:
                check()
            except Exception:  # a watcher never dies: the next round checks again
                log.exception("checking a database server failed")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=CHECK_CONNECT_S + 1)
        self.primary_problem = None  # no longer watched: the pool's own errors say what is wrong from now on
        self.primary.close()
        for replica in self.replicas:
            replica.close()

    def check_primary(self) -> None:
        try:
            lsn = lsn_int(str(self.primary.query("SELECT pg_current_wal_lsn()")[0]))
        except psycopg.Error as exc:
            self._misses += 1
            if self._misses < PRIMARY_MISSES:  # one slow answer on a busy machine is not an outage
                return
            if self.primary_problem is None:
                log.warning("the primary database at %s cannot be reached: reads go to the replicas", self.primary.name)
            self.primary_problem = problem_of(exc)
            return
        self._misses = 0
        back = self.primary_problem is not None
        now = time.monotonic()
        with self._lock:
            self.primary_lsn = lsn
            if not self._samples or self._samples[-1][1] != lsn:
                self._samples.append((now, lsn))
            while len(self._samples) > 1 and self._samples[1][0] < now - SAMPLES_S:
                self._samples.popleft()
        self.primary_problem = None
        if back:
            log.warning("the primary database at %s is back", self.primary.name)
            self._on_back()

    def behind_since(self, replayed: int) -> float | None:
        """When the primary first held WAL past `replayed` (as sampled), or None when it held none."""
        with self._lock:
            for at, lsn in self._samples:
                if lsn > replayed:
                    return at
        return None

    def check(self, replica: Replica) -> None:
        sql = (
            "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text,"
            " COALESCE(EXTRACT(epoch FROM now() - pg_last_xact_replay_timestamp()), 0)::float8"
        )
        try:
            recovering, received, replayed, since_replay = replica.query(sql)
        except psycopg.Error as exc:
            self._down(replica, problem_of(exc))
            return
        if not recovering:
            self._down(replica, "it is not a standby (promoted?): it no longer follows the primary")
            return
        replica.replayed = lsn_int(str(replayed))
        lag = 0.0
        if self.primary_problem is None:
            since = self.behind_since(replica.replayed)
            lag = 0.0 if since is None else time.monotonic() - since
            if since is not None and len(self._samples) < 2:  # one sample (a one-off check): the replay's own age
                lag = max(lag, float(str(since_replay)))
        if lsn_int(str(received) if received else None) > replica.replayed:  # a backlog it has not replayed yet
            lag = max(lag, float(str(since_replay)))
        replica.lag_s, most = lag, self.settings.database.replica_max_lag
        if lag > most:
            replica.state, replica.problem = (
                "lagging",
                f"{lag:.1f} s behind the primary (setting replica_max_lag={most:g})",
            )
        else:
            replica.state, replica.problem = "ok", None

    def _down(self, replica: Replica, problem: str) -> None:
        if replica.state != "down":
            log.warning("replica %s is skipped: %s", replica.name, problem)
        replica.state, replica.lag_s, replica.problem = "down", None, problem

    def failed(self, replica: Replica, problem: str) -> None:
        """A read failed on `replica`: skipped until its next check succeeds."""
        self._down(replica, problem)

    def ready(self) -> list[Replica]:
        return [r for r in self.replicas if r.state == "ok"]


def check_once(settings: Settings) -> tuple[ReplicaStatus, ...]:
    """Each replica checked once against the primary, without watcher threads (`ragvps stats`)."""
    watcher = Watcher(settings, lambda: None)
    try:
        watcher.check_primary()
        for replica in watcher.replicas:
            watcher.check(replica)
        return tuple(r.status() for r in watcher.replicas)
    finally:
        watcher.stop()
