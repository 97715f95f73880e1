"""A real Open WebUI (pip `open-webui` in its own virtual environment: too big for the test extras) against a real
`ragvps serve`, driven in Chromium: the model picked, a question asked, the answer shown with a source's name, a
title generated for the chat and follow-ups offered, one of them asked. Slow (Open WebUI starts in about a
minute); skipped, saying why, where Open WebUI or Chromium is not installed.

    python -m venv ../owui-venv && ../owui-venv/bin/pip install open-webui==0.12.4   # about 4 minutes, 7 GB
    python -m pytest -m slow tests/test_open_webui.py     # or OPEN_WEBUI=/path/to/bin/open-webui
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support import waiting
from support.browser import chromium, playwright
from support.open_webui import open_webui as started
from support.serve_server import Server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def open_webui(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    playwright()  # skipped before Open WebUI starts where chromium or Playwright is missing
    settings = {"WEBUI_AUTH": "False", "OPENAI_API_BASE_URL": server.url + "/v1", "OPENAI_API_KEY": server.key}
    with started(tmp_path_factory.mktemp("open-webui"), **settings) as url:
        yield url


@pytest.fixture(scope="module")
def page(open_webui: str) -> Iterator[Any]:
    with chromium() as browser:
        yield browser.new_page()


def test_a_question_in_open_webui_is_answered_with_its_source_a_title_and_follow_ups(page: Any, open_webui: str):
    page.goto(open_webui + "/")
    page.wait_for_selector("#chat-input")
    welcome = page.get_by_text("Okay, Let's Go!")  # the release notes shown on a first visit
    if welcome.count():
        welcome.click()
    picked = page.locator("button[aria-label*='model' i]").first  # the model selector
    assert "ragvps" in picked.inner_text()  # the one model, the server's knowledge base
    page.click("#chat-input")
    page.keyboard.type("How do I stop the embedded database?")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => document.body.innerText.includes('embedded-database.md')", timeout=waiting.seconds(120) * 1000
    )
    assert "ragvps server stop" in page.locator("body").inner_text()
    # the title task: the chat is named from the question, not "New Chat"
    page.wait_for_function("() => document.body.innerText.includes('Stop Embedded Database')")
    # the follow-up task: questions offered under the answer; one asked is answered with its sources too
    page.wait_for_function("() => document.body.innerText.includes('Follow up')")
    offered = page.get_by_text("What about", exact=False).first
    question = offered.inner_text().strip()
    offered.click()
    if page.locator("#chat-input").inner_text().strip():  # some releases put it in the input first
        page.keyboard.press("Enter")
    page.wait_for_function(
        "q => document.body.innerText.split(q).length > 2", arg=question, timeout=waiting.seconds(120) * 1000
    )
    page.wait_for_function(
        "() => document.body.innerText.split('Sources').length > 2", timeout=waiting.seconds(120) * 1000
    )
