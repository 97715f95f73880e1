"""A real `ragvps serve` process on a free loopback port, for the server's tests (and the bench).

The process is `sys.executable -m ragvps serve` with this checkout on PYTHONPATH; `start` waits until
/health says ready (or the process dies, whose log is then in the error).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support import waiting

REPO = Path(__file__).resolve().parents[2]
KEY = "test-key-0123456789abcdef"
SECOND_KEY = "second-key-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def embed_threads() -> str:
    """The setting threads (onnxruntime's intra-op threads) for a test's ragvps: one in an xdist worker, where `-n 3`
    runs three workers on two cores and a second thread each would spin against the other workers (as `ragvps serve`
    takes one per request, serve/shared/lifecycle.py for_serving); else 0, the default (one per core)."""
    return "1" if os.environ.get("PYTEST_XDIST_WORKER") else "0"


def ragvps_env(db_url: str, data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of a ragvps process: this checkout, the given database, no stray RAGVPS_* settings."""
    config = data_dir.parent / "empty.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    env |= {
        "PYTHONPATH": str(REPO),
        "RAGVPS_DATABASE_URL": db_url,
        "RAGVPS_DATA_DIR": str(data_dir),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_CONFIG": str(config),
        "RAGVPS_THREADS": embed_threads(),
    }
    env |= {"RAGVPS_" + name.upper(): value for name, value in settings.items()}
    return env


def ragvps(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragvps", *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def ragvps_here(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The same command run by the real CLI in this process (typer's runner), with the RAGVPS_* settings of `env`:
    no interpreter to start and no modules to import again."""
    from typer.testing import CliRunner

    from ragvps.cli import app

    done = CliRunner().invoke(
        app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    return subprocess.CompletedProcess(["ragvps", *args], done.exit_code, done.stdout, done.stderr)


@dataclass
class Server:
    env: dict[str, str]
    log: Path
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    key: str | None = KEY
    proc: subprocess.Popen[bytes] | None = None
    nofile: int | None = None  # the process's soft limit of open files, as a small VPS may set it
    cwd: Path = REPO  # the checkout whose ragvps runs (`python -m` imports from here first)
    options: tuple[str, ...] = ()  # global options before `serve` (`--verbose`)

    def _limits(self) -> None:
        import resource

        if self.nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}

    def start(self, wait_ready: bool = True, timeout: float = 120) -> Server:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ragvps", *self.options, "serve", "--host", self.host, "--port", str(self.port)],
                env=self.env,
                cwd=self.cwd,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=self._limits,
            )
        deadline = waiting.deadline(timeout)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ragvps serve exited {self.proc.returncode}:\n{self.log.read_text()}")
            try:
                r = httpx.get(self.url + "/health", timeout=5)
                if r.status_code == 200 or (not wait_ready and r.status_code == 503):
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ragvps serve was not ready within {timeout:.0f} s:\n{self.log.read_text()}")

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=60, **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc is not None:
            waiting.stopped(self.proc, 20)


# --- fixtures (registered for every test module by tests/conftest.py's pytest_plugins) ----------------------


@pytest.fixture(scope="session")
def serve_env(new_database: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A database of its own with the docs folder ingested, shared by the server tests."""
    from typer.testing import CliRunner

    from ragvps.cli import app

    # The real CLI, in this process, with a data directory of this worker's own. The first worker here embeds the
    # pages; the others read its vectors (tests/support/shared_vectors.py), and each process then remembers them
    # (ragvps/embed/local.py), so that its other ingests of the user guide run no model.
    env = ragvps_env(new_database("serve"), tmp_path_factory.mktemp("serve-data") / "data")
    done = CliRunner().invoke(
        app,
        ["ingest", str(REPO / "docs")],
        catch_exceptions=False,
        env={k: v for k, v in env.items() if k.startswith("RAGVPS_")},
    )
    assert done.exit_code == 0, done.output
    return env


@pytest.fixture(scope="session")
def server(serve_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """`ragvps serve` over that database, with two API keys (KEY and SECOND_KEY)."""
    srv = Server(
        serve_env | {"RAGVPS_API_KEYS": f"{KEY},{SECOND_KEY}"}, tmp_path_factory.mktemp("serve-log") / "serve.log"
    ).start()
    yield srv
    srv.stop()
