"""The compose profile `replica` (issue 54, part 5): a hot standby made by deploy/postgres/standby.sh from the same
PostgreSQL image, a second server configured as the first, and HAProxy (Debian's package) in front of both with
health checks. What runs it for real is deploy/smoke.sh's replica leg; these read the files."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
HAPROXY_CFG = DEPLOY / "balancer" / "haproxy.cfg"


def services() -> dict[str, Any]:
    found: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))["services"]
    return found


def test_the_profile_adds_a_standby_a_second_server_and_a_balancer_and_nothing_else():
    profiled = {name for name, s in services().items() if "replica" in s.get("profiles", [])}
    assert profiled == {"postgres-replica", "serve-2", "balancer"}
    assert all(services()[name]["profiles"] == ["replica"] for name in profiled)


def test_the_standby_is_the_primarys_image_copied_by_pg_basebackup_and_answers_reads():
    primary, standby = services()["postgres"], services()["postgres-replica"]
    assert standby["image"] == primary["image"]
    assert standby["entrypoint"] == ["bash", "/usr/local/bin/ragvps-standby.sh"]
    assert "./deploy/postgres/standby.sh:/usr/local/bin/ragvps-standby.sh:ro" in standby["volumes"]
    assert [v for v in standby["volumes"] if v.endswith(".conf:ro")] == [
        v for v in primary["volumes"] if v.endswith(".conf:ro")
    ]
    assert "hot_standby=on" in standby["command"] and "pg_is_in_recovery()" in standby["healthcheck"]["test"][1]
    assert not standby.get("ports"), "only the servers read from the standby"
    script = (DEPLOY / "postgres" / "standby.sh").read_text(encoding="utf-8")
    assert re.search(r"pg_basebackup -h \"\$primary\" .*-S \"\$slot\" -R -X stream", script)
    assert "pg_create_physical_replication_slot" in script
    assert subprocess.run(["bash", "-n", str(DEPLOY / "postgres" / "standby.sh")]).returncode == 0
    hba = (DEPLOY / "postgres" / "pg_hba.conf").read_text(encoding="utf-8").split("\n")
    rules = [line.split() for line in hba if line.strip() and not line.startswith("#")]
    assert ["host", "replication", "all", "all", "scram-sha-256"] in rules
    assert not [r for r in rules if r[0] == "host" and r[-1] == "trust"], "no address logs in without a password"
    settings = (DEPLOY / "postgres" / "ragvps.conf").read_text(encoding="utf-8")
    assert re.search(r"^max_slot_wal_keep_size = \d+GB", settings, re.M), "a dead standby must not fill the disk"


def test_the_second_server_is_configured_as_the_first():
    first, second = services()["serve"], services()["serve-2"]
    for key in ("image", "build", "command", "volumes", "healthcheck", "environment"):
        assert first[key] == second[key], key
    assert not second.get("ports"), "reached through the balancer only"


def _check_regex() -> re.Pattern[str]:
    line = next(x for x in HAPROXY_CFG.read_text(encoding="utf-8").splitlines() if "http-check expect" in x)
    quoted = line.split("rstring", 1)[1].strip()
    return re.compile(quoted[1:-1].replace('\\"', '"'))


def test_the_balancer_checks_each_servers_health_and_lets_a_degraded_one_answer():
    balancer = services()["balancer"]
    assert balancer["build"] == {"context": "deploy/balancer"}
    dockerfile = (DEPLOY / "balancer" / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM debian:\w+-slim$", dockerfile, re.M) and "install -y --no-install-recommends haproxy" in (
        dockerfile
    )
    cfg = HAPROXY_CFG.read_text(encoding="utf-8")
    servers = re.findall(r"^\s*server (\S+) (\S+):(\d+) check", cfg, re.M)
    assert [(name, host) for name, host, _ in servers] == [("serve", "serve"), ("serve-2", "serve-2")]
    assert {port for *_, port in servers} == {services()["serve"]["command"][-1]}
    assert "http-check send meth GET uri /health" in cfg
    assert re.search(r"bind :(\d+)", cfg).group(1) == balancer["ports"][0].rsplit(":", 1)[-1]  # type: ignore[union-attr]
    check = _check_regex()
    for body, passes in (
        ('{"status":"ok","ready":true}', True),
        ('{"status": "degraded", "cause": "the primary is down"}', True),
        ('{"status":"starting","error":null}', False),
        ('{"status":"unavailable"}', False),
    ):
        assert bool(check.search(body)) is passes, body


def test_haproxy_accepts_the_configuration_where_it_is_installed():
    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.skip("no haproxy here (apt-get install haproxy); the reading above still ran")
    done = subprocess.run([haproxy, "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
