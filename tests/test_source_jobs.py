"""Syncs of connected sources as jobs (issue 46): on the upload jobs' lease queue, so `POST .../sync` answers 202
with a job that `GET /jobs/{id}` follows (items read, failed items by path or URL) and `DELETE /jobs/{id}` cancels
between items, leaving the source as its last complete sync left it; the server's worker runs them, `ragvps sync`
runs its own in process, and one sync of a source runs at a time. Real PostgreSQL, real servers (a git repository
over dumb HTTP, a slow web site), the server's own job runner."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import psycopg
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.serve_server import KEY, ragvps_env
from support.sites import git, new_repo, served

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
PAGES = 16
DELAY_S = 0.3  # each page of the slow site: a sync of it takes seconds, so a cancel lands between its pages


def wait(c: httpx.Client, job: str, until: str = "ended", timeout: float = 90) -> dict:
    deadline = waiting.deadline(timeout)
    while True:
        status = c.get(f"/jobs/{job}").json()
        if status["state"] in ("done", "failed", "cancelled") or (until == "reading" and status["files_done"] >= 2):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


@pytest.fixture(scope="module")
def server(module_db_url, tmp_path_factory):
    root = tmp_path_factory.mktemp("sync-jobs")
    srv = InProcess(
        ragvps_env(module_db_url, root / "data") | {"RAGVPS_API_KEYS": KEY, "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"},
        key=KEY,
    ).start()
    srv.data = root / "data"  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def test_a_sync_over_http_is_a_job_with_counts_and_its_failed_item_named(server, tmp_path):
    work = tmp_path / "work"
    new_repo(work, {"guide.md": A})
    (work / "escape.md").symlink_to(tmp_path / "outside.md")
    subprocess.run(["git", "-C", str(work), "add", "-A"], check=True)
    git(work, "commit", "-q", "-m", "a link out")
    (tmp_path / "site").mkdir()
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(tmp_path / "site" / "h.git")], check=True)
    git(tmp_path / "site" / "h.git", "update-server-info")
    c = server.client()
    with served(tmp_path / "site") as base:
        assert (
            c.post(
                "/kb/default/sources", json={"kind": "git", "name": "handbook", "location": f"{base}/h.git"}
            ).status_code
            == 201
        )
        queued = c.post("/kb/default/sources/handbook/sync")
        assert queued.status_code == 202 and queued.json()["created"], queued.text
        job = queued.json()["job"]
        assert queued.headers["Location"] == queued.json()["status_url"] == f"/jobs/{job}"
        status = wait(c, job)
    assert (status["state"], status["kind"], status["source"]) == ("done", "sync", "handbook"), status
    assert (status["files_done"], status["files_total"], status["files_failed"]) == (1, 1, 1), status
    assert [e["file"] for e in status["errors"]] == ["escape.md"] and "a symlink" in status["errors"][0]["error"]
    report = status["sync"]
    assert (report["read"], report["items"], report["state"], report["documents_stored"]) == (1, 1, "partial", 1)
    [listed] = c.get("/kb/default/sources").json()
    assert (listed["items"], listed["state"]) == (1, "partial"), listed
    assert c.post("/kb/default/sources/nope/sync").status_code == 404


def _slow_site(folder, slow: list[bool]):
    folder.mkdir()
    links = " ".join(f'<a href="p{n}.html">page {n}</a>' for n in range(PAGES))
    (folder / "index.html").write_text(f"<html><body><h1>Harbour</h1><p>All the pages.</p>{links}</body></html>")
    for n in range(PAGES):
        (folder / f"p{n}.html").write_text(
            f"<html><head><title>Pier {n}</title></head><body><h1>Pier {n}</h1><p>"
            f"Pier {n} of the harbour takes boats of {n + 3} metres.</p></body></html>"
        )

    def delayed(handler) -> bool:
        if slow[0]:
            time.sleep(DELAY_S)
        return False  # then served as a file

    return {f"/p{n}.html": delayed for n in range(PAGES)}


def test_a_cancelled_sync_stops_between_items_and_a_rerun_ends_as_a_whole_one(server, tmp_path):
    slow = [True]
    special = _slow_site(tmp_path / "site", slow)
    c = server.client()
    with served(tmp_path / "site", special) as base:
        assert (
            c.post(
                "/kb/default/sources", json={"kind": "web", "name": "piers", "location": f"{base}/index.html"}
            ).status_code
            == 201
        )
        job = c.post("/kb/default/sources/piers/sync").json()["job"]
        again = c.post("/kb/default/sources/piers/sync").json()  # one sync of a source at a time: the same job
        assert again["job"] == job and not again["created"], again
        reading = wait(c, job, until="reading")
        assert reading["state"] == "running", reading
        assert c.delete(f"/jobs/{job}").status_code == 200
        cancelled = wait(c, job)
        assert cancelled["state"] == "cancelled" and cancelled["files_done"] < PAGES + 1, cancelled
        [source] = [s for s in c.get("/kb/default/sources").json() if s["name"] == "piers"]
        assert (source["state"], source["items"]) == ("cancelled", 0), source  # the last complete sync's items

        slow[0] = False
        rerun = c.post("/kb/default/sources/piers/sync").json()
        assert rerun["created"] and rerun["job"] != job
        done = wait(c, rerun["job"])
        assert done["state"] == "done" and done["sync"]["items"] == PAGES + 1, done
        urls = {f"{base}/"} | {f"{base}/p{n}.html" for n in range(PAGES)}  # the index page by its canonical URL
    documents = c.get("/kb/default/documents", params={"limit": 1000}).json()["documents"]
    paths = [d["path"] for d in documents if d["path"].startswith(base)]
    assert sorted(paths) == sorted(urls)  # each page once: nothing stored twice, nothing missing
    mirror = server.data / "kb" / "default" / "sources" / "piers"  # type: ignore[attr-defined]
    files = [p for p in mirror.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert len(files) == PAGES + 1, files  # no file left of a page not recorded
    [source] = [s for s in c.get("/kb/default/sources").json() if s["name"] == "piers"]
    assert (source["state"], source["items"]) == ("ok", PAGES + 1), source


def test_the_cli_waits_for_a_sync_another_worker_holds_and_takes_it_over_when_its_lease_runs_out(cli, db_url, tmp_path):
    from ragvps.app import App
    from ragvps.app.sources import queue_sync
    from ragvps.config import load_settings
    from ragvps.db import sync_jobs

    cli.env["RAGVPS_WORKER_LEASE"] = "2"
    new_repo(tmp_path / "repo", {"guide.md": A})
    cli("source", "add", "git", "handbook", str(tmp_path / "repo"))
    with App.open(load_settings(env=cli.env)) as app:
        queued = queue_sync(app, "handbook")
    with psycopg.connect(db_url) as conn:
        assert sync_jobs.claim(conn, queued.job, "elsewhere", 2.0)  # another worker holds it, then dies
        started = time.monotonic()
        result = cli("sync", "handbook", "--json")
        waited = time.monotonic() - started
        [report] = json.loads(result.stdout)
        assert report["job"] == queued.job and report["read"] == 1, report
        assert waited >= 1.5 and "waiting for it" in result.stderr, (waited, result.stderr)
        row = conn.execute(
            "SELECT kind, state, attempts, claimed_by FROM ingest_jobs WHERE id = %s", (queued.job,)
        ).fetchone()
        assert row[:3] == ("sync", "done", 2) and row[3] != "elsewhere", row
        [again] = json.loads(cli("sync", "--json").stdout)  # a new job, run here at once
        assert again["job"] != queued.job and again["read"] == 0 and again["unchanged"] == 1, again


def test_a_worker_runs_queued_syncs_like_uploads(cli, db_url, tmp_path):
    from ragvps.app import App
    from ragvps.app.documents import job_status
    from ragvps.app.sources import queue_sync
    from ragvps.config import load_settings

    new_repo(tmp_path / "repo", {"guide.md": A})
    cli("source", "add", "git", "handbook", str(tmp_path / "repo"))
    with App.open(load_settings(env=cli.env)) as app:
        job = queue_sync(app, "handbook").job
        assert job_status(app, job).state == "queued"
        assert "1 jobs" in cli("worker", "--jobs", "--exit-when-empty").stdout
        status = job_status(app, job)
    assert (status.state, status.kind, status.files_done) == ("done", "sync", 1) and status.worker, status
    assert status.sync is not None and status.sync.documents_stored == 1 and status.chunks_embedded > 0
