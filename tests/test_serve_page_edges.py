"""The page's rough edges from issue 43, in a real headless browser (Debian's chromium through Playwright) against
a real `ragvps serve` with a key and two knowledge bases: the key's error goes once the key is accepted, "choose
files" shows once, the last upload's panel goes with its knowledge base, and Markdown tables render as tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.serve_server import KEY, Server, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

TABLE = (
    "# Ports\n\nThe ports each service listens on are these.\n\n| service | port |\n|---|---|\n"
    "| gazebo | 7411 |\n| pergola | 7412 |\n"
)


@pytest.fixture(scope="module")
def own_server(new_database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp_path = tmp_path_factory.mktemp("page-edges")
    env = ragvps_env(new_database("page_edges"), tmp_path / "data")
    run = {k: v for k, v in env.items() if k.startswith("RAGVPS_")}
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "ports.md").write_text(TABLE)
    for args in (["ingest", str(tmp_path / "seed")], ["kb", "create", "faq"]):
        done = CliRunner().invoke(cli_app, args, env=run, catch_exceptions=False)
        assert done.exit_code == 0, done.output
    srv = Server(env | {"RAGVPS_API_KEYS": KEY}, tmp_path / "serve.log").start()
    yield srv
    srv.stop()


def opened(browser: Any, server: Server) -> Any:
    page = browser.new_page()
    page.goto(server.url + "/")
    return page


def test_the_keys_error_goes_once_the_key_is_accepted(browser: Any, own_server: Server):
    page = opened(browser, own_server)
    page.fill("#query", "gazebo port")
    page.click("#search")
    page.wait_for_selector("#status.error")
    page.fill("#key", own_server.key)
    page.dispatch_event("#key", "change")
    page.wait_for_function("() => !document.getElementById('kb').hidden")  # the key read the knowledge bases
    assert page.get_attribute("#status", "class") != "error" and page.text_content("#status") == ""


def test_choose_files_shows_once_and_still_picks_files(browser: Any, own_server: Server):
    page = opened(browser, own_server)
    assert page.locator("#files").is_hidden()  # the browser's own "Choose files" button is not shown beside it
    assert page.get_by_text("choose files").count() == 1 and page.locator("#pick").is_visible()
    with page.expect_file_chooser() as chooser:
        page.click("#pick")
    assert chooser.value.is_multiple()


def test_the_last_uploads_panel_goes_when_the_knowledge_base_changes(browser: Any, own_server: Server):
    page = opened(browser, own_server)
    page.fill("#key", own_server.key)
    page.dispatch_event("#key", "change")
    page.wait_for_function("() => document.getElementById('drop-kb').textContent === 'default'")
    page.set_input_files(
        "#files",
        files=[
            {
                "name": "arbour.md",
                "mimeType": "text/markdown",
                "buffer": b"# Arbour\n\nThe arbour stands by the east gate.\n",
            }
        ],
    )
    page.wait_for_selector("#upload[data-state=done], #upload[data-state=error]")
    assert page.locator("#upload").is_visible() and page.locator("#upload-cancel").is_visible()
    page.select_option("#kb", "faq")
    assert page.locator("#upload").is_hidden() and page.locator("#upload-cancel").is_hidden()
    assert page.text_content("#drop-kb") == "faq"


def test_a_markdown_table_renders_as_a_table(browser: Any, own_server: Server):
    page = opened(browser, own_server)
    page.fill("#key", own_server.key)
    page.dispatch_event("#key", "change")
    page.fill("#query", "which port does the gazebo listen on")
    page.select_option("#mode", "keyword")
    page.click("#search")
    page.wait_for_selector("#status.done, #status.error")
    card = page.locator("#results > li").first
    assert card.locator("table th").all_text_contents() == ["service", "port"]
    assert card.locator("table tr").count() == 3 and "7411" in card.locator("table td").all_text_contents()
    assert "|---|" not in card.text_content()
