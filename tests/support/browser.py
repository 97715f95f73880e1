"""The one way tests open a browser: Debian's chromium (`apt-get install -y chromium`, as .ci/run does) driven by
Playwright, never `playwright install` (it downloads a browser). Where chromium or Playwright is missing, the test
that asked for it is skipped with how to install it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def playwright() -> Any:
    """playwright.sync_api, or the test is skipped with why."""
    if not CHROMIUM.exists():
        pytest.skip(
            f"no chromium at {CHROMIUM} (found: {shutil.which('chromium')}); install it with "
            "`apt-get install -y chromium` (.ci/run does) to run the browser tests"
        )
    return pytest.importorskip("playwright.sync_api", reason="playwright is not installed: pip install '.[test]'")


@contextmanager
def chromium(*args: str) -> Iterator[Any]:
    """A headless chromium (a Playwright Browser), with `args` beside the usual ones, closed on the way out."""
    sync_api = playwright()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[*ARGS, *args])
        try:
            yield browser
        finally:
            browser.close()
