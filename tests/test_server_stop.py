"""`ragvps server stop` after a `ragvps serve` ended by SIGTERM (systemd, docker, kill), with real processes:
the serve lets go of the embedded PostgreSQL as Ctrl-C does, and `server stop` says "stopped" only once the
postmaster is gone; while a live process uses the server, it names it and exits non-zero."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
from support import waiting
from support.serve_server import REPO, embed_threads, free_port


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "empty.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    return env | {
        "PYTHONPATH": str(REPO),
        "RAGVPS_DATA_DIR": str(tmp_path / "data"),
        "RAGVPS_CONFIG": str(tmp_path / "empty.toml"),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_THREADS": embed_threads(),
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragvps", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )


def _serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragvps", "serve", "--port", str(port)],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = waiting.deadline(120)
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("ragvps serve was not ready:\n" + log.read_text())


def _postmaster(tmp_path: Path) -> int:
    return int((tmp_path / "data" / "pg" / "postmaster.pid").read_text().split()[0])


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _handles(tmp_path: Path) -> list[int]:
    path = tmp_path / "data" / "pg" / ".handle_pids.json"
    return json.loads(path.read_text() or "[]") if path.exists() else []


def _serving(tmp_path: Path) -> tuple[dict[str, str], subprocess.Popen[bytes], int]:
    """A folder ingested into the embedded server, then `ragvps serve` over it: (env, the serve, the postmaster)."""
    env = _env(tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nthe harbour crane lifts containers\n")
    assert _run(env, "ingest", str(tmp_path / "docs")).returncode == 0
    proc, _ = _serve(env, tmp_path / "serve.log")
    return env, proc, _postmaster(tmp_path)


def test_sigterm_lets_go_of_the_server_and_stop_confirms_it_is_gone(tmp_path):
    env, proc, postmaster = _serving(tmp_path)
    try:
        assert proc.pid in _handles(tmp_path)
        # While the serve runs, stop refuses and names it.
        busy = _run(env, "server", "stop")
        assert busy.returncode != 0 and str(proc.pid) in busy.stderr and "ragvps serve" in busy.stderr, busy
        assert "stopped" not in busy.stdout and _alive(postmaster)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0, (tmp_path / "serve.log").read_text()
        assert proc.pid not in _handles(tmp_path), "SIGTERM left the serve's handle behind"
        done = _run(env, "server", "stop")
        assert done.returncode == 0 and done.stdout.strip() == "stopped", done
        assert not _alive(postmaster), "`server stop` said stopped, but the postmaster still runs"
        again = _run(env, "server", "stop")
        assert again.returncode == 0 and "no embedded server runs" in again.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
        if _alive(postmaster):
            os.kill(postmaster, signal.SIGTERM)


def test_stop_after_a_user_was_killed_still_stops_the_server(tmp_path):
    env, proc, postmaster = _serving(tmp_path)
    try:
        proc.kill()  # no exit handler runs: its pid stays in the handle file
        proc.wait(30)
        assert proc.pid in _handles(tmp_path)
        done = _run(env, "server", "stop")
        assert done.returncode == 0 and done.stdout.strip() == "stopped", done
        assert not _alive(postmaster), "`server stop` said stopped, but the postmaster still runs"
    finally:
        if _alive(postmaster):
            os.kill(postmaster, signal.SIGTERM)
