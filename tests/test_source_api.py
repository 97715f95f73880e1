"""Connected sources over HTTP (issue 46), in this process: listed with the read role, added, synced and removed
with the admin role only; a git source added over HTTP must be a URL (a served repository here), never a path."""

from __future__ import annotations

import subprocess

import pytest
from support.asgi_server import InProcess
from support.serve_server import KEY, ragvps_env
from support.sites import git, new_repo, served
from typer.testing import CliRunner

from ragvps.cli import app as cli_app
from tests.test_source_jobs import wait

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"


def run_cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(
        cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.fixture
def server(db_url, tmp_path):
    env = ragvps_env(db_url, tmp_path / "data")
    reader = run_cli(env, "key", "create", "--kb", "default", "--role", "read", "--name", "reader").strip()
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY, "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"}, key=KEY).start()
    yield srv, reader
    srv.stop()


def test_sources_over_http(server, tmp_path):
    srv, reader = server
    new_repo(tmp_path / "work", {"guide.md": A})
    (tmp_path / "site").mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(tmp_path / "site" / "h.git")], check=True
    )
    git(tmp_path / "site" / "h.git", "update-server-info")
    admin = srv.client()
    read = srv.keyless(headers={"Authorization": f"Bearer {reader}"})
    with served(tmp_path / "site") as base:
        body = {"kind": "git", "name": "handbook", "location": f"{base}/h.git", "options": {"branch": "main"}}
        assert read.post("/kb/default/sources", json=body).status_code in (403, 404)
        local = admin.post("/kb/default/sources", json=body | {"location": str(tmp_path / "work")})
        assert local.status_code == 400 and "not a path on the server" in local.text
        added = admin.post("/kb/default/sources", json=body)
        assert added.status_code == 201 and added.json()["state"] == "new", added.text
        assert admin.post("/kb/default/sources", json=body).status_code == 409
        synced = admin.post("/kb/default/sources/handbook/sync")
        assert synced.status_code == 202, synced.text
        assert wait(admin, synced.json()["job"])["sync"]["read"] == 1
        listed = read.get("/kb/default/sources").json()
        assert [(s["name"], s["items"], s["state"]) for s in listed] == [("handbook", 1, "ok")]
        hits = admin.post("/kb/default/search", json={"query": "night ferry Brindle"}).json()
        assert hits["hits"][0]["path"].startswith(f"{base}/h/blob/"), hits
        assert read.delete("/kb/default/sources/handbook").status_code in (403, 404)
        assert admin.delete("/kb/default/sources/handbook").json() == {"name": "handbook", "documents": 1}
        assert admin.post("/kb/default/sources/handbook/sync").status_code == 404
