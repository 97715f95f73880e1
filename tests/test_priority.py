"""A lowered client's database backends are lowered with it (db/priority.py): the worker under the server, or
`nice -n 19 ragvps reindex`, must not store and index at PostgreSQL's normal priority beside the searches."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import waiting

# Connect as the product does, once alone and once through a server's pool, and report both backends' priority.
PROBE = """
import json, os, sys
from ragvps.config import Settings
from ragvps.db.connections import PooledConnections
from ragvps.db.database import connect
from ragvps.db.priority import on_this_host, of

settings = Settings.of(database_url=sys.argv[1], pool_size=2)
if sys.argv[2] == "nice":  # lowered after the imports: at a load of 16 an idle-class start-up hardly gets a core
    os.nice(7)
elif sys.argv[2] == "idle":
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
single = connect(settings)
pool = PooledConnections(settings)
with pool.connection() as conn:
    pooled = conn.info.backend_pid
try:
    local = on_this_host(single, single.info.backend_pid)
except OSError:  # its process id names no process here
    local = False
found = {name: of(pid) if local else None for name, pid in (("single", single.info.backend_pid), ("pooled", pooled))}
print(json.dumps({name: p and [p.policy, p.nice] for name, p in found.items()}))
pool.close()
single.close()
"""


def probe(db_url: str, lowering: str = "") -> dict[str, list[int] | None]:
    """The priorities of a client's backends, the client lowered (`nice` or `idle`) before it connects."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, db_url, lowering],
        capture_output=True,
        text=True,
        timeout=waiting.seconds(60),
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling classes")
def test_backends_follow_a_lowered_client(db_url: str) -> None:
    from ragvps.db.priority import of

    me = of()
    if me is None or me.lowered:  # under nice itself: its probes would all be lowered
        pytest.skip("the tests run below normal priority")
    normal = probe(db_url)
    if normal["single"] is None:  # a server in a container: its process ids are not this host's
        pytest.skip("the test database's backends are not processes on this host")
    nice = probe(db_url, "nice")
    idle = probe(db_url, "idle")
    for name in ("single", "pooled"):
        assert normal[name] == [os.SCHED_OTHER, 0]
        assert nice[name] == [os.SCHED_OTHER, 7]
        assert idle[name] == [os.SCHED_IDLE, 0]
