"""Scheduled syncs (issue 46): the compose service `sync`, the systemd timer and the cron line beside the nightly
reindex, `ragvps sync --all` over every knowledge base, and the sources listed in `ragvps stats`."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess

import pytest
from support.sites import new_repo

from tests.test_deploy import DEPLOY, cli_commands, compose, service_env, unit_file

UNIT = DEPLOY / "systemd" / "ragvps-sync.service"
TIMER = DEPLOY / "systemd" / "ragvps-sync.timer"
CRON = DEPLOY / "cron" / "ragvps-sync"


def test_the_nightly_sync_runs_the_compose_service_under_the_reindex_lock():
    service = unit_file(UNIT)["Service"]
    words = shlex.split(service["ExecStart"][0])
    assert words[:4] == ["/usr/bin/flock", "-w", "3600", "/run/lock/ragvps-reindex.lock"]
    assert words[4:] == ["/usr/bin/docker", "compose", "run", "--rm", "--no-deps", "sync"]
    assert service["Type"] == ["oneshot"] and service["User"][0] != "root"
    timer = unit_file(TIMER)["Timer"]
    assert timer["Persistent"] == ["true"] and timer["OnCalendar"] == ["*-*-* 02:15:00"]  # before the 03:00 reindex
    sync = compose()["services"]["sync"]
    assert sync["profiles"] == ["sync"] and sync["restart"] == "no"
    assert sync["entrypoint"][-1] == "ragvps" and sync["command"] == ["sync", "--all"]
    cli = compose()["services"]["ragvps"]
    assert service_env(sync)["RAGVPS_DATABASE_URL"] == service_env(cli)["RAGVPS_DATABASE_URL"]
    assert service_env(sync)["RAGVPS_DATA_DIR"] == service_env(cli)["RAGVPS_DATA_DIR"]
    assert {"sync", "source"} <= cli_commands()
    lines = [line for line in CRON.read_text().splitlines() if line and not line.startswith(("#", "SHELL", "PATH"))]
    assert len(lines) == 1 and "/run/lock/ragvps-reindex.lock" in lines[0]
    assert "compose run --rm --no-deps sync" in lines[0]
    assert CRON.read_text().endswith("\n") and "%" not in lines[0]


def test_systemd_analyze_verify_accepts_the_sync_units():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd); the parse checks above ran")
    done = subprocess.run([analyze, "verify", str(UNIT), str(TIMER)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "ragvps-sync" in line]
    assert done.returncode == 0 and ours == [], done.stdout + done.stderr


def test_sync_all_and_stats(cli, tmp_path):
    new_repo(tmp_path / "one", {"a.md": "# Ferries\n\nThe night ferry leaves at eleven.\n"})
    new_repo(tmp_path / "two", {"b.md": "# Lighthouse\n\nThe keeper logs forty ships.\n"})
    cli("kb", "create", "second")
    cli("source", "add", "git", "one", str(tmp_path / "one"))
    cli("source", "add", "git", "two", str(tmp_path / "two"), "--kb", "second")
    reports = json.loads(cli("sync", "--all", "--json").stdout)
    assert sorted((r["kb"], r["name"], r["read"]) for r in reports) == [("default", "one", 1), ("second", "two", 1)]
    assert "--all" in cli("sync", "--all", "--kb", "second", expect=2).stderr
    shown = cli("stats", "--kb", "second").stdout
    assert "source two (git, " in shown and "1 item, synced " in shown and ", ok" in shown
    data = json.loads(cli("stats", "--json").stdout)
    assert [s["name"] for s in data["sources"]] == ["one"]
