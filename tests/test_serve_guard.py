"""What a browser must not make the server do: answer under a rebinding name, or take another site's POST.

The rules are checked on their own (pure functions), over a keyless server on loopback in this process (the
case the issue found: it answered `Host: attacker.example:9000` with data), and in a real Chromium that resolves
a rebinding name to 127.0.0.1, over a real `ragvps serve`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from support.asgi_server import InProcess, in_process
from support.browser import chromium
from support.serve_server import Server, free_port

from ragvps.serve.gate.guard import HostRule, origin_allowed

QUESTION = "what happens when I run ingest twice?"


def forbidden(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 403, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    if r.request.url.path == "/mcp":  # a JSON-RPC error there, which the mcp SDK's client shows
        assert body["jsonrpc"] == "2.0" and body["error"]["data"]["kind"] == "forbidden", body
        body = {"error": body["error"]["message"], "kind": "forbidden"}
    assert set(body) == {"error", "kind"} and body["kind"] == "forbidden", body
    for word in words:
        assert word in body["error"], body


# --- the rules ----------------------------------------------------------------------------------------


def test_host_rule_on_loopback_answers_to_loopback_names_and_allowed_hosts():
    rule = HostRule("127.0.0.1", ())
    for host in ("127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "127.0.0.2", "localhost."):
        assert rule.allows(host), host
    for host in (
        "attacker.example:9000",
        "attacker.example",
        "127.0.0.1.nip.io:8765",
        "localhost.evil:8765",
        "0.0.0.0:8765",
        "192.168.1.5:8765",
        "",
        ":8765",
    ):
        assert not rule.allows(host), host
    proxied = HostRule("127.0.0.1", ("rag.example.com", "*.corp.example", "api.example:8443"))
    assert proxied.allows("rag.example.com") and proxied.allows("RAG.example.com:443")
    assert proxied.allows("a.corp.example") and not proxied.allows("corp.example.evil")
    assert proxied.allows("api.example:8443") and not proxied.allows("api.example:9000")
    assert not proxied.allows("attacker.example") and proxied.allows("localhost:1")
    assert HostRule("127.0.0.1", ("*",)).allows("anything.example")


def test_host_rule_beyond_loopback_answers_to_any_name_unless_told():
    assert HostRule("0.0.0.0", ()).allows("203.0.113.7:8765")  # keys are required there; any name reaches it
    told = HostRule("0.0.0.0", ("rag.example.com",))
    assert told.allows("rag.example.com") and told.allows("localhost") and not told.allows("203.0.113.7")


def test_origin_rule_is_the_servers_own_origin_or_a_listed_one():
    assert origin_allowed("http://127.0.0.1:8765", "127.0.0.1:8765", ())
    assert origin_allowed("https://rag.example.com", "rag.example.com", ())
    assert origin_allowed("https://rag.example.com", "rag.example.com:443", ())
    assert origin_allowed("https://app.example/", "127.0.0.1:8765", ("https://app.example",))
    for origin, host in (
        ("http://127.0.0.1:9999", "127.0.0.1:8765"),
        ("http://attacker.example", "127.0.0.1:8765"),
        ("null", "127.0.0.1:8765"),
        ("http://localhost:8765", "127.0.0.1:8765"),
        ("file://", "127.0.0.1:8765"),
        ("http://127.0.0.1:8765", ""),
        ("http://rag.example.com", "rag.example.com:443"),
    ):
        assert not origin_allowed(origin, host, ("https://app.example",)), (origin, host)


# --- a keyless server on loopback ---------------------------------------------------------------------

# Behind a proxy named rag.example.com, whose app is at app.example.
OPEN = {"RAGVPS_ALLOWED_HOSTS": "rag.example.com", "RAGVPS_CORS_ORIGINS": "https://app.example"}


@pytest.fixture(scope="module")
def open_api(serve_env: dict[str, str]) -> Iterator[InProcess]:
    """The keyless server on 127.0.0.1, in this process."""
    with in_process(serve_env | OPEN) as srv:
        yield srv


@pytest.fixture(scope="module")
def open_server(serve_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The same as a real `ragvps serve` process, for the browser."""
    srv = Server(serve_env | OPEN, tmp_path_factory.mktemp("guard") / "serve.log", key=None).start()
    yield srv
    srv.stop()


