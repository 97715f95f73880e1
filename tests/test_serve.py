"""`ragvps serve` over a real database with the docs ingested, the real model, and the real CLI to compare
against: the routes, keys, limits and errors in this process (`api`, tests/support/asgi_server.py), what needs a process
(its log, its exit at start) with a real server process."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.asgi_server import InProcess, in_process
from support.serve_server import KEY, SECOND_KEY, Server, free_port, ragvps, ragvps_env, ragvps_here

REPO = Path(__file__).resolve().parents[1]
QUESTION = "what happens when I run ingest twice?"


@pytest.fixture(scope="module")
def env(serve_env: dict[str, str]) -> dict[str, str]:
    return serve_env


def no_traceback(r: httpx.Response) -> None:
    assert "Traceback" not in r.text and 'File "' not in r.text


def error_of(r: httpx.Response, status: int, kind: str) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert set(body) == {"error", "kind"} and body["kind"] == kind, body
    no_traceback(r)
    return str(body["error"])


# --- what it answers ----------------------------------------------------------------------------------


def test_health_is_open_and_names_the_model_its_dimension_and_the_chunks(api: InProcess, env: dict[str, str]):
    with api.keyless() as anon:
        r = anon.get("/health")
    assert r.status_code == 200, r.text
    health = r.json()
    assert health["status"] == "ok"
    assert health["model"] == "all-MiniLM-L6-v2-int8" and health["dims"] == 384
    stats = json.loads(ragvps_here(env, "stats", "--json").stdout)
    assert health["chunks"] == stats["rows"]["chunks"] > 0
    with api.client() as c:
        served = c.get("/stats").json()
    assert served["rows"] == stats["rows"] and served["embedding_set"] == stats["embedding_set"]


def test_search_over_http_matches_the_cli(api: InProcess, env: dict[str, str]):
    for body, flags in (
        ({"query": QUESTION}, []),
        ({"query": QUESTION, "k": 3, "mode": "keyword"}, ["--k", "3", "--mode", "keyword"]),
        (
            {"query": "embedded server", "mode": "vector", "path_prefix": "embedded"},
            ["--mode", "vector", "--path-prefix", "embedded"],
        ),
    ):
        with api.client() as c:
            r = c.post("/search", json=body)
        assert r.status_code == 200, r.text
        done = ragvps_here(env, "query", body["query"], "--json", *flags)
        assert done.returncode == 0, done.stderr
        cli = json.loads(done.stdout)
        cli_hits = cli["hits"] if isinstance(cli, dict) else cli
        http_hits = r.json()["hits"]
        assert http_hits, body
        assert [h["chunk_id"] for h in http_hits] == [h["chunk_id"] for h in cli_hits]
        for ours, theirs in zip(http_hits, cli_hits, strict=True):
            assert set(ours) == set(theirs)
            for key, value in theirs.items():
                if isinstance(value, float):
                    assert ours[key] == pytest.approx(value, rel=1e-6), key
                else:
                    assert ours[key] == value, key
        if "path_prefix" in body:
            assert all(h["path"].startswith("embedded") for h in http_hits)


def test_stats_need_the_key_and_the_api_description_does_not(api: InProcess):
    anon = api.keyless()
    assert anon.get("/stats").status_code == 401
    with api.client() as c:
        assert c.get("/stats").status_code == 200
    # The OpenAPI document and /docs describe the API and hold no data: a browser must load them keyless.
    for path in ("/openapi.json", "/docs", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"):
        assert anon.get(path).status_code == 200, path
    with api.client() as c:
        error_of(c.get("/docs/assets/__init__.py"), 404, "not_found")  # only the UI's own assets are served
    doc = anon.get("/openapi.json").json()
    assert {"/health", "/search", "/ask", "/stats"} <= set(doc["paths"])
    assert "422" not in json.dumps(doc["paths"]), "validation errors are documented as they are sent: 400"
    # The key scheme is declared, so the page's Authorize button sends the key with "Try it out".
    schemes = doc["components"]["securitySchemes"]
    assert schemes["bearer"] == {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer KEY`"}
    assert schemes["apiKey"]["in"] == "header" and schemes["apiKey"]["name"] == "X-API-Key"
    assert doc["paths"]["/search"]["post"]["security"] == [{"bearer": []}, {"apiKey": []}]
    assert doc["paths"]["/health"]["get"]["security"] == []


def test_the_page_is_served_at_root_without_a_cdn(api: InProcess):
    r = api.keyless().get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "<script" in r.text and not re.search(r"""(src|href)=["']https?://""", r.text)


