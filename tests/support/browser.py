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

from support import waiting

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
        _stretch_waits(browser)
        try:
            yield browser
        finally:
            browser.close()


PAGE_WAIT_S = 60.0  # Playwright's own default is 30 s: a loaded machine (load 16 on 2 cores) needs more


def _stretch_waits(browser: Any) -> None:
    """Every page's and context's waits (wait_for_selector, clicks, expect) default to one generous deadline that
    RAGVPS_TEST_TIME_SCALE stretches, instead of Playwright's 30 s."""
    ms = waiting.seconds(PAGE_WAIT_S) * 1000
    new_context, new_page = browser.new_context, browser.new_page

    def context(*a: Any, **kw: Any) -> Any:
        made = new_context(*a, **kw)
        made.set_default_timeout(ms)
        return made

    def page(*a: Any, **kw: Any) -> Any:
        made = new_page(*a, **kw)
        made.context.set_default_timeout(ms)
        made.set_default_timeout(ms)
        return made

    browser.new_context, browser.new_page = context, page
