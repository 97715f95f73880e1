"""The page with untrusted documents, its key storage, Enter and empty questions, its source numbers, and
/docs offline, in a real Chromium (Debian's, driven by Playwright). Screenshots at 1280 and 390 px go to
tests/output/screenshots/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.serve_server import REPO, Server, ragvps_env, ragvps_here

SHOTS = REPO / "tests" / "output" / "screenshots"
QUESTION = "what happens when I run ingest twice?"

UNTRUSTED = """# Untrusted notes

## Payloads

A script tag <script>window.pwned = "script"</script> stays text.
An image <img src=x onerror="window.pwned='img'"> stays text, and so does
<svg onload="window.pwned='svg'"></svg> this.
A [javascript link](javascript:window.pwned='link') and a [data link](data:text/html,hello) lose their
targets, a [good link](https://example.com/docs) keeps it, and ![tracker](https://tracker.example/pixel.png)
is never loaded.
Some `inline <b>code</b>` and **bold** text,
with a hard line break in the middle of the sentence.

```
<script>window.pwned = "fenced"</script>
```

- item one <b onmouseover="window.pwned='b'">hover</b>
- item two [x](JaVaScRiPt:window.pwned='case')
"""


@pytest.fixture(scope="module")
def untrusted_server(pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A keyless server over a database holding one document full of HTML and link payloads."""
    import psycopg

    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute('DROP DATABASE IF EXISTS "t_untrusted" WITH (FORCE)')
        conn.execute('CREATE DATABASE "t_untrusted"')
    url = re.sub(r"(postgres(?:ql)?://[^/]*/)([^?]*)", lambda m: m.group(1) + "t_untrusted", pg_admin_url, count=1)
    base = tmp_path_factory.mktemp("untrusted")
    (base / "docs").mkdir()
    (base / "docs" / "untrusted.md").write_text(UNTRUSTED)
    env = ragvps_env(url, base / "data")
    done = ragvps_here(env, "ingest", str(base / "docs"))  # the data only: the CLI in this process
    assert done.returncode == 0, done.stderr
    srv = Server(env, base / "serve.log", key=None).start()
    yield srv
    srv.stop()


def watched_page(browser: Any, port: int, **kwargs: Any) -> tuple[Any, dict[str, list[str]]]:
    """A page that may reach only 127.0.0.1:port; what it tried beyond, and any dialog, is recorded."""
    context = browser.new_context(**kwargs)
    seen: dict[str, list[str]] = {"outside": [], "dialogs": []}

    def route(r: Any) -> None:
        if re.match(rf"^https?://127\.0\.0\.1:{port}/", r.request.url):
            r.continue_()
        else:
            seen["outside"].append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    return page, seen


def test_untrusted_markdown_is_rendered_without_running_or_loading_anything(browser: Any, untrusted_server: Server):
    page, seen = watched_page(browser, untrusted_server.port)
    page.goto(untrusted_server.url + "/")
    page.fill("#query", "script image link payloads")
    page.select_option("#mode", "vector")
    page.click("#search")
    page.wait_for_selector("#status.done, #status.error")
    assert page.get_attribute("#status", "class") == "done", page.text_content("#status")
    results = page.locator("#results")
    results.locator("li").first.hover()
    assert page.evaluate("window.pwned") is None
    assert seen["dialogs"] == [] and seen["outside"] == [], seen
    # The payloads are shown as their own text, never as elements.
    for tag in ("script", "img", "svg", "b", "iframe"):
        assert results.locator(tag).count() == 0, tag
    text = results.text_content()
    for shown in (
        '<script>window.pwned = "script"</script>',
        "<img src=x onerror=",
        "<svg onload=",
        '<script>window.pwned = "fenced"</script>',
        "<b>code</b>",
        "tracker",
    ):
        assert shown in text, shown
    # Links keep only http(s) targets, opened without a referrer.
    hrefs = [a.get_attribute("href") for a in results.locator("a").all()]
    assert hrefs == ["https://example.com/docs"], hrefs
    assert results.locator("a").first.get_attribute("rel") == "noopener noreferrer nofollow"
    # Markdown, not raw marks: headings, code, emphasis, lists, and the source's hard line break joined.
    assert "##" not in text and "`" not in text and "**" not in text
    assert results.locator(".md-h").count() >= 1 and results.locator("pre code").count() == 1
    assert results.locator("p code").first.text_content() == "inline <b>code</b>"
    assert results.locator("strong").first.text_content() == "bold"
    assert results.locator("ul li").count() == 2
    assert "text, with a hard line break" in text
    # The page's policy would stop an injected script even if one got through.
    policy = page.evaluate("fetch('/').then(r => r.headers.get('content-security-policy'))")
    assert "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0] and "'sha256-" in policy
    page.context.close()


def test_the_key_is_kept_for_the_tab_unless_remembered(browser: Any, server: Server):
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.url + "/")
    page.fill("#key", server.key)
    page.dispatch_event("#key", "change")
    stored = "[sessionStorage.getItem('ragvps-key'), localStorage.getItem('ragvps-key')]"
    assert page.evaluate(stored) == [server.key, None]
    page.reload()  # a reload keeps the tab's key
    assert page.input_value("#key") == server.key and not page.is_checked("#remember")
    other = context.new_page()  # another tab (or the browser restarted) has none
    other.goto(server.url + "/")
    assert other.input_value("#key") == ""
    page.check("#remember")
    assert page.evaluate(stored) == [server.key, server.key]
    third = context.new_page()
    third.goto(server.url + "/")
    assert third.input_value("#key") == server.key and third.is_checked("#remember")
    third.uncheck("#remember")
    assert third.evaluate(stored) == [server.key, None]
    context.close()