# --- keys ---------------------------------------------------------------------------------------------


def test_keys_are_required_and_wrong_ones_refused(api: InProcess):
    body = {"query": QUESTION}
    anon = api.keyless()
    message = error_of(anon.post("/search", json=body), 401, "unauthorized")
    assert "Authorization: Bearer" in message
    for headers in (
        {"Authorization": "Bearer wrong-key-0123456789abc"},
        {"X-API-Key": KEY + "x"},
        {"Authorization": KEY},
        {"Authorization": "Basic " + KEY},
    ):
        r = anon.post("/search", json=body, headers=headers)
        error_of(r, 401, "unauthorized")
        assert KEY not in r.text
    for headers in (
        {"Authorization": f"Bearer {KEY}"},
        {"authorization": f"bearer {KEY}"},
        {"X-API-Key": KEY},
        {"X-API-Key": SECOND_KEY},
    ):
        assert anon.post("/search", json=body, headers=headers).status_code == 200, headers


def test_keys_never_reach_the_log(server: Server):
    httpx.post(server.url + "/search", json={"query": QUESTION}, headers={"X-API-Key": "wrong-key-abcdef012345"})
    httpx.post(server.url + "/search", json={"query": QUESTION}, headers={"X-API-Key": KEY})
    log = server.log.read_text()
    assert "POST /search" in log  # the access log is on
    for secret in (KEY, SECOND_KEY, "wrong-key-abcdef012345"):
        assert secret not in log


def test_no_cors_headers_unless_origins_are_set(api: InProcess):
    r = api.keyless().options(
        "/search", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    )
    assert "access-control-allow-origin" not in r.headers
    with api.client() as c:
        r = c.post("/search", json={"query": QUESTION}, headers={"Origin": "https://evil.example"})
    # Another site's page may not post here, even with a key (a browser sends its Origin on every POST).
    assert "cors_origins" in error_of(r, 403, "forbidden")
    assert "access-control-allow-origin" not in r.headers


def test_serve_refuses_a_public_address_without_a_key(env: dict[str, str]):
    for host in ("0.0.0.0", "::", "192.0.2.10"):
        done = ragvps(env, "serve", "--host", host, "--port", str(free_port()), timeout=60)
        assert done.returncode == 2, (host, done.stdout, done.stderr)
        assert "without an API key" in done.stderr and "RAGVPS_API_KEYS" in done.stderr
        assert "Traceback" not in done.stderr


# --- limits and errors --------------------------------------------------------------------------------


def test_oversized_bodies_get_413_json(api: InProcess):
    big = {"query": "word " * 20_000}
    with api.client() as c:
        error_of(c.post("/search", json=big), 413, "too_long")

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"query": "'
            for _ in range(100):
                yield b"a" * 1000
            yield b'"}'

        error_of(c.post("/search", content=chunks(), headers={"Content-Type": "application/json"}), 413, "too_long")


def test_malformed_and_invalid_bodies_get_400_json(api: InProcess):
    cases = [
        b"{not json",
        b"[1, 2]",
        b"null",
        b'{"query": 5}',
        b'{"query": "x", "k": 0}',
        b'{"query": "x", "k": 100000}',
        b'{"query": "x", "mode": "fuzzy"}',
        b'{"query": "x", "extra": 1}',
        b'{"query": "!!!"}',
        b'{"query": "x", "meta": {"a": "\\u0000"}}',
        b'{"query": "x", "meta": {"a": 1e999}}',
        b'{"query": "x", "path_prefix": "a\\u0000b"}',
        b'{"query": "' + b"[" * 3000 + b'"}',
        b'{"query": "x", "meta": ' + b"[" * 3000 + b"]" * 3000 + b"}",
        b'{"question": "x"}',
    ]
    with api.client() as c:
        for body in cases:
            r = c.post("/search", content=body, headers={"Content-Type": "application/json"})
            error_of(r, 400, "usage")
        message = error_of(c.post("/search", json={"query": "x" * 20_001}), 400, "usage")
        assert "20000" in message.replace(",", "")
        error_of(c.post("/ask", json={"question": ""}), 400, "usage")
        error_of(c.get("/nowhere"), 404, "not_found")
        assert c.get("/search").status_code == 405 and c.get("/search").json()["kind"] == "usage"


