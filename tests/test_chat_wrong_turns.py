"""The wrong turns a new user takes with a chat client (issue 31, item 7), each answered with what to do: a base
URL without /v1, /docs's "Try it out" as it is, a container calling the host as `host.docker.internal`, and an
MCP client without its key (the official SDKs' own clients, against the server in this process)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from support.asgi_server import InProcess

openai = pytest.importorskip("openai", reason="the openai SDK is a test dependency: pip install -e '.[test]'")


def sdk(server: InProcess, base_url: str, key: str | None = None) -> Any:
    return openai.OpenAI(
        base_url=base_url, api_key=key or server.key, max_retries=0, timeout=60, http_client=server.keyless()
    )


def test_a_base_url_without_v1_is_told_to_add_it(api: InProcess):
    bare = sdk(api, api.url)  # the base URL as a user types it, without /v1
    with pytest.raises(openai.NotFoundError) as chat:
        bare.chat.completions.create(model="ragvps", messages=[{"role": "user", "content": "hello"}])
    with pytest.raises(openai.NotFoundError) as models:
        bare.models.list()
    for raised in (chat.value, models.value):
        # the address this server was reached at, not a default port it may not listen on (issue 51)
        assert "under /v1" in raised.message and f"/v1 ({api.url}/v1)" in raised.message, raised.message
        assert "8765" not in raised.message or ":8765" in api.url
        assert raised.body["type"] == "invalid_request_error"  # OpenAI's shape, so the SDK reads the message
    with pytest.raises(openai.NotFoundError) as twice:  # the client adds /v1 to a URL that has it
        sdk(api, api.url + "/v1/v1").models.list()
    assert "ends in /v1 already" in twice.value.message
    with api.client() as c:  # any other path: the API's paths, /v1 and /api included
        other = c.get("/nothing-here").json()
    assert other["kind"] == "not_found" and "/v1" in other["error"] and "/api" in other["error"]


def test_the_docs_examples_work_as_they_are(api: InProcess):
    """What Swagger UI's "Try it out" sends (the media type's first example), sent as it is."""
    with api.client() as c:
        doc = c.get("/openapi.json").json()

        def example(path: str) -> dict[str, Any]:
            media = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
            return dict(next(iter(media["examples"].values()))["value"])

        search = example("/search")
        assert "meta" not in search and "meta" not in example("/ask")
        assert c.post("/search", json=search).json()["hits"]
        asked = c.post("/ask", json=example("/ask"))
        assert asked.status_code == 200 and asked.json()["answered"]
        chat = example("/v1/chat/completions")
        assert chat["model"] == "ragvps"
        done = c.post("/v1/chat/completions", json=chat)
        assert done.status_code == 200 and done.json()["choices"][0]["message"]["content"]
        assert c.post("/api/chat", json=example("/api/chat")).json()["done"] is True
        assert c.post("/api/show", json=example("/api/show")).status_code == 200


@pytest.mark.parametrize("name", ["host.docker.internal", "host.docker.internal:8765", "host.containers.internal"])
def test_a_container_may_call_a_loopback_server_by_its_hosts_name(api: InProcess, name: str):
    with api.client() as c:
        assert c.get("/v1/models", headers={"Host": name}).status_code == 200
        refused = c.get("/v1/models", headers={"Host": "rebind.example.com"})
    assert refused.status_code == 403 and "allowed_hosts" in refused.json()["error"]["message"]


def test_an_mcp_client_without_the_key_is_told_what_to_send(api: InProcess):
    pytest.importorskip("mcp", reason="the mcp extra is not installed: pip install '.[mcp]'")
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError

    async def connect(headers: dict[str, str]) -> str:
        async with (
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=api.asgi), headers=headers, timeout=60) as http,
            streamable_http_client(api.url + "/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            try:
                await session.initialize()
            except MCPError as exc:
                return str(exc)
            return "connected"

    missing = api.call(lambda: asyncio.wait_for(connect({}), 60))
    assert "HTTP 401" in missing and "send `Authorization: Bearer KEY`" in missing
    wrong = api.call(lambda: asyncio.wait_for(connect({"Authorization": "Bearer not-a-key"}), 60))
    assert "the API key is not valid" in wrong and "ragvps key create" in wrong
    assert api.call(lambda: asyncio.wait_for(connect(api.headers), 60)) == "connected"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_an_answer_longer_than_the_window_is_the_askers_400(api: InProcess, path: str):
    """What schemathesis sent once the docs' example reached the answer: max_tokens past the context window."""
    body: dict[str, Any] = {"model": "ragvps", "messages": [{"role": "user", "content": "how do I stop it?"}]}
    body |= {"max_tokens": 999_999} if path.startswith("/v1") else {"options": {"num_predict": 999_999}}
    with api.client() as c:
        for stream in (False, True):
            r = c.post(path, json=body | {"stream": stream})
            assert r.status_code == 400, r.text
            assert "max_tokens=999,999 leaves no room" in r.text and "context_window" in r.text
