"""The page's documents panel in a real headless browser (Debian's chromium through Playwright) against a real
`ragvps serve`: files dropped on it are uploaded into the selected knowledge base, the bar follows the job's
Server-Sent Events to its end, a broken file says why by name while the good one is stored, and a document
listed can be deleted; cancel stops an upload, and the files stored before stay."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support import waiting
from support.serve_server import KEY, Server, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app


@pytest.fixture(scope="module")
def own_server(new_database, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for both tests: each looks only at its own files (wombats.md; crate-*.md) beside the seed."""
    tmp_path = tmp_path_factory.mktemp("page-upload")
    env = ragvps_env(new_database("page_upload"), tmp_path / "data", upload_batch_files="8")
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "seed.md").write_text("# Seed\n\nThe seed page keeps the server ready.\n")
    done = CliRunner().invoke(
        cli_app,
        ["ingest", str(tmp_path / "seed")],
        env={k: v for k, v in env.items() if k.startswith("RAGVPS_")},
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    srv = Server(env | {"RAGVPS_API_KEYS": KEY}, tmp_path / "serve.log").start()
    yield srv
    srv.stop()


DROP = """() => {
  const dt = new DataTransfer();
  dt.items.add(new File(["# Wombats\\n\\nWombats dig long burrows with their strong claws.\\n"], "wombats.md",
                        {type: "text/markdown"}));
  dt.items.add(new File(["PK this is not really a Word file"], "broken.docx"));
  return dt;
}"""


def test_dropped_files_upload_with_progress_errors_by_name_and_a_listed_document_deletes(
    browser: Any, own_server: Server
):
    page = browser.new_page()
    page.goto(own_server.url + "/")
    page.fill("#key", own_server.key)
    page.dispatch_event("#key", "change")
    page.wait_for_function("() => document.getElementById('drop-kb').textContent === 'default'")
    page.dispatch_event("#drop", "drop", {"dataTransfer": page.evaluate_handle(DROP)})
    page.wait_for_selector("#upload[data-state=done], #upload[data-state=error]")
    assert page.get_attribute("#upload", "data-state") == "done", page.text_content("#upload-text")
    value, maximum = page.eval_on_selector("#upload-bar", "b => [b.value, b.max]")
    assert value == maximum > 1  # every byte accounted for
    assert "2 of 2 files" in page.text_content("#upload-text") and "1 failed" in page.text_content("#upload-text")
    broken = page.text_content("#upload-files li[data-name='broken.docx']")
    assert "failed" in broken and "broken.docx:" in broken  # why, naming the file
    assert "done" in page.text_content("#upload-files li[data-name='wombats.md']")
    with own_server.client() as c:
        hits = c.post("/search", json={"query": "wombat burrows claws", "k": 1}).json()["hits"]
    assert hits[0]["path"] == "wombats.md"

    page.click("#doclist summary")
    row = page.locator("#documents li[data-path='wombats.md']")
    row.wait_for()
    assert "markdown" in row.text_content() and "embedded" in row.text_content()
    row.locator("button").click()
    row.wait_for(state="detached")
    with own_server.client() as c:
        paths = [d["path"] for d in c.get("/kb/default/documents").json()["documents"]]
    assert "wombats.md" not in paths and "seed.md" in paths
    page.close()


# Enough work after the first batch (8 files) that a cancel always lands before the end on a fast machine too:
# 9,000 chunks (30 a file) to embed, where the cancel is seen within about 2 s (the progress stream's 0.5 s, the
# worker's heartbeat); the test's time is the first batch's only, as the rest is never embedded.
FILES = 300
MANY = """() => {
  const dt = new DataTransfer();
  for (let i = 0; i < FILES; i++) {
    let text = "# Crate " + i + "\\n\\n";
    for (let j = 0; j < 30; j++) text += "## Shelf " + j + "\\n\\nCrate " + i + " holds " + (i * 7 + j) +
      " widgets on shelf " + j + ", checked by the night shift in aisle " + (i % 9) + " against the ledger of " +
      "bay " + (i * 13 + j) % 97 + ", where the forklift logs " + (i + j * 31) + " moves before the morning.\\n\\n";
    dt.items.add(new File([text], "crate-" + String(i).padStart(3, "0") + ".md", {type: "text/markdown"}));
  }
  return dt;
}""".replace("FILES", str(FILES))


def test_cancel_stops_the_upload_and_the_files_stored_stay(browser: Any, own_server: Server):
    page = browser.new_page()
    page.goto(own_server.url + "/")
    page.fill("#key", own_server.key)
    page.dispatch_event("#key", "change")
    page.wait_for_function("() => document.getElementById('drop-kb').textContent === 'default'")
    page.dispatch_event("#drop", "drop", {"dataTransfer": page.evaluate_handle(MANY)})
    page.wait_for_selector("#upload-files li.done", timeout=waiting.seconds(120) * 1000)  # a first batch is stored
    page.click("#upload-cancel")
    page.wait_for_selector(
        "#upload[data-state=cancelled], #upload[data-state=done], #upload[data-state=error]",
        timeout=waiting.seconds(120) * 1000,
    )
    text = page.text_content("#upload-text")
    assert page.get_attribute("#upload", "data-state") == "cancelled", text
    done = page.locator("#upload-files li.done").count()
    assert 0 < done < FILES and page.locator("#upload-files li.cancelled").count() == FILES - done, text
    assert text.startswith(f"cancelled: {done} of {FILES} files stored"), text
    with own_server.client() as c:
        listed = [d["path"] for d in c.get("/kb/default/documents", params={"limit": 1000}).json()["documents"]]
    assert sorted(p for p in listed if p.startswith("crate-")) == sorted(
        page.eval_on_selector_all("#upload-files li.done", "ls => ls.map((l) => l.dataset.name)")
    )
    page.close()