def test_a_body_the_server_cannot_read_says_what_to_send(api: InProcess):
    with api.client() as c:
        r = c.post("/search", content=b'{"query": "x"}', headers={"Content-Type": "text/plain"})
        assert "send Content-Type: application/json" in error_of(r, 415, "usage")
        assert "text/plain" in r.json()["error"]
        r = c.post("/search", content=b'{"query": "x",\n  "k": 3,,}', headers={"Content-Type": "application/json"})
        message = error_of(r, 400, "usage")
        assert "not valid JSON" in message and "line 2, column 10" in message and "decode error" not in message
        r = c.post("/search", content=b'{"query": "caf\xe9"}', headers={"Content-Type": "application/json"})
        message = error_of(r, 400, "usage")
        assert "UTF-8" in message and "error parsing the body" not in message
        r = c.get("/search")
        assert error_of(r, 405, "usage") == "/search does not take GET: use POST" and r.headers["allow"] == "POST"
        assert error_of(c.delete("/ask"), 405, "usage") == "/ask does not take DELETE: use POST"


def test_health_says_503_while_the_database_cannot_be_reached(env: dict[str, str], caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="ragvps")  # the server's log, as `ragvps serve` sets it
    port = free_port()  # nothing listens there
    bad = env | {"RAGVPS_DATABASE_URL": f"postgresql://ragvps:secret-pw@127.0.0.1:{port}/ragvps"}
    with in_process(bad, wait_ready=False, timeout=60) as srv, srv.client() as c:
        r = c.get("/health")
        assert r.status_code == 503 and r.json()["status"] in ("starting", "unavailable")
        error_of(c.post("/search", json={"query": QUESTION}), 503, "unavailable")
        assert "secret-pw" not in r.text + caplog.text


def test_health_says_200_ready_and_empty_before_the_first_ingest(tmp_path: Path, db_url: str):
    # `docker compose up --wait` waits for this on a fresh stack: empty must not read as unhealthy.
    env = ragvps_env(db_url, tmp_path / "data")
    with in_process(env, timeout=120) as srv, srv.client() as c:
        r = c.get("/health")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ok" and body["error"] is None
        assert body["ready"] is True and body["database"] is True and body["empty"] is True and body["chunks"] == 0
        done = ragvps_here(env, "ingest", str(REPO / "docs" / "serve.md"))
        assert done.returncode == 0, done.stderr
        time.sleep(0.5)  # /health reuses its answer for 0.5 s (serve/api/health.py TTL_S)
        body = c.get("/health").json()
        assert body["status"] == "ok" and body["empty"] is False and body["chunks"] > 0


def test_a_wrong_setting_ends_the_server_at_start_instead_of_retrying(env: dict[str, str]):
    # a database that cannot be reached is retried (above); a setting that is wrong will not heal by waiting
    done = ragvps(env | {"RAGVPS_LANGUAGE": "klingon"}, "serve", "--port", str(free_port()), timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: setting language='klingon'") and "text search configuration" in last
    assert "Traceback" not in done.stderr and "retrying" not in done.stderr


def test_key_file_and_cors_origins_when_set(tmp_path: Path, env: dict[str, str]):
    keys = tmp_path / "api-keys"
    keys.write_text("# one key a line\nfile-key-0123456789abcdef\n")
    with in_process(
        env | {"RAGVPS_API_KEY_FILE": str(keys), "RAGVPS_CORS_ORIGINS": "https://app.example"},
        key="file-key-0123456789abcdef",
    ) as srv:
        anon = srv.keyless()
        with srv.client() as c:
            assert c.post("/search", json={"query": QUESTION}).status_code == 200
        assert anon.post("/search", json={"query": QUESTION}).status_code == 401
        pre = anon.options(
            "/search",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
        sdk = anon.options(
            "/v1/chat/completions",
            headers={  # what the openai npm package sends from a page
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-stainless-arch,x-stainless-lang,"
                "x-stainless-os,x-stainless-package-version,x-stainless-retry-count,"
                "x-stainless-runtime,x-stainless-runtime-version,x-stainless-timeout",
            },
        )
        assert sdk.status_code == 200, sdk.text
        other = anon.options(
            "/search", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
        )
        assert other.headers.get("access-control-allow-origin") != "https://evil.example"
        with srv.client() as c:
            r = c.post("/search", json={"query": QUESTION}, headers={"Origin": "https://app.example"})
            assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "https://app.example"
            error_of(
                c.post("/search", json={"query": QUESTION}, headers={"Origin": "https://evil.example"}),
                403,
                "forbidden",
            )
