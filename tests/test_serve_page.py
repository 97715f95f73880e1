"""The page at / in a real headless browser: Debian's chromium driven by Playwright (never `playwright install`)."""

from __future__ import annotations

import re
from typing import Any

from support.serve_server import Server

QUESTION = "what happens when I run ingest twice?"


def words(text: str) -> list[str]:
    """The words of a chunk as the page shows them: its Markdown rendered, so without link targets or marks."""
    text = re.sub(r"\]\([^)]*\)", "]", re.sub(r"(?m)^\s*(```|~~~)\S*", "", text))  # link targets, fence tags
    text = re.sub(r"(?m)^\s*(\d+[.)]|[-*+])\s+", "", text)  # list marks
    return re.findall(r"[A-Za-z0-9]+", text)


def test_search_shows_path_heading_and_text(browser: Any, server: Server):
    with server.client() as c:
        hits = c.post("/search", json={"query": QUESTION, "mode": "keyword", "k": 5}).json()["hits"]
    page = browser.new_page()
    page.goto(server.url + "/")
    page.fill("#key", server.key)
    page.dispatch_event("#key", "change")
    page.fill("#query", QUESTION)
    page.select_option("#mode", "keyword")
    page.fill("#k", "5")
    page.click("#search")
    page.wait_for_selector("#status.done, #status.error")
    items = page.locator("#results > li")
    assert items.count() == len(hits) > 0
    for i, hit in enumerate(hits):
        item = items.nth(i)
        assert item.get_attribute("data-chunk-id") == hit["chunk_id"]
        assert item.locator(".path").text_content() == hit["path"]
        assert item.locator(".heading").text_content() == hit["heading_path"]
        assert words(item.locator(".text").inner_text()) == words(hit["text"])
    # A wrong key says so on the page instead of failing silently.
    page.fill("#key", "wrong-key-0123456789abc")
    page.dispatch_event("#key", "change")
    page.click("#search")
    page.wait_for_selector("#status.error")
    assert "not valid" in page.text_content("#status")
    page.close()


def test_ask_streams_the_answer_and_a_citation_opens_its_chunk(browser: Any, server: Server):
    with server.client() as c:
        expected = c.post("/ask", json={"question": QUESTION}).json()
    page = browser.new_page()
    page.goto(server.url + "/")
    page.fill("#key", server.key)
    page.dispatch_event("#key", "change")
    page.fill("#query", QUESTION)
    page.click("#ask")
    page.wait_for_selector("#status.done, #status.error")  # (the page's CSP forbids eval)
    assert page.get_attribute("#status", "class") != "error", page.text_content("#status")
    shown = page.inner_text("#answer")
    assert words(shown) == words(expected["answer"])  # its Markdown rendered: no raw marks, no backticks
    assert "`" not in shown and "**" not in shown
    links = page.locator("#answer a.cite")
    assert expected["citations"], "the question is answered from the docs: the answer cites them"
    assert links.count() >= 1
    number = links.first.get_attribute("data-n")
    links.first.click()
    dialog = page.locator("#chunk")
    dialog.wait_for(state="visible")
    source = next(s for i, s in enumerate(expected["sources"]) if str(s.get("number", s.get("n", i + 1))) == number)
    hit = source.get("hit", source.get("chunk", source))
    assert words(page.inner_text("#chunk-text")) == words(hit["text"])
    assert hit["path"] in page.text_content("#chunk-path")
    # Each quoted sentence is highlighted inside its source, at its exact span.
    assert expected["quotes"], "the extractive answer quotes its sentences with their spans"
    first = expected["citations"][0]["number"]
    assert page.locator("#results > li").first.get_attribute("data-n") == str(first)  # the cited card first
    assert page.locator("#results > li .score").first.text_content().startswith("score ")
    assert page.text_content("#status").startswith("answered")
    assert page.request.get(server.url + "/favicon.ico").status == 200
    marked = " ".join(words(" ".join(m.text_content() for m in page.locator("#results li mark.quote").all())))
    for q in expected["quotes"]:
        s = next(s for s in expected["sources"] if s["chunk_id"] == q["chunk_id"])
        assert " ".join(words(s["text"][q["start"] - s["start"] : q["end"] - s["start"]])) in marked
    card = page.locator("#results > li").first.inner_text()  # the cited card's Markdown rendered, quote and all
    assert "```" not in card and "## " not in card
    page.close()


def test_a_quote_with_the_command_it_introduces_is_marked_in_the_rendered_card(browser: Any, server: Server):
    page = browser.new_page()
    page.goto(server.url + "/")
    page.fill("#key", server.key)
    page.dispatch_event("#key", "change")
    page.fill("#query", "how do I stop the embedded database?")
    page.click("#ask")
    page.wait_for_selector("#status.done, #status.error")
    assert "ragvps server stop" in page.locator("#answer pre").first.inner_text()  # the block rendered as code
    card = page.locator("#results > li").first
    assert card.get_attribute("data-n") == "1" and "```" not in card.inner_text() and "## " not in card.inner_text()
    marked = " ".join(m.text_content() for m in card.locator("mark.quote").all())
    assert "To stop it" in marked and "ragvps server stop" in marked
    page.close()
