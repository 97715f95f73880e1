"""Where a connected source may connect (issue 50, item 1): public addresses only, unless the server's own
configuration lists more in source_allow_hosts. The check is of the resolved address (a name that resolves to
loopback is refused like 127.0.0.1), of every connection (git's redirects are not followed), and it covers web, git
over http(s) and S3 endpoints alike. The other source tests run their loopback servers with the setting."""

from __future__ import annotations

import ipaddress
import json
import subprocess

import pytest
from support.sites import git, new_repo, served

from ragvps.reach import Blocked, Reach, public

A = "# Ferries\n\nThe night ferry to Brindle Island leaves at eleven from pier four.\n"
PAGE = "<html><head><title>Vault</title></head><body><h1>Vault</h1><p>The vault code is 8841.</p></body></html>"
SETTING = "source_allow_hosts"


def _sync(cli, expect: int) -> dict:
    return json.loads(cli("sync", "--json", expect=expect).stdout)[0]


def _nothing_stored(cli) -> None:
    assert "8841" not in cli("query", "8841", "--json", "--mode", "keyword", expect=None).stdout


def test_a_web_source_on_loopback_is_refused_unless_the_server_allows_it(cli, tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text(PAGE)
    with served(tmp_path / "site") as base:
        port = base.rsplit(":", 1)[1]
        cli("source", "add", "web", "inside", f"{base}/index.html")
        cli("source", "add", "web", "named", f"http://localhost:{port}/index.html")  # the name is not the check
        for report in json.loads(cli("sync", "--json", expect=1).stdout):
            assert report["state"] == "failed" and SETTING in report["error"], report
            assert report["error"].count(f"source {report['name']}") == 1, report
        _nothing_stored(cli)
        cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.0/8"
        cli("source", "remove", "named")
        assert _sync(cli, 0)["read"] == 1


def test_the_metadata_address_is_never_dialled(cli):
    cli("source", "add", "web", "meta", "http://169.254.169.254/latest/meta-data/")
    report = _sync(cli, 1)
    assert report["state"] == "failed" and "169.254.169.254" in report["error"] and SETTING in report["error"]


def test_a_git_source_over_http_on_loopback_is_refused_and_redirects_are_not_followed(cli, tmp_path):
    new_repo(tmp_path / "work", {"guide.md": A.replace("night ferry", "vault code 8841")})
    (tmp_path / "site").mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--bare", str(tmp_path / "work"), str(tmp_path / "site" / "h.git")], check=True
    )
    git(tmp_path / "site" / "h.git", "update-server-info")

    def moved(handler) -> bool:
        handler.send_response(302)
        handler.send_header("Location", handler.path.replace("/moved.git/", "/h.git/"))
        handler.end_headers()
        return True

    with served(tmp_path / "site", {"/moved.git/info/refs": moved}) as base:
        cli("source", "add", "git", "inside", f"{base}/h.git")
        report = _sync(cli, 1)
        assert report["state"] == "failed" and SETTING in report["error"], report
        cli("source", "remove", "inside")
        cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.1"
        cli("source", "add", "git", "moved", f"{base}/moved.git")
        report = _sync(cli, 1)
        assert report["state"] == "failed", report
        _nothing_stored(cli)


def test_an_s3_endpoint_on_loopback_is_refused(cli, tmp_path):
    (tmp_path / "bucket").mkdir()
    with served(tmp_path / "bucket") as base:
        cli.env.update({"AWS_ACCESS_KEY_ID": "AKIDSERVER", "AWS_SECRET_ACCESS_KEY": "server-secret"})
        cli("source", "add", "s3", "inside", "handbook", "--endpoint", base)
        report = _sync(cli, 1)
        assert report["state"] == "failed" and SETTING in report["error"], report


@pytest.mark.unit
def test_the_address_rule():
    for text in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.100.100.200", "0.0.0.0"):
        assert not public(ipaddress.ip_address(text)), text
    for text in ("::1", "fe80::1", "fd00:ec2::254", "::ffff:127.0.0.1", "64:ff9b::a9fe:a9fe", "::"):
        assert not public(ipaddress.ip_address(text)), text
    assert public(ipaddress.ip_address("93.184.216.34")) and public(ipaddress.ip_address("2606:4700::1"))
    with pytest.raises(Blocked, match=SETTING):
        Reach().address("localhost", 80)
    assert Reach.of(["localhost"]).address("localhost", 80) in ("127.0.0.1", "::1")
    assert Reach.of(["10.0.0.0/8"]).address("10.9.9.9", 80) == "10.9.9.9"
    with pytest.raises(Blocked):
        Reach.of(["10.0.0.0/8"]).address("192.168.0.1", 80)
