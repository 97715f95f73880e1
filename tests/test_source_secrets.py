"""A source's credentials stay apart from its location (issue 50, item 3): a git source at
`http://deploy:TOKEN@host/repo.git` is synced with the token (sent to that host only), yet no reader sees it, in
the source listing, in search hits' paths or in /ask's citations, and the database holds it only encrypted. A
location whose query carries a secret is refused; a sync's failed items name no server path."""

from __future__ import annotations

import json
import subprocess

import psycopg
import pytest
from support.asgi_server import InProcess
from support.serve_server import KEY, ragvps_env
from support.sites import git, new_repo, served

from tests.test_source_api import run_cli
from tests.test_source_jobs import wait

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
TOKEN = "ghp-SECRET-0451"


@pytest.fixture
def server(db_url, tmp_path):
    env = ragvps_env(db_url, tmp_path / "data") | {"RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1"}
    reader = run_cli(env, "key", "create", "--kb", "default", "--role", "read", "--name", "reader").strip()
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY}, key=KEY).start()
    srv.data = tmp_path / "data"  # type: ignore[attr-defined]
    yield srv, reader
    srv.stop()


def test_a_token_in_a_git_url_is_used_and_never_shown(server, db_url, tmp_path):
    srv, reader = server
    new_repo(tmp_path / "work", {"guide.md": A, "broken.docx": "not a zip at all"})
    (tmp_path / "site").mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(tmp_path / "site" / "h.git")], check=True
    )
    git(tmp_path / "site" / "h.git", "update-server-info")
    sent: list[str] = []

    def refs(handler) -> bool:
        sent.append(handler.headers.get("Authorization", ""))
        return False  # served as the file it is

    admin, read = srv.client(), srv.keyless(headers={"Authorization": f"Bearer {reader}"})
    with served(tmp_path / "site", {"/h.git/info/refs": refs}) as base:
        location = base.replace("http://", f"http://deploy:{TOKEN}@") + "/h.git"
        added = admin.post("/kb/default/sources", json={"kind": "git", "name": "handbook", "location": location})
        assert added.status_code == 201 and TOKEN not in added.text, added.text
        job = wait(admin, admin.post("/kb/default/sources/handbook/sync").json()["job"])
        assert job["sync"]["read"] == 2, job
        assert sent and all(s.startswith("Basic ") for s in sent), sent  # the token went to its host
        seen = [
            read.get("/kb/default/sources").text,
            read.post("/kb/default/search", json={"query": "night ferry Brindle"}).text,
            read.post("/kb/default/ask", json={"question": "When does the night ferry leave?"}).text,
            admin.get(f"/jobs/{job['id']}").text,
        ]
        for text in seen:
            assert TOKEN not in text and "deploy:" not in text, text
            assert str(srv.data) not in text and str(tmp_path) not in text, text
        assert f"{base}/h/blob/" in seen[1]
    with psycopg.connect(db_url) as conn:
        rows = [
            row
            for (schema,) in conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kb%'").fetchall()
            for row in conn.execute(f'SELECT * FROM "{schema}".sources').fetchall()
        ]
    assert rows and TOKEN not in json.dumps(rows, default=str)


def test_a_secret_in_a_query_or_an_endpoint_is_refused(server):
    srv, _ = server
    body = {"kind": "web", "name": "w", "location": "https://example.com/feed?access_token=abc"}
    refused = srv.client().post("/kb/default/sources", json=body)
    assert refused.status_code == 400 and "access_token" in refused.text and "abc" not in refused.text
    body = {"kind": "s3", "name": "b", "location": "handbook", "options": {"endpoint": "http://AKID:sk-99@minio:9000"}}
    refused = srv.client().post("/kb/default/sources", json=body)
    assert refused.status_code == 400 and "carries credentials" in refused.text and "sk-99" not in refused.text
