"""A real Open WebUI (pip `open-webui` in its own virtual environment: too big for the test extras), started offline
on loopback for a test and stopped after it; the test is skipped, saying how to install it, where it is missing.

    python -m venv ../owui-venv && ../owui-venv/bin/pip install open-webui==0.12.4   # about 4 minutes, 7 GB
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from support import waiting
from support.serve_server import REPO, free_port

START_S = 300  # Open WebUI's first start (its database migrations) takes about a minute here


def open_webui_bin() -> Path | None:
    for candidate in (
        os.environ.get("OPEN_WEBUI"),
        shutil.which("open-webui"),
        str(REPO.parent / "owui-venv" / "bin" / "open-webui"),
    ):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


@contextmanager
def open_webui(data: Path, **settings: str) -> Iterator[str]:
    """Open WebUI with its data in `data` and these environment settings, offline; its URL."""
    found = open_webui_bin()
    if found is None:
        pytest.skip(
            "Open WebUI is not installed: `python -m venv ../owui-venv && ../owui-venv/bin/pip install "
            "open-webui==0.12.4` (or set OPEN_WEBUI to its `open-webui` command)"
        )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")} | {
        "DATA_DIR": str(data),
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "ENABLE_OLLAMA_API": "false",
        "WEBUI_SECRET_KEY": "test-secret",
        "PORT": str(port),
        **settings,
    }
    log = (data / "open-webui.log").open("wb")
    proc = subprocess.Popen(
        [str(found), "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=data,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        waiting.wait_until(
            lambda: _healthy(url) or (proc.poll() is not None and pytest.fail(_tail(data))),
            "Open WebUI to start: " + str(data / "open-webui.log"),
            START_S,
            poll=1.0,
        )
        yield url
    finally:
        waiting.stopped(proc, 30)
        log.close()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _tail(data: Path) -> str:
    return "Open WebUI did not start: " + (data / "open-webui.log").read_text()[-3000:]
