"""Sign-in through a real OpenID Connect provider (oidc-provider-mock) and a real `ragvps serve` process: the page's
redirect flow in Chromium (authorization code + PKCE, the session cookie, sign-out through the provider), a group
change that takes effect at the next sign-in, and a reverse proxy's user headers, honoured only from the address in
trusted_proxies (the client's source address is what a socket shows, so this needs the real server)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support import waiting
from support.oidc_provider import mock_provider, set_user, two_teams
from support.serve_server import KEY, Server, ragvps_here

pytestmark = pytest.mark.xdist_group("auth-signin")


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with mock_provider() as url:
        yield url


@pytest.fixture(scope="module")
def served(module_db_url: str, tmp_path_factory: pytest.TempPathFactory, issuer: str) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("signin")
    env = two_teams(module_db_url, root)
    env |= {
        "RAGVPS_API_KEYS": KEY,
        "RAGVPS_OIDC_ISSUER": issuer,
        "RAGVPS_OIDC_CLIENT_ID": "ragvps",
        "RAGVPS_OIDC_CLIENT_SECRET": "client-secret-for-tests",
        "RAGVPS_GROUP_ROLES": "eng=docs:read,people=hr:read",
        "RAGVPS_TRUSTED_PROXIES": "127.0.0.2/32",
        "RAGVPS_PROXY_GROUPS_HEADER": "X-Forwarded-Groups",
    }
    srv = Server(env, root / "serve.log").start()
    yield srv
    srv.stop()


def sign_in(page: Any, served: Server, sub: str) -> None:
    page.goto(served.url + "/")
    page.get_by_role("link", name="Sign in").click()
    page.wait_for_url("**/oauth2/authorize**")
    page.locator("input[name=sub]").fill(sub)
    page.get_by_role("button", name="Authorize").click()
    page.wait_for_url(served.url + "/")
    # a locator, not wait_for_function: the page's CSP forbids eval, which a polled string predicate needs
    page.locator("#who", has_text="Signed in").wait_for()


def knowledge_bases(page: Any) -> list[str]:
    page.wait_for_timeout(300)
    return sorted(page.eval_on_selector_all("#kb option", "options => options.map(o => o.textContent)"))


def test_the_page_signs_in_through_the_provider_and_searches_what_the_groups_allow(
    browser: Any, served: Server, issuer: str
):
    set_user(issuer, "alice", groups=["eng"])
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, served, "alice")
    assert page.locator("#who").inner_text() == "Signed in as alice@example.org"
    assert page.locator("#keyrow").is_hidden()  # no key needed once signed in
    cookie = next(c for c in context.cookies() if c["name"] == "ragvps_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert knowledge_bases(page) == ["docs"]
    page.fill("#query", "how do I roll back a release?")
    page.click("#search")
    page.wait_for_selector("[data-testid=results] li")
    assert "docs.md" in page.locator("[data-testid=results]").inner_text()

    # a group change at the provider takes effect at the next sign-in, not before
    set_user(issuer, "alice", groups=["eng", "people"])
    page.reload()
    assert knowledge_bases(page) == ["docs"]
    page.get_by_role("link", name="Sign out").click()
    page.get_by_role("button", name="End session").click()  # the provider's own end-session page
    page.wait_for_url(served.url + "/")
    page.locator("#signin").wait_for(state="visible")
    assert not any(c["name"] == "ragvps_session" for c in context.cookies())
    sign_in(page, served, "alice")
    assert knowledge_bases(page) == ["docs", "hr"]
    context.close()


def test_a_user_whose_groups_map_to_nothing_sees_why(browser: Any, served: Server, issuer: str):
    set_user(issuer, "mallory", groups=["sales"])
    context = browser.new_context()
    page = context.new_page()
    sign_in(page, served, "mallory")
    page.wait_for_selector("#status.error")
    assert "none of this user's groups" in page.locator("#status").inner_text()
    context.close()


def test_a_forged_or_altered_session_cookie_is_refused(served: Server):
    with httpx.Client(base_url=served.url, timeout=30) as c:
        for value in ("eyJzdWIiOiJhZG1pbiJ9.AAAA", "garbage", ""):
            c.cookies.set("ragvps_session", value)
            assert c.get("/kb").status_code == 401


def test_proxy_headers_count_only_from_the_trusted_address(served: Server):
    headers = {"Remote-User": "pat", "X-Forwarded-Groups": "people", "Remote-Email": "pat@example.org"}
    trusted = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=served.url, transport=trusted, headers=headers, timeout=30) as c:
        assert [kb["name"] for kb in c.get("/kb").json()["knowledge_bases"]] == ["hr"]
        assert c.post("/kb/hr/search", json={"query": "paid leave"}).json()["hits"][0]["path"] == "hr.md"
        assert c.post("/kb/docs/search", json={"query": "roll back"}).status_code == 404
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as c:  # from 127.0.0.1: not trusted
        for _ in range(3):
            assert c.get("/kb").status_code == 401
    deadline = waiting.deadline(5)
    while "not in trusted_proxies" not in served.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert served.log.read_text().count("ignored the user headers from 127.0.0.1") == 1  # logged once
    users = ragvps_here(served.env, "users")
    assert "pat@example.org" in users.stdout and "proxy" in users.stdout and "people" in users.stdout
