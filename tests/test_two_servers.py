"""Two real `ragvps serve` processes on one database, each with a data directory of its own (as on two hosts behind
one balancer), behave as one service (issue 54, part 4): a key revoked is refused by both within the key cache's
bound; a sign-in started on one and finished on the other gives a session both accept, and signing out on one
ends it on both; an upload sent to one is seen, with its job, on the other, and runs once, on the server whose
disk holds its files. docs/scale-out.md says what is shared and what is per server."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from support import waiting
from support.oidc_provider import mock_provider, set_user, two_teams
from support.serve_server import KEY, REPO, Server, ragvps_env, ragvps_here

pytestmark = pytest.mark.xdist_group("two-servers")

NOTE = "# Pelicans\n\nThe pelican colony nests on the north pier every April, {n} birds this year.\n"


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with mock_provider() as url:
        yield url


@pytest.fixture(scope="module")
def pair(module_db_url: str, tmp_path_factory: pytest.TempPathFactory, issuer: str) -> Iterator[tuple[Server, Server]]:
    """Servers A and B on one database, data directories apart, sign-in through the provider, whose callback (as
    a balancer would route it) reaches B."""
    root = tmp_path_factory.mktemp("two-servers")
    env_a = two_teams(module_db_url, root)
    env_b = env_a | {"RAGVPS_DATA_DIR": str(root / "host-b" / "data")}
    a, b = Server(env_a, root / "a.log"), Server(env_b, root / "b.log")
    common = {
        "RAGVPS_API_KEYS": KEY,
        "RAGVPS_OIDC_ISSUER": issuer,
        "RAGVPS_OIDC_CLIENT_ID": "ragvps",
        "RAGVPS_OIDC_CLIENT_SECRET": "client-secret-for-tests",
        "RAGVPS_OIDC_REDIRECT_URL": b.url + "/auth/callback",
        "RAGVPS_GROUP_ROLES": "eng=docs:read",
    }
    a.env, b.env = a.env | common, b.env | common
    try:
        a.start()
        b.start()
        yield a, b
    finally:
        a.stop()
        b.stop()


def status_within(client: httpx.Client, path: str, want: int, seconds: float = 10) -> int:
    """The status of POST `path` asked again until it is `want` (or `seconds` passed): a cache's bound, not a
    timing."""
    deadline, status = waiting.deadline(seconds), -1
    while time.monotonic() < deadline:
        status = client.post(path, json={"query": "roll back"}).status_code
        if status == want:
            break
        time.sleep(0.2)
    return status


def test_a_key_revoked_through_one_server_is_refused_by_both(pair: tuple[Server, Server]):
    a, b = pair
    made = ragvps_here(a.env, "key", "create", "--kb", "docs", "--role", "read", "--name", "both-servers")
    assert made.returncode == 0, made.stderr
    headers = {"Authorization": f"Bearer {made.stdout.strip()}"}
    with (
        httpx.Client(base_url=a.url, headers=headers, timeout=30) as ca,
        httpx.Client(base_url=b.url, headers=headers, timeout=30) as cb,
    ):
        assert ca.post("/kb/docs/search", json={"query": "roll back"}).status_code == 200
        assert cb.post("/kb/docs/search", json={"query": "roll back"}).status_code == 200
        assert ragvps_here(a.env, "key", "revoke", "both-servers").returncode == 0
        assert status_within(ca, "/kb/docs/search", 401) == 401
        assert status_within(cb, "/kb/docs/search", 401) == 401


def sign_in(a: Server, b: Server, sub: str) -> str:
    """The authorization-code flow with a plain HTTP client: /auth/login on A, the provider's form, the callback on
    B (with A's login cookie, as the browser carries it); the session cookie B sets."""
    start = httpx.get(a.url + "/auth/login", params={"next": "/"}, timeout=30)
    assert start.status_code == 302, start.text
    login_cookie = start.cookies["ragvps_login"]
    authorized = httpx.post(start.headers["location"], data={"sub": sub}, timeout=30)
    assert authorized.status_code == 302, authorized.text
    callback = authorized.headers["location"]
    assert callback.startswith(b.url + "/auth/callback?"), callback
    done = httpx.get(callback, cookies={"ragvps_login": login_cookie}, timeout=30)
    assert done.status_code == 302, done.text
    return done.cookies["ragvps_session"]


def kbs(server: Server, session: str) -> httpx.Response:
    return httpx.get(server.url + "/kb", cookies={"ragvps_session": session}, timeout=30)


def test_a_sign_in_started_on_one_server_and_finished_on_the_other_is_a_session_both_accept(
    pair: tuple[Server, Server], issuer: str
):
    a, b = pair
    set_user(issuer, "alice", groups=["eng"])
    session = sign_in(a, b, "alice")
    for server in (a, b):
        found = kbs(server, session)
        assert found.status_code == 200, (server.url, found.text)
        assert [k["name"] for k in found.json()["knowledge_bases"]] == ["docs"]
        me = httpx.get(server.url + "/auth/me", cookies={"ragvps_session": session}, timeout=30).json()
        assert me["signed_in"] and me["user"] == "alice@example.org", me
    # signed out on A: refused by B as well (revoked sessions are looked up at most 2 s ago)
    out = httpx.post(a.url + "/auth/logout", cookies={"ragvps_session": session}, timeout=30)
    assert out.status_code == 303
    deadline, status = waiting.deadline(10), 200
    while time.monotonic() < deadline and status == 200:
        status = kbs(b, session).status_code
        time.sleep(0.2)
    assert status == 401


def upload(server: Server, name: str, text: str) -> str:
    with server.client() as c:
        sent = c.post("/kb/docs/documents", files=[("files", (name, text.encode()))])
    assert sent.status_code == 202, sent.text
    return str(sent.json()["job"])


def ended(server: Server, job: str) -> dict[str, object]:
    """The job as `server` shows it, once it ended (at most 180 s)."""
    deadline = waiting.deadline(180)
    with server.client() as c:
        while True:
            got = c.get(f"/jobs/{job}")
            assert got.status_code == 200, got.text
            body: dict[str, object] = got.json()
            if body["state"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
                return body
            time.sleep(0.2)


def test_an_upload_sent_to_one_server_is_seen_with_its_job_on_the_other_and_runs_once(pair: tuple[Server, Server]):
    a, b = pair
    sent = {upload(a, "pelicans-a.md", NOTE.format(n=40)): a, upload(b, "pelicans-b.md", NOTE.format(n=41)): b}
    for job, home in sent.items():
        other = b if home is a else a
        with other.client() as c:
            assert c.get(f"/jobs/{job}").status_code == 200  # the job is in the database: both servers see it
        status = ended(other, job)
        assert status["state"] == "done" and status["files_failed"] == 0, status
        assert status["attempts"] == 1, status  # taken once
        assert home.proc is not None and re.search(rf":{home.proc.pid}/docs$", str(status["worker"])), status
    with a.client() as ca, b.client() as cb:
        for c in (ca, cb):
            hits = c.post("/kb/docs/search", json={"query": "where does the pelican colony nest?"}).json()["hits"]
            assert {"pelicans-a.md", "pelicans-b.md"} <= {h["path"] for h in hits}, hits
            listed = c.get("/kb/docs/documents").json()["documents"]
            assert {"pelicans-a.md", "pelicans-b.md"} <= {d["path"] for d in listed}


def staged_job(env: dict[str, str], name: str, text: str) -> str:
    """A job of one file staged in `env`'s data directory and queued, as the upload route does."""
    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env | {"RAGVPS_KB": "docs"})) as app:
        job = d.new_job_id(app)
        staging = d.staging_dir(app.settings.database.kb_dir, job)
        staging.mkdir(parents=True)
        (staging / "0").write_text(text)
        return d.submit(app, job, [d.StagedFile(0, name, f"incoming/{job}/0", len(text.encode()))])