def test_a_rebinding_name_gets_no_data_on_any_route(open_api: InProcess):
    bad = {"Host": f"attacker.example:{open_api.port}"}
    mcp_init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    with open_api.keyless() as c:
        assert c.post("/search", json={"query": QUESTION}).status_code == 200  # keyless: loopback is open
        forbidden(c.post("/search", json={"query": QUESTION}, headers=bad), "allowed_hosts", "attacker.example")
        forbidden(c.post("/ask", json={"question": QUESTION}, headers=bad))
        for path in ("/health", "/stats", "/", "/docs", "/openapi.json", "/nowhere"):
            forbidden(c.get(path, headers=bad))
        refused = c.get("/v1/models", headers=bad)  # /v1/* answers in OpenAI's error shape, for its SDK
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error", refused.text
        assert "allowed_hosts" in refused.json()["error"]["message"]
        forbidden(c.post("/mcp", json=mcp_init, headers=bad | {"Accept": "application/json, text/event-stream"}))
        ok = c.post("/mcp", json=mcp_init, headers={"Accept": "application/json, text/event-stream"})
        assert ok.status_code == 200, ok.text
        # The proxy's public name, set in allowed_hosts, is answered.
        assert c.get("/health", headers={"Host": "rag.example.com"}).status_code == 200
        assert c.post("/search", json={"query": QUESTION}, headers={"Host": "rag.example.com:443"}).status_code == 200


def test_a_browsers_post_from_another_origin_is_refused(open_api: InProcess):
    own = {"Origin": open_api.url}
    with open_api.keyless() as c:
        assert c.post("/search", json={"query": QUESTION}, headers=own).status_code == 200
        assert (
            c.post("/search", json={"query": QUESTION}, headers={"Origin": "https://app.example"}).status_code == 200
        )  # in cors_origins
        for origin in ("http://attacker.example", "null", f"http://127.0.0.1:{open_api.port + 1}"):
            forbidden(c.post("/search", json={"query": QUESTION}, headers={"Origin": origin}), "cors_origins")
            forbidden(
                c.post("/ask", content=b'{"question": "x"}', headers={"Origin": origin, "Content-Type": "text/plain"})
            )
            forbidden(c.post("/mcp", json={}, headers={"Origin": origin}))
        # A GET from another page is not refused by the Origin rule (it cannot read the answer without CORS).
        assert c.get("/health", headers={"Origin": "http://attacker.example"}).status_code == 200


# --- the same in a real browser -----------------------------------------------------------------------


class _AttackerPage(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        html = f"""<!doctype html><body><pre id="out">pending</pre><script>
        fetch("{self.target}/search", {{method: "POST", body: JSON.stringify({{query: "ingest"}}),
               headers: {{"Content-Type": "text/plain"}}, mode: "no-cors"}})
          .then(() => document.getElementById("out").textContent = "sent")
          .catch((e) => document.getElementById("out").textContent = "failed " + e);
        </script></body>"""
        data = html.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def rebinding_browser() -> Iterator[Any]:
    # attacker.example resolves to this machine, as a rebinding DNS server would make it.
    with chromium("--host-resolver-rules=MAP attacker.example 127.0.0.1") as b:
        yield b


def test_in_chromium_a_rebound_page_reads_nothing_and_a_foreign_page_posts_nothing(
    rebinding_browser: Any, open_server: Server
):
    page = rebinding_browser.new_page()
    # DNS rebinding: the attacker's name now points at the server, so its page is same-origin with it.
    response = page.goto(f"http://attacker.example:{open_server.port}/")
    assert response.status == 403 and "DNS rebinding" in page.content()
    page.close()
    # A foreign page (another port is another origin) fires a simple POST at the server: refused before work.
    _AttackerPage.target = open_server.url
    attacker = ThreadingHTTPServer(("127.0.0.1", free_port()), _AttackerPage)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        page = rebinding_browser.new_page()
        statuses: list[int] = []
        page.on("response", lambda r: statuses.append(r.status) if r.url.endswith("/search") else None)
        page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/")
        page.wait_for_function("document.getElementById('out').textContent !== 'pending'")
        page.wait_for_timeout(300)
        assert statuses == [403], statuses
        page.close()
    finally:
        attacker.shutdown()
    log = open_server.log.read_text()
    assert "POST /search 403 " in log  # the request log's line
