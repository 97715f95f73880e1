"""Uploads that yield to searches but never starve (issue 51 part 6): the server's job workers run under
SCHED_BATCH at a nice value, not SCHED_IDLE (which gets no CPU while anything else wants some), so a one-line note
is stored while two other processes keep both cores busy; a queued job on a busy machine says it waits for CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.serve_server import KEY, ragvps_env
from test_documents_api import page, run_cli

from ragvps.app.documents import cpu_wait
from ragvps.db.priority import BELOW_NICE, below_server

linux_only = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="scheduling classes are Linux's")


@linux_only
def test_a_worker_is_lowered_to_a_class_that_still_runs():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        said = below_server(child.pid)
        assert os.sched_getscheduler(child.pid) == os.SCHED_BATCH  # not SCHED_IDLE, which starves on a busy box
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == BELOW_NICE > 0
        assert said == f"SCHED_BATCH, nice {BELOW_NICE}"
    finally:
        child.kill()
        child.wait()


def workers() -> list[int]:
    """This process's children that are `ragvps worker --jobs` (the in-process server's upload workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            argv = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
        if ppid == os.getpid() and b"worker" in argv and b"--jobs" in argv:
            found.append(int(stat.parent.name))
    return found


def upload(c: httpx.Client, name: str, text: bytes) -> dict[str, object]:
    posted = c.post("/kb/default/documents", files=[("files", (name, text, "text/markdown"))])
    assert posted.status_code == 202, posted.text
    job = posted.json()["job"]
    status: dict[str, object] = waiting.wait_until(
        lambda: (s := c.get(f"/jobs/{job}").json())["state"] not in ("queued", "running") and s,
        f"upload job {job} to end",
    )
    assert status["state"] == "done", status
    return status


@linux_only
def test_a_worker_starts_at_the_servers_priority_and_goes_below_it_before_its_second_job(
    module_db_url: str, tmp_path: Path
):
    """Its start (Python, the model) and a first small upload are not stretched four times on a busy machine;
    every job after that yields to searches."""
    env = ragvps_env(module_db_url, tmp_path / "data")
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY}, key=KEY).start()
    try:
        c = srv.client()
        upload(c, "first.md", b"# First\n\nThe heron feeder is refilled on Thursdays.\n")
        (pid,) = waiting.wait_until(workers, "the upload worker to be this process's child")
        assert os.getpriority(os.PRIO_PROCESS, pid) == os.getpriority(os.PRIO_PROCESS, 0)
        assert os.sched_getscheduler(pid) == os.sched_getscheduler(0)
        upload(c, "second.md", b"# Second\n\nThe pond pump is serviced in April.\n")
        assert workers() == [pid], "the second upload went to the same, lingering worker"
        assert os.getpriority(os.PRIO_PROCESS, pid) == BELOW_NICE
        assert os.sched_getscheduler(pid) == os.SCHED_BATCH
    finally:
        srv.stop()


def test_a_queued_job_says_when_it_waits_for_cpu():
    busy = os.getloadavg()[0] >= (os.cpu_count() or 1)
    note = cpu_wait("queued", 10.0)
    assert (note is not None) == busy
    if note:
        assert note.startswith("waiting for CPU: this machine is busy (load ")
    assert cpu_wait("running", 10.0) is None and cpu_wait("queued", 0.1) is None


def spinners(n: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """n processes that keep a core busy each, at normal priority, for at most `seconds`."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


@linux_only
@pytest.mark.slow  # keeps both cores busy for most of a minute; the time it takes is bench/upload_bench.py --busy's
def test_a_one_line_upload_is_stored_while_both_cores_are_busy(module_db_url: str, tmp_path: Path):
    env = ragvps_env(module_db_url, tmp_path / "data")
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "seed.md").write_bytes(page("seed"))
    run_cli(env, "ingest", str(tmp_path / "seed"))
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY}, key=KEY).start()
    busy = spinners(os.cpu_count() or 2, waiting.seconds(150))
    try:
        c = srv.client()
        note = b"# Note\n\nThe heron feeder is refilled on Thursdays by the facilities team.\n"
        posted = c.post("/kb/default/documents", files=[("files", ("note.md", note, "text/markdown"))])
        assert posted.status_code == 202, posted.text
        job = posted.json()["job"]
        status = waiting.wait_until(
            lambda: (s := c.get(f"/jobs/{job}").json())["state"] not in ("queued", "running") and s,
            f"upload job {job} to end while both cores are busy",
        )
        assert status["state"] == "done", status
        hits = c.post("/kb/default/search", json={"query": "when is the heron feeder refilled?", "k": 3}).json()
        assert hits["hits"][0]["path"] == "note.md"
    finally:
        for p in busy:
            p.kill()
            p.wait()
        srv.stop()
