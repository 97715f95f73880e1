"""The server's credentials are not a knowledge base's (issue 50, item 2): an S3 source signs with the credential
given for it (kept encrypted, never listed), or a profile of the server's source_credentials_file that lets this
knowledge base use it, and with the server's own AWS_* environment only where source_ambient_credentials names the
source; a signed request follows no redirect. A bucket served on loopback records what each request carried."""

from __future__ import annotations

import json

import pytest
from support.asgi_server import in_process
from support.serve_server import KEY, ragvps_env
from support.sites import s3_bucket, served

from tests.test_source_jobs import wait

DOC = b"# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
SERVER_KEY = "AKIDSERVERAMBIENT"


def _sync(cli, expect: int = 0) -> dict:
    return json.loads(cli("sync", "--json", expect=expect).stdout)[0]


def _setup(cli, tmp_path):
    cli.env.update(
        {
            "AWS_ACCESS_KEY_ID": SERVER_KEY,
            "AWS_SECRET_ACCESS_KEY": "server-secret",
            "AWS_SESSION_TOKEN": "server-session",
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "RAGVPS_SOURCE_ALLOW_HOSTS": "127.0.0.1",
        }
    )


def test_the_servers_ambient_credentials_are_not_a_sources(cli, tmp_path):
    _setup(cli, tmp_path)
    heard: list[tuple[str, str]] = []
    with served(tmp_path, s3_bucket(keys={"docs/a.md": DOC}, heard=heard)) as base:
        cli("source", "add", "s3", "bucket", "handbook", "--endpoint", base)
        assert _sync(cli)["read"] == 1
        assert heard and not any(auth for _, auth in heard), heard  # unsigned: the server's keys stayed home
        heard.clear()
        cli.env["RAGVPS_SOURCE_AMBIENT_CREDENTIALS"] = "default/other"  # the server's owner allows this one
        cli("source", "add", "s3", "other", "handbook", "--endpoint", base)
        cli("sync", "other")
        assert heard and all(SERVER_KEY in auth for _, auth in heard), heard


def test_a_named_profile_only_for_the_knowledge_bases_it_lists(cli, tmp_path):
    _setup(cli, tmp_path)
    table = tmp_path / "source-credentials.ini"
    table.write_text(
        "[handbook]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = s\nknowledge_bases = default\n"
        "[finance]\naws_access_key_id = AKIDFINANCE\naws_secret_access_key = s\nknowledge_bases = finance\n"
    )
    cli.env["RAGVPS_SOURCE_CREDENTIALS_FILE"] = str(table)
    heard: list[tuple[str, str]] = []
    with served(tmp_path, s3_bucket(keys={"docs/a.md": DOC}, heard=heard)) as base:
        cli("source", "add", "s3", "mine", "handbook", "--endpoint", base, "--profile", "handbook")
        assert _sync(cli)["read"] == 1
        assert heard and all("AKIDPROFILE" in auth for _, auth in heard), heard
        cli("source", "remove", "mine")
        heard.clear()
        cli("source", "add", "s3", "theirs", "handbook", "--endpoint", base, "--profile", "finance")
        report = _sync(cli, 1)
        assert report["state"] == "failed" and "not for knowledge base default" in report["error"], report
        assert not heard


def test_a_sources_own_credential_is_kept_sealed_and_never_follows_a_redirect(db_url, tmp_path):
    env = ragvps_env(db_url, tmp_path / "data", source_allow_hosts="127.0.0.1", api_keys=KEY)
    heard: list[tuple[str, str]] = []
    routes = s3_bucket(keys={"docs/a.md": DOC, "docs/b.md": DOC}, heard=heard)

    def moved(handler) -> bool:
        heard.append((handler.path, handler.headers.get("Authorization", "")))
        handler.send_response(307)
        handler.send_header("Location", "/handbook/docs/a.md")
        handler.end_headers()
        return True

    routes["/handbook/docs/b.md"] = moved
    with served(tmp_path, routes) as base, in_process(env, key=KEY) as srv:
        api = srv.client()
        options = {"endpoint": base, "access_key_id": "AKIDOWN", "secret_access_key": "own-secret-77"}
        body = {"kind": "s3", "name": "own", "location": "handbook", "options": options}
        added = api.post("/kb/default/sources", json=body)
        assert added.status_code == 201, added.text
        assert "own-secret-77" not in added.text and "AKIDOWN" not in added.text
        job = api.post("/kb/default/sources/own/sync").json()["job"]
        status = wait(api, job)
        assert status["sync"]["read"] == 1, status
        assert "not followed with credentials attached" in json.dumps(status["sync"]["problems"])
        assert [p for p, _ in heard].count("/handbook/docs/a.md") == 1, heard  # not again, through b.md's redirect
        assert all("AKIDOWN" in auth for _, auth in heard), heard
        assert "own-secret-77" not in api.get("/kb/default/sources").text


@pytest.mark.unit
def test_git_over_ssh_uses_the_servers_keys_only_where_allowed(tmp_path):
    from ragvps.ingest.remote import Fetch
    from ragvps.ingest.remote.git import NO_SSH_KEYS, _credential

    def fetch(location: str, ambient: bool = False, secret: str = "") -> Fetch:
        return Fetch(
            "g", location, {}, tmp_path, {}, None, lambda *_: None, lambda _: None, secret=secret, ambient=ambient
        )

    for location in ("git@git.example.com:team/handbook.git", "ssh://git@git.example.com/team/handbook.git"):
        assert _credential(fetch(location)) == {"GIT_SSH_COMMAND": NO_SSH_KEYS, "SSH_AUTH_SOCK": ""}
        assert _credential(fetch(location, ambient=True)) == {}
    header = _credential(fetch("https://git.example.com/h.git", secret="deploy:tok"))
    assert header["GIT_CONFIG_KEY_0"] == "http.extraHeader" and "tok" not in header["GIT_CONFIG_VALUE_0"]