def test_enter_asks_sources_carry_their_numbers_and_an_empty_question_clears(browser: Any, server: Server):
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 900), (390, 844)):
        page, seen = watched_page(browser, server.port, viewport={"width": width, "height": height})
        page.goto(server.url + "/")
        assert page.get_attribute("#query", "placeholder") == "Ask your documents a question"
        page.fill("#key", server.key)
        page.dispatch_event("#key", "change")
        page.fill("#query", QUESTION)
        page.press("#query", "Enter")
        page.wait_for_selector("#status.done, #status.error")
        assert page.get_attribute("#status", "class") == "done", page.text_content("#status")
        assert page.text_content("#answer").strip()
        cards = page.locator("#results > li")
        assert cards.count() >= 1
        for i in range(cards.count()):
            n = cards.nth(i).get_attribute("data-n")
            assert cards.nth(i).locator(".n").text_content() == f"[{n}]"
        cited = page.locator("#answer a.cite")
        if cited.count():
            n = cited.first.get_attribute("data-n")
            assert page.locator(f"#results > li[data-n='{n}'] .n").text_content() == f"[{n}]"
        page.screenshot(path=str(SHOTS / f"answer-{width}.png"), full_page=True)
        width_used = page.evaluate("document.documentElement.scrollWidth")
        assert width_used <= width, f"the page scrolls sideways at {width} px ({width_used} px wide)"
        page.fill("#query", "")
        page.press("#query", "Enter")
        assert page.text_content("#answer") == "" and page.locator("#results > li").count() == 0
        assert page.text_content("#status") == ""
        assert seen["outside"] == [], seen
        page.context.close()


def test_docs_work_offline_and_send_the_key(browser: Any, server: Server):
    page, seen = watched_page(browser, server.port, viewport={"width": 1280, "height": 900})
    page.goto(server.url + "/docs")
    page.wait_for_selector(".opblock-summary-path")
    paths = {p.text_content() for p in page.locator(".opblock-summary-path").all()}
    assert {"/search", "/ask", "/health", "/stats"} <= {p.replace("\u200b", "") for p in paths}
    assert seen["outside"] == [], seen  # every asset came from the server itself
    # Authorize with the key, then "Try it out" on /stats: the key is sent, the answer is 200.
    page.click("button.authorize")
    page.locator(".auth-container input").first.fill(server.key)
    page.locator(".auth-container button.authorize").first.click()
    page.click(".modal-ux button.close-modal")
    page.click("#operations-default-stats_stats_get .opblock-summary")
    with page.expect_response(lambda r: r.url.endswith("/stats")) as answer:
        page.click("#operations-default-stats_stats_get button.try-out__btn")
        page.click("#operations-default-stats_stats_get button.execute")
    assert answer.value.status == 200
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "docs-1280.png"))
    assert seen["outside"] == [], seen
    page.context.close()
