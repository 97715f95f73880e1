"""/ask over HTTP: the same answer as `ragvps ask --json`, Server-Sent Events in order (in this process, `api`),
and, over a real server process, a client that leaves closes the upstream LLM request (the stand-in LLM in
tests/support/llm_server.py sees the connection drop) and request_timeout ends answers still waiting."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from support import waiting
from support.asgi_server import InProcess, in_process
from support.llm_server import FakeLLM
from support.serve_server import Server, ragvps_here

QUESTION = "what happens when I run ingest twice?"
STABLE = (
    "answer",
    "answered",
    "extractive",
    "citations",
    "invalid_citations",
    "sources",
    "left_out",
    "generator",
    "model",
    "prompt_version",
)


def events(lines: Any) -> list[tuple[str, Any]]:
    """Parse Server-Sent Events: (event name, JSON data) pairs."""
    out, name, data = [], "message", ""
    for line in lines:
        if line == "":
            if data:
                out.append((name, json.loads(data)))
            name, data = "message", ""
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
    return out


def stream(server: InProcess, body: dict[str, Any]) -> tuple[httpx.Response, list[tuple[str, Any]]]:
    with server.client() as c, c.stream("POST", "/ask", json=body | {"stream": True}) as r:
        return r, events(r.iter_lines())


def test_ask_over_http_matches_the_cli(api: InProcess, serve_env: dict[str, str]):
    done = ragvps_here(serve_env, "ask", QUESTION, "--json")
    assert done.returncode == 0, done.stderr
    cli = json.loads(done.stdout)
    with api.client() as c:
        r = c.post("/ask", json={"question": QUESTION})
    assert r.status_code == 200, r.text
    http = r.json()
    assert http["answered"] and http["citations"], http
    for key in STABLE:
        assert http[key] == cli[key], key
    assert set(http) == set(cli)


def test_streamed_events_come_in_order_with_the_same_answer(api: InProcess):
    with api.client() as c:
        whole = c.post("/ask", json={"question": QUESTION, "use_cache": False}).json()
    r, got = stream(api, {"question": QUESTION, "use_cache": False})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
    names = [name for name, _ in got]
    assert names[0] == "sources" and names[-1] == "done", names
    assert set(names[1:-1]) == {"token"} and names.count("sources") == names.count("done") == 1
    sources, done = got[0][1]["sources"], got[-1][1]
    assert [s["chunk_id"] for s in sources] == [s["chunk_id"] for s in whole["sources"]]
    assert "".join(d["text"] for name, d in got if name == "token") == whole["answer"]
    assert done["citations"] == whole["citations"] and "usage" in done
    assert "sources" not in done


def test_a_refusal_streams_citations_as_an_empty_list(api: InProcess):
    r, got = stream(api, {"question": QUESTION, "path_prefix": "no/such/folder/"})
    names = [name for name, _ in got]
    assert names[0] == "sources" and names[-1] == "done", names
    assert got[0][1]["sources"] == []
    done = got[-1][1]
    assert done["citations"] == [] and done["answered"] is False


def test_off_topic_is_refused_over_http_with_the_threshold_from_the_setting(api: InProcess, serve_env: dict[str, str]):
    from ragvps.config import Settings
    from ragvps.generate.prompt import REFUSAL

    with api.client() as c:
        off = c.post("/ask", json={"question": "What is the capital of France?"}).json()
        on = c.post("/ask", json={"question": QUESTION}).json()
    assert off["answer"] == REFUSAL and not off["answered"] and off["sources"] == [] and off["citations"] == []
    assert off["evidence"] < off["min_evidence"] == Settings().generate.min_evidence and off["retrieved"]
    assert on["answered"] and on["evidence"] >= on["min_evidence"]
    with api.client() as c:  # the README's example: the sentence that answers, first; no command quoted
        keys = c.post("/ask", json={"question": "how do I rotate the keys?"}).json()
    assert keys["answered"] and "rotate one at a time" in keys["quotes"][0]["text"], keys["quotes"]
    assert not any(q["command"] for q in keys["quotes"])
    source = next(s for s in keys["sources"] if s["chunk_id"] == keys["quotes"][0]["chunk_id"])
    q = keys["quotes"][0]
    assert " ".join(source["text"][q["start"] - source["start"] : q["end"] - source["start"]].split()) == q["text"]
    with (
        in_process(serve_env | {"RAGVPS_ANSWER_MIN_EVIDENCE": str(min(1.0, on["evidence"] + 0.01))}) as srv,
        srv.client() as c,
    ):
        high = c.post("/ask", json={"question": QUESTION}).json()
    assert not high["answered"] and high["answer"] == REFUSAL and high["min_evidence"] > on["evidence"]


def test_ask_errors_are_json_and_streamed_errors_are_one_event(api: InProcess):
    with api.client() as c:
        r = c.post("/ask", json={"question": "!!!", "stream": True})
    assert r.status_code == 400 and r.json()["kind"] == "usage"  # refused before the stream starts


def test_a_client_that_leaves_closes_the_upstream_llm_request(serve_env: dict[str, str], llm: FakeLLM, tmp_path: Path):
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 60
    llm.piece_delay = 0.05  # ~20 s of tokens
    env = serve_env | {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
        "RAGVPS_GENERATOR_RETRIES": "0",
    }
    srv = Server(env, tmp_path / "serve.log", key=None).start()
    try:
        with (
            httpx.Client(base_url=srv.url, timeout=60) as c,
            c.stream("POST", "/ask", json={"question": QUESTION, "stream": True}) as r,
        ):
            seen = []
            for line in r.iter_lines():
                if line.startswith("event:"):
                    seen.append(line[6:].strip())
                if seen.count("token") >= 3:
                    break  # leave mid-answer: closing the response closes the connection
        assert seen[0] == "sources"
        deadline = waiting.deadline(15)
        while not llm.disconnected and time.monotonic() < deadline:
            time.sleep(0.1)
        assert llm.disconnected, "the server kept the LLM request open after its client left"
        total = len(llm.reply.split())
        assert llm.pieces_sent < total / 2
        assert len(llm.llm_requests()) == 1
    finally:
        srv.stop()


def test_request_timeout_answers_503_json_ends_a_stream_with_an_error_event_and_stops_at_once(
    serve_env: dict[str, str], llm: FakeLLM, tmp_path: Path
):
    timeout = round(waiting.seconds(4))  # long enough for the search before the LLM on a loaded machine: the sources
    llm.slow = 5.0 * timeout  # must come first; the LLM takes longer than the server's request_timeout
    env = serve_env | {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
        "RAGVPS_GENERATOR_RETRIES": "0",
        "RAGVPS_REQUEST_TIMEOUT": str(timeout),
    }
    srv = Server(env, tmp_path / "serve.log", key=None).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=waiting.seconds(60)) as c, ThreadPoolExecutor(1) as pool:
            # The plain answer and the stream wait out their request_timeout side by side.
            plain = pool.submit(c.post, "/ask", json={"question": QUESTION, "use_cache": False})
            with c.stream("POST", "/ask", json={"question": QUESTION, "use_cache": False, "stream": True}) as s:
                got = events(s.iter_lines())
            r = plain.result()  # without the limit: 200 once the LLM answers
            assert r.status_code == 503 and r.json()["kind"] == "unavailable"
            assert "request_timeout" in r.json()["error"]
        assert [name for name, _ in got] == ["sources", "error"]
        assert got[-1][1]["kind"] == "unavailable" and "request_timeout" in got[-1][1]["error"]
        # Both answers are still waiting on the LLM: a SIGTERM ends the server without waiting for them.
        assert srv.proc is not None
        srv.proc.terminate()
        assert srv.proc.wait(waiting.seconds(10)) == 0
    finally:
        srv.stop()
