"""The replicas' arithmetic without a database: names that never carry a password, WAL positions, and a lag that an
idle primary does not inflate (tests/test_replicas.py has the real primary and standby)."""

from __future__ import annotations

import time

from ragvps.config import Settings
from ragvps.db.replicas import Watcher, lsn_int, lsn_text, target_name


def test_a_replica_is_named_by_host_and_port_only():
    assert target_name("postgresql://ragvps:secret@db2.internal:5433/ragvps", "r1") == "db2.internal:5433"
    assert target_name("postgresql://postgres@/ragvps?host=/tmp/sock&port=5433", "r1") == "/tmp/sock:5433"
    assert target_name("host=db3 port=6432 user=u password=secret dbname=x", "r1") == "db3:6432"
    assert target_name("postgresql:///ragvps", "r1") == "r1"


def test_wal_positions_compare_as_numbers():
    assert lsn_int("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert lsn_text(lsn_int("0/3000060")) == "0/3000060"
    assert lsn_int("1/0") > lsn_int("0/FFFFFFFF") and lsn_int(None) == 0


def test_lag_is_how_long_the_primary_has_held_what_the_replica_has_not_replayed():
    settings = Settings.of(database_url="postgresql://p/x", database_replica_urls="postgresql://r/x")
    watcher = Watcher(settings, lambda: None)
    now = time.monotonic()
    watcher._samples.extend([(now - 5.0, 100), (now - 2.0, 200), (now - 1.0, 300)])
    assert watcher.behind_since(300) is None  # replayed all the primary wrote: 0 s behind, however old its replay
    assert watcher.behind_since(250) == now - 1.0
    assert watcher.behind_since(150) == now - 2.0
    assert watcher.behind_since(0) == now - 5.0
