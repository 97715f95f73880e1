"""Read replicas (issue 54) on a real primary and hot standby (tests/support/replication.py): searches and asks read
from the standby, writes go to the primary, a read sees the writes before it, a standby that dies or a primary that
stops is read around, and the primary's return resumes everything without a restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.asgi_server import in_process
from support.replication import Cluster
from support.serve_server import KEY, embed_threads
from support.waiting import wait_until
from typer.testing import CliRunner

from ragvps.app import App
from ragvps.app.requests import AskRequest, SearchRequest
from ragvps.cli import app as cli_app
from ragvps.config import load_settings
from ragvps.errors import DatabaseError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster.make() as made:
        yield made


def settings_for(cluster: Cluster, data: Path, **more: str):
    env = {
        "RAGVPS_DATABASE_URL": cluster.url("primary"),
        "RAGVPS_DATABASE_REPLICA_URLS": cluster.url("standby1"),
        "RAGVPS_DATA_DIR": str(data),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_THREADS": embed_threads(),
        "RAGVPS_REPLICA_MAX_LAG": "600",  # a paused replay stays a replica to wait on, not a skipped one
    } | {f"RAGVPS_{k.upper()}": v for k, v in more.items()}
    return load_settings(config_file=None, env=env)


@pytest.fixture(scope="module")
def app(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    root = tmp_path_factory.mktemp("replicas")
    docs = root / "docs"
    docs.mkdir()
    (docs / "keys.md").write_text("# Keys\n\nRotate the signing keys every ninety days with `ragvps key rotate`.\n")
    with App.open(settings_for(cluster, root / "data"), pooled=True) as opened:
        opened.ingest(docs)
        wait_until(lambda: _ready(opened), "the standby checked and ready", 30)
        yield opened


def _ready(app: App) -> bool:
    report = app.connections.replicas()
    return report is not None and all(r.state == "ok" for r in report.replicas) and report.primary_problem is None


def _reads(app: App) -> dict[str, int]:
    report = app.connections.replicas()
    assert report is not None
    return report.reads


def _add(app: App, folder: Path, word: str) -> None:
    (folder / f"{word}.md").write_text(f"# {word}\n\nThe codeword {word} opens the vault.\n")
    app.ingest(folder)


def _finds(app: App, word: str) -> bool:
    hits = app.search(SearchRequest(f"codeword {word}", mode="keyword")).hits
    return any(word in h.text for h in hits)


def test_searches_and_asks_read_the_standby_and_never_migrate_it(app: App, cluster: Cluster):
    before = dict(_reads(app))
    assert app.search(SearchRequest("rotate the signing keys")).hits
    assert app.ask(AskRequest("How often do I rotate the signing keys?")).retrieval.shown
    after = _reads(app)
    standby = next(name for name in after if name != "primary")
    assert after[standby] >= before.get(standby, 0) + 2, after
    assert "cannot execute" not in cluster.log("standby1")  # nothing tried to write there (a migration, a count)


def test_a_search_right_after_a_write_sees_it_though_the_standby_has_not_replayed_it(
    app: App, cluster: Cluster, tmp_path: Path
):
    cluster.pause_replay("standby1")
    try:
        _add(app, tmp_path, "zebracorn")
        primary = _reads(app).get("primary", 0)
        assert _finds(app, "zebracorn")  # the standby waited on for replica_wait, then the primary read
        assert _reads(app)["primary"] == primary + 1
    finally:
        cluster.pause_replay("standby1", paused=False)


@pytest.mark.parametrize("rounds", [10, pytest.param(100, marks=pytest.mark.slow)])
def test_read_your_writes_holds_in_every_round(app: App, tmp_path: Path, rounds: int):
    found = sum(_finds(app, word) for word in (f"marker{n}x" for n in range(rounds)) if _add(app, tmp_path, word) or 1)
    assert found == rounds


def test_a_dead_standby_is_read_around_and_back_when_it_returns(app: App, cluster: Cluster):
    cluster.stop("standby1")
    try:
        for _ in range(5):  # the first may find it dead under it: read again on the primary, never failed
            assert app.search(SearchRequest("rotate the signing keys")).hits
        report = app.connections.replicas()
        assert report is not None and report.replicas[0].state == "down"
        assert "down" in (app.health().degraded or "")
    finally:
        cluster.start("standby1")
    wait_until(lambda: _ready(app), "the standby back in the reads", 30)


def test_the_primary_stopped_reads_go_on_writes_are_refused_and_all_resumes(app: App, cluster: Cluster, tmp_path: Path):
    app.ask(AskRequest("Which command rotates the signing keys?"))  # the cache, before the stop
    cluster.stop("primary")
    try:
        wait_until(lambda: (app.connections.replicas() or _never()).primary_problem, "the primary seen away", 30)
        assert app.search(SearchRequest("rotate the signing keys")).hits
        answer = app.ask(AskRequest("How long may a signing key live?"))  # a new question: its memo kept for later
        assert answer.retrieval.shown
        assert app.ask(AskRequest("Which command rotates the signing keys?")).cache == "hit"
        health = app.health()
        assert health.ready and "primary database cannot be reached" in (health.degraded or "")
        (tmp_path / "new.md").write_text("# New\n\nWritten while the primary is away.\n")
        with pytest.raises(DatabaseError, match="read-only for now") as refused:
            app.ingest(tmp_path)
        assert refused.value.http_status == 503
        report = app.connections.replicas()
        assert report is not None and report.deferred >= 1
    finally:
        cluster.start("primary")
    wait_until(lambda: _ready(app), "the primary back", 30)
    wait_until(lambda: (app.connections.replicas() or _never()).deferred == 0, "the kept writes written", 30)
    assert (app.connections.replicas() or _never()).deferred_written >= 1
    assert app.health().degraded is None
    _add(app, tmp_path, "afterwards")
    assert _finds(app, "afterwards")


def _never():
    raise AssertionError("no replicas configured")


def _env(cluster: Cluster, data: Path) -> dict[str, str]:
    return {
        "RAGVPS_DATABASE_URL": cluster.url("primary"),
        "RAGVPS_DATABASE_REPLICA_URLS": cluster.url("standby1"),
        "RAGVPS_DATA_DIR": str(data),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_THREADS": embed_threads(),
        "RAGVPS_CONFIG": str(data.parent / "empty.toml"),
        "RAGVPS_API_KEYS": KEY,
    }


def _job_done(c: httpx.Client, job: str) -> dict | None:
    status = c.get(f"/jobs/{job}").json()
    return status if status["state"] in ("done", "failed", "cancelled") else None


def _upload_then_search(c: httpx.Client, word: str) -> bool:
    """Upload one file naming `word`, wait for its job to be done, search for it at once: found?"""
    text = f"# {word}\n\nThe {word} grazes.\n"
    sent = c.post("/kb/default/documents", files=[("files", (f"{word}.md", text))])
    assert sent.status_code == 202, sent.text
    job = sent.json()["job"]
    done = wait_until(lambda: _job_done(c, job), f"upload job of {word} done", 120)
    assert done["state"] == "done", done
    hits = c.post("/kb/default/search", json={"query": word, "mode": "keyword"}).json()["hits"]
    return any(word in h["text"] for h in hits)


@pytest.mark.slow
def test_read_your_writes_holds_for_100_uploads_over_http(cluster: Cluster, tmp_path: Path):
    (tmp_path / "empty.toml").write_text("")
    with in_process(_env(cluster, tmp_path / "data"), key=KEY) as srv, srv.client() as c:
        found = sum(_upload_then_search(c, f"wombat{n}q") for n in range(100))
        reads = c.get("/metrics").text
    assert found == 100
    on = {
        line.split('on="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in reads.splitlines()
        if line.startswith("ragvps_replica_reads_total{")
    }
    print("reads by server:", on)  # most on the standby: the test is of it, not of the primary's fallback
    assert sum(v for k, v in on.items() if k != "primary") > 50, on


def test_over_http_an_upload_is_searchable_at_once_and_the_primary_away_is_read_only(
    app: App, cluster: Cluster, tmp_path: Path
):
    (tmp_path / "empty.toml").write_text("")
    with in_process(_env(cluster, tmp_path / "data"), key=KEY) as srv, srv.client() as c:
        for n in range(3):  # each search right after its upload's job is seen done
            assert _upload_then_search(c, f"okapi{n}z")
        assert 'ragvps_replica_state{replica="' in c.get("/metrics").text
        listed = c.get("/kb/default/documents", params={"limit": 1000}).json()["documents"]
        doc = next(d["id"] for d in listed if d["path"] == "okapi0z.md")
        cluster.stop("primary")
        try:
            wait_until(lambda: c.get("/health").json().get("status") == "degraded", "/health degraded", 30)
            health = c.get("/health")
            assert health.status_code == 200 and "primary database cannot be reached" in health.json()["degraded"]
            assert c.post("/kb/default/search", json={"query": "okapi grazes"}).json()["hits"]
            assert c.post("/kb/default/ask", json={"question": "What grazes?"}).status_code == 200
            chat = {"model": "ragvps", "messages": [{"role": "user", "content": "What grazes?"}]}
            assert c.post("/v1/chat/completions", json=chat).status_code == 200
            assert c.post("/api/chat", json=chat | {"stream": False}).status_code == 200
            refused = c.post("/kb/default/documents", files=[("files", ("late.md", "# Late\n\nToo late.\n"))])
            assert refused.status_code == 503 and "read-only for now" in refused.json()["error"], refused.text
            assert c.delete(f"/kb/default/documents/{doc}").status_code == 503
        finally:
            cluster.start("primary")
        wait_until(lambda: c.get("/health").json().get("status") == "ok", "/health ok again", 30)
        assert c.delete(f"/kb/default/documents/{doc}").status_code == 200
        assert not c.post("/kb/default/search", json={"query": "okapi0z", "mode": "keyword"}).json()["hits"]


def test_stats_shows_each_replica_and_its_lag(cluster: Cluster, tmp_path: Path):
    (tmp_path / "empty.toml").write_text("")
    env = _env(cluster, tmp_path / "data")
    result = CliRunner().invoke(cli_app, ["stats", "--json"], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    replicas = json.loads(result.stdout)["replicas"]
    assert [r["state"] for r in replicas] == ["ok"] and replicas[0]["lag_s"] is not None
    assert "postgres@" not in result.stdout
    shown = CliRunner().invoke(cli_app, ["stats"], env=env, catch_exceptions=False).stdout
    assert f"replica {replicas[0]['name']}: ok" in shown
