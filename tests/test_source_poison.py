"""Jobs a source cannot poison (issue 50, item 5): a page with a malformed link, or a `{0}` link template, fails
nothing but what it names; a sync that stopped its worker twice is marked failed with why and the queue moves on;
a cancel, the source's removal and SIGTERM each end a sync held by a page that trickles in, within seconds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.serve_server import KEY, REPO, ragvps_env
from support.sites import served

from tests.test_source_api import run_cli
from tests.test_source_jobs import wait

ENDED = ("done", "failed", "cancelled")


@pytest.fixture(scope="module")
def server(module_db_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("poison")
    env = ragvps_env(module_db_url, root / "data") | {"RAGVPS_API_KEYS": KEY, "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"}
    srv = InProcess(env, key=KEY).start()
    srv.writer = run_cli(env, "key", "create", "--kb", "default", "--role", "write", "--name", "w").strip()  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def _site(folder):
    folder.mkdir()
    (folder / "index.html").write_text(
        '<html><body><h1>Harbour</h1><p>The harbour guide.</p><a href="http://[broken">broken</a>'
        '<a href="ferries.html">Ferries</a><a href="slow.html">Slow</a></body></html>'
    )
    (folder / "ferries.html").write_text("<html><body><h1>Ferries</h1><p>The night ferry leaves at eleven.</p></body>")


def _trickle(hit: threading.Event):
    def handle(handler) -> bool:
        hit.set()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.end_headers()
        try:
            for _ in range(2000):  # ten minutes of a byte every 0.3 s
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.3)
        except OSError:
            pass
        handler.close_connection = True
        return True

    return handle


def test_a_malformed_link_and_a_bad_template_fail_alone(cli, tmp_path):
    _site(tmp_path / "site")
    cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.1"
    with served(tmp_path / "site") as base:
        cli("source", "add", "web", "harbour", f"{base}/index.html")
        [report] = json.loads(cli("sync", "--json").stdout)
    assert report["state"] in ("ok", "partial") and report["read"] == 2, report  # slow.html: 404 here
    said = cli("source", "add", "git", "g", str(tmp_path), "--link", "https://x/{0}", expect=2).stderr
    assert "{commit} and {path}" in said


def test_a_sync_that_stopped_its_worker_twice_fails_and_the_queue_moves_on(cli, db_url, tmp_path):
    from ragvps.app import App
    from ragvps.app.documents import job_status
    from ragvps.app.sources import queue_sync
    from ragvps.config import load_settings
    from ragvps.db import sync_jobs

    _site(tmp_path / "site")
    cli.env |= {"RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1", "RAGVPS_WORKER_LEASE": "1"}
    with served(tmp_path / "site") as base:
        cli("source", "add", "web", "poison", f"{base}/index.html")
        cli("source", "add", "web", "fine", f"{base}/ferries.html")
        with App.open(load_settings(env=cli.env)) as app:
            poison = queue_sync(app, "poison").job
            with app.connection() as conn:
                assert sync_jobs.claim(conn, poison, "killed-1", 1.0)
                assert sync_jobs.claim(conn, poison, "killed-2", 0.0)  # its lease counted as run out: a death
            fine = queue_sync(app, "fine").job
            cli("worker", "--jobs", "--exit-when-empty")
            first, second = job_status(app, poison), job_status(app, fine)
    assert first.state == "failed" and "stopped the worker that ran it 2 times" in (first.error or ""), first
    assert second.state == "done", second
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM ingest_jobs WHERE state IN ('queued', 'running')").fetchone()[0] == 0


def test_cancel_by_an_admin_and_removal_end_a_sync_on_a_trickling_page(server, tmp_path):
    _site(tmp_path / "site")
    hit = threading.Event()
    c = server.client()
    with served(tmp_path / "site", {"/slow.html": _trickle(hit)}) as base:
        body = {"kind": "web", "name": "slow", "location": f"{base}/slow.html"}
        assert c.post("/kb/default/sources", json=body).status_code == 201
        job = c.post("/kb/default/sources/slow/sync").json()["job"]
        assert hit.wait(60)
        writer = server.keyless(headers={"Authorization": f"Bearer {server.writer}"})
        refused = writer.delete(f"/jobs/{job}")  # a write key may upload, not sync: nor cancel a sync
        assert refused.status_code == 403 and "admin" in refused.text, refused.text
        assert writer.get(f"/jobs/{job}").json()["state"] == "running"
        assert c.delete(f"/jobs/{job}").status_code == 200
        assert wait(c, job, timeout=60)["state"] == "cancelled"

        hit.clear()
        job = c.post("/kb/default/sources/slow/sync").json()["job"]
        assert hit.wait(60)
        removed = c.delete("/kb/default/sources/slow")
        assert removed.status_code == 200, removed.text
        assert all(s["name"] != "slow" for s in c.get("/kb/default/sources").json())


def test_sigterm_stops_a_worker_held_by_a_trickling_page(cli, tmp_path):
    from ragvps.app import App
    from ragvps.app.sources import queue_sync
    from ragvps.config import load_settings

    (tmp_path / "site").mkdir()
    hit = threading.Event()
    cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.1"
    with served(tmp_path / "site", {"/slow.html": _trickle(hit)}) as base:
        cli("source", "add", "web", "slow", f"{base}/slow.html")
        with App.open(load_settings(env=cli.env)) as app:
            queue_sync(app, "slow")
        env = os.environ | cli.env | {"PYTHONPATH": str(REPO)}
        worker = subprocess.Popen(
            [sys.executable, "-m", "ragvps", "worker", "--jobs"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert hit.wait(120)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=60) is not None
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_adding_syncing_and_removing_a_source_leave_audit_rows(server, tmp_path):
    _site(tmp_path / "site")
    c = server.client()
    with served(tmp_path / "site") as base:
        body = {"kind": "web", "name": "audited", "location": f"{base}/ferries.html"}
        assert c.post("/kb/default/sources", json=body).status_code == 201
        assert wait(c, c.post("/kb/default/sources/audited/sync").json()["job"])["state"] == "done"
        assert c.delete("/kb/default/sources/audited").status_code == 200
    wanted = {("source_add", 201), ("sync", 202), ("source_remove", 200)}
    deadline, found = waiting.deadline(30), set()
    while time.monotonic() < deadline and not wanted <= found:  # written by the audit's thread in batches
        rows = json.loads(run_cli(server.env, "audit", "--since", "1h", "--json"))
        found = {(r["action"], r["status"]) for r in rows if r["kb"] == "default"}
        time.sleep(0.2)
    assert wanted <= found, found