def job_state(db_url: str, job: str) -> tuple[str, int]:
    with psycopg.connect(db_url) as conn:
        schema = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases WHERE name = 'docs'").fetchone()[0]
        row = conn.execute(f"SELECT state, attempts FROM {schema}.ingest_jobs WHERE id = %s", (job,)).fetchone()
        return str(row[0]), int(row[1])


def worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragvps", "worker", "--jobs", "--kb", "docs", "--exit-when-empty"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_worker_of_another_data_directory_leaves_a_job_whose_files_it_cannot_read(db_url: str, tmp_path: Path):
    """Regression: a worker on host B took a job whose files were staged on host A, found none of them and failed
    the job whole ("the job could not run: No such file or directory")."""
    env_a = ragvps_env(db_url, tmp_path / "a" / "data", worker_lease="1")
    env_b = ragvps_env(db_url, tmp_path / "b" / "data", worker_lease="1")
    assert ragvps_here(env_a, "kb", "create", "docs").returncode == 0
    job = staged_job(env_a, "pelicans.md", NOTE.format(n=7))
    elsewhere = worker(env_b)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert job_state(db_url, job) == ("queued", 0), elsewhere.stderr  # not taken: its files are on A
    home = worker(env_a)
    assert home.returncode == 0, home.stderr
    assert job_state(db_url, job) == ("done", 1)


def test_two_workers_of_one_data_directory_run_each_job_once(db_url: str, tmp_path: Path):
    """Two servers sharing a data directory (one host, or the compose profile's shared volume) both run workers for
    the same jobs: each job is taken by one of them, once, and each file stored once."""
    env = ragvps_env(db_url, tmp_path / "data")
    assert ragvps_here(env, "kb", "create", "docs").returncode == 0
    made = [staged_job(env, f"note-{n}.md", NOTE.format(n=n)) for n in range(6)]
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "ragvps", "worker", "--jobs", "--kb", "docs", "--exit-when-empty", "--name", name],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for name in ("host-a", "host-b")
    ]
    for proc in workers:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    assert [job_state(db_url, job) for job in made] == [("done", 1)] * len(made)
    with psycopg.connect(db_url) as conn:
        schema = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases WHERE name = 'docs'").fetchone()[0]
        paths = [r[0] for r in conn.execute(f"SELECT source FROM {schema}.documents ORDER BY source")]
    assert paths == [f"note-{n}.md" for n in range(6)], paths
