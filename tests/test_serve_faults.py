"""The server under its own faults, each case made small, over a real `ragvps serve` process (bench/
serve_faults.py runs them at size, with figures). The contract: every request the server accepted ends
within `request_timeout` (here 8 s; the bounds below add a generous margin for a loaded machine), with its
answer or a JSON error of the right kind, and the server keeps answering afterwards."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from llm_server import FakeLLM, llm, llm_server  # noqa: F401  (fixtures)
from serve_server import Server

TIMEOUT = 8  # the server's request_timeout (long enough for an ask on a loaded 2-core machine)
BOUND = TIMEOUT + 20  # what "within request_timeout" is allowed on a loaded 2-core machine
QUESTION = "what happens when I run ingest twice?"


@pytest.fixture(scope="module")
def faulty(serve_env: dict[str, str], llm_server: FakeLLM,  # noqa: F811
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = serve_env | {"RAGVPS_GENERATOR": "openai", "RAGVPS_GENERATOR_URL": llm_server.url + "/v1",
                       "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini", "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
                       "RAGVPS_GENERATOR_RETRIES": "0", "RAGVPS_REQUEST_TIMEOUT": str(TIMEOUT),
                       "RAGVPS_POOL_SIZE": "2"}
    srv = Server(env, tmp_path_factory.mktemp("faults") / "serve.log", key=None).start()
    yield srv
    srv.stop()


def still_answers(srv: Server) -> None:
    assert srv.proc is not None and srv.proc.poll() is None, "the server died"
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.post("/search", json={"query": QUESTION}).status_code == 200


def json_error(raw: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_slow_loris_body_gets_408_json_within_request_timeout(faulty: Server):
    body = json.dumps({"query": QUESTION}).encode()
    with socket.create_connection(("127.0.0.1", faulty.port), timeout=BOUND) as s:
        s.sendall(b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        start = time.monotonic()
        raw = b""
        s.settimeout(1.0)
        for byte in body:  # a byte a second
            try:
                s.sendall(bytes([byte]))
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            raw += chunk
            if b"\r\n\r\n" in raw or not chunk:
                break
            assert time.monotonic() - start < BOUND
        s.settimeout(BOUND)
        while b"}" not in raw:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    took = time.monotonic() - start
    status, error = json_error(raw)
    assert status == 408 and error["kind"] == "usage" and "request_timeout" in error["error"], raw
    assert TIMEOUT - 0.5 <= took < BOUND, took
    still_answers(faulty)


def test_an_llm_that_stalls_mid_answer_ends_within_request_timeout(faulty: Server, llm: FakeLLM):  # noqa: F811
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 20
    llm.stall_after, llm.stall_s = 3, 60.0
    with httpx.Client(base_url=faulty.url, timeout=BOUND + 30) as c:
        start = time.monotonic()
        r = c.post("/ask", json={"question": QUESTION, "use_cache": False})
        assert time.monotonic() - start < BOUND
        assert r.status_code == 503 and r.json()["kind"] == "unavailable" and "request_timeout" in r.json()["error"]
        start = time.monotonic()
        names, last = [], {}
        with c.stream("POST", "/ask", json={"question": QUESTION, "use_cache": False, "stream": True}) as s:
            event = ""
            for line in s.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    names.append(event)
                elif line.startswith("data:"):
                    last = json.loads(line[5:])
        assert time.monotonic() - start < BOUND
    assert names[0] == "sources" and names.count("token") >= 1 and names[-1] == "error", (names, last)
    assert last["kind"] == "unavailable" and "request_timeout" in last["error"]
    still_answers(faulty)


def test_an_exhausted_pool_answers_503_json_within_request_timeout_and_health_says_why(faulty: Server):
    url = faulty.env["RAGVPS_DATABASE_URL"]
    results: list[tuple[int, str, float]] = []

    def one() -> None:
        start = time.monotonic()
        try:
            r = httpx.post(faulty.url + "/search", json={"query": QUESTION, "mode": "keyword"}, timeout=BOUND + 30)
            results.append((r.status_code, r.json().get("kind", ""), time.monotonic() - start))
        except httpx.HTTPError as exc:
            results.append((0, exc.__class__.__name__, time.monotonic() - start))

    with psycopg.connect(url) as lock:
        lock.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")  # every search now waits, holding its connection
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        health = httpx.get(faulty.url + "/health", timeout=BOUND + 30)
        for t in threads:
            t.join(BOUND + 30)
        lock.rollback()
    assert len(results) == 6
    for status, kind, took in results:
        assert (status, kind) == (503, "unavailable"), results
        assert took < BOUND, results
    assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
    assert health.json()["error"], health.text
    deadline = time.monotonic() + 30
    while True:  # the abandoned searches finish once the lock goes, and give their connections back
        try:
            still_answers(faulty)
            break
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(0.5)


def test_the_server_survives_a_client_that_leaves_mid_stream_many_times(faulty: Server, llm: FakeLLM):  # noqa: F811
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 40
    llm.piece_delay = 0.02
    for _ in range(5):
        with httpx.Client(base_url=faulty.url, timeout=BOUND) as c, \
                c.stream("POST", "/ask", json={"question": QUESTION, "stream": True, "use_cache": False}) as r:
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    break
    still_answers(faulty)
    log = Path(faulty.log).read_text()
    assert "Traceback" not in log, log[-3000:]
