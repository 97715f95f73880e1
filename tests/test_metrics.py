"""/metrics and the request log (issue 33): scraped with prometheus-client's own parser, the counters move as a
search, an answer, a refusal and a cache hit say they should; labels stay bounded under 1,000 distinct
questions and paths; the key rules; the request id; no question text and no key in the log or the metrics."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.asgi_server import InProcess
from support.serve_server import KEY, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

LAMP = "# Lighthouse\n\n## Lamp\n\nThe lamp is lit at sunset and put out at sunrise by the keeper.\n"
FOG = "# Fog\n\n## Horn\n\nIn fog the horn sounds twice a minute until the fog lifts.\n"


def cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(
        cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return done.stdout


@pytest.fixture(scope="module")
def corpus_env(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("metrics")
    (root / "docs").mkdir()
    (root / "docs" / "lamp.md").write_text(LAMP)
    (root / "docs" / "fog.md").write_text(FOG)
    env = ragvps_env(module_db_url, root / "data")
    cli(env, "ingest", str(root / "docs"))
    cli(env, "kb", "create", "other")
    return env


@pytest.fixture(scope="module")
def server(corpus_env: dict[str, str]) -> Iterator[InProcess]:
    srv = InProcess(corpus_env | {"RAGVPS_API_KEYS": KEY}).start()
    yield srv
    srv.stop()


def scrape(server: InProcess, key: str | None = KEY) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with server.keyless(headers={"Authorization": f"Bearer {key}"} if key else {}) as c:
        r = c.get("/metrics")
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_move_with_a_search_an_answer_a_refusal_and_a_cache_hit(server: InProcess):
    before = scrape(server)
    with server.client() as c:
        assert c.post("/search", json={"query": "when is the lamp lit?"}).json()["hits"]
        assert c.post("/search", json={"query": "zyzzyva quux", "mode": "keyword"}).json()["hits"] == []
        answered = c.post("/ask", json={"question": "When is the lamp lit?"}).json()
        refused = c.post("/ask", json={"question": "What is the capital of Peru?"}).json()
        again = c.post("/ask", json={"question": "What is the capital of Peru?"}).json()
    assert answered["answered"] and not refused["answered"] and again["cache"] == "hit"
    after = scrape(server)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("ragvps_searches_total", kb="default", mode="hybrid") == 3  # the search and two asks' searches
    assert delta("ragvps_searches_total", kb="default", mode="keyword") == 1
    assert delta("ragvps_search_zero_hits_total", kb="default") == 1
    # each hybrid search's legs: at once on a spare pool connection, or one after the other when none was idle
    assert sum(delta("ragvps_search_legs_total", kb="default", how=how) for how in ("parallel", "fallback")) == 3
    assert delta("ragvps_answers_total", kb="default", outcome="extractive") == 1
    assert delta("ragvps_answers_total", kb="default", outcome="refused_gate") == 1
    assert delta("ragvps_answers_total", kb="default", outcome="cached") == 1
    assert delta("ragvps_answer_evidence_count", kb="default") == 3
    assert delta("ragvps_http_requests_total", route="/search", method="POST", status="200") == 2
    assert delta("ragvps_http_requests_total", route="/ask", method="POST", status="200") == 3
    for stage in ("question_embedding", "vector_leg", "keyword_leg", "fusion"):
        assert delta("ragvps_stage_duration_seconds_count", kb="default", stage=stage) >= 3, stage
    assert delta("ragvps_stage_duration_seconds_count", kb="default", stage="generation") == 1
    assert value(after, "ragvps_database_up") == 1
    assert value(after, "ragvps_pool_size") >= 1
    assert value(after, "ragvps_shared_buffers_bytes") > 0
    assert ("ragvps_index_bytes", (("kb", "other"),)) in after  # every knowledge base, searched or not
    assert value(after, "ragvps_embed_queue_chunks", kb="default") == 0


def test_labels_stay_bounded_under_a_thousand_distinct_questions_and_paths(server: InProcess):
    with server.client() as c:
        c.post("/search", json={"query": "warm", "mode": "keyword"})
        c.get("/no-such-path/warm")
        c.post("/kb/other/search", json={"query": "warm", "mode": "keyword"})
        scrape(server)  # /metrics's own series are counted after its first answer: alone, this test is first
        series = set(scrape(server))
        for i in range(1000):
            word = uuid.uuid4().hex[:10]
            if i % 2:
                assert c.post("/search", json={"query": f"lamp {word} {i}", "mode": "keyword"}).status_code == 200
            else:
                c.get(f"/no-such-path/{word}")
                c.post(f"/kb/kb-{word}/search", json={"query": word})  # 404: no such knowledge base
    grown = set(scrape(server)) - series
    assert len(grown) <= 4, sorted(grown)  # the new 404 route template's few series, nothing per question or path


def test_metrics_need_a_key_that_is_admin_on_every_knowledge_base(server: InProcess, corpus_env: dict[str, str]):
    with server.keyless() as c:
        assert c.get("/metrics").status_code == 401
    reader = cli(corpus_env, "key", "create", "--kb", "default", "--role", "read", "--name", "metrics-reader").strip()
    admin_of_one = cli(
        corpus_env, "key", "create", "--kb", "default", "--role", "admin", "--name", "metrics-admin-one"
    ).strip()
    for key in (reader, admin_of_one):
        with server.keyless(headers={"Authorization": f"Bearer {key}"}) as c:
            r = c.get("/metrics")
        assert r.status_code == 403 and "admin on every knowledge base" in r.json()["error"]
        assert "ragvps_" not in r.text
    cli(corpus_env, "key", "revoke", "metrics-reader")
    cli(corpus_env, "key", "revoke", "metrics-admin-one", "--yes")
    assert scrape(server)  # the settings' key: admin everywhere


def test_a_server_without_keys_on_loopback_serves_metrics_to_anyone(corpus_env: dict[str, str]):
    srv = InProcess(corpus_env, key=None).start()
    try:
        assert value(scrape(srv, key=None), "ragvps_database_up") == 1
    finally:
        srv.stop()


def test_metrics_and_the_request_log_turn_off(corpus_env: dict[str, str], caplog: pytest.LogCaptureFixture):
    srv = InProcess(corpus_env | {"RAGVPS_API_KEYS": KEY, "RAGVPS_METRICS": "false", "RAGVPS_LOG_FORMAT": "off"})
    srv.start()
    try:
        with caplog.at_level(logging.INFO, logger="ragvps.requests"), srv.client() as c:
            searched = c.post("/search", json={"query": "lamp"}, headers={"X-Request-Id": "off-1"})
            scraped = c.get("/metrics")
    finally:
        srv.stop()
    assert searched.status_code == 200 and searched.json()["hits"]
    assert scraped.status_code == 404  # no route: nothing observed, nothing to read
    assert searched.headers["x-request-id"] == "off-1"  # still given: the audit log names the request by it
    assert not [rec for rec in caplog.records if rec.name == "ragvps.requests"]


def test_the_request_id_comes_back_and_a_proxys_is_kept_when_well_formed(server: InProcess):
    with server.client() as c:
        mine = c.post("/search", json={"query": "lamp"}, headers={"X-Request-Id": "proxy-7f3a.1"})
        forged = c.post("/search", json={"query": "lamp"}, headers={"X-Request-Id": "a b\tc=d"})
        fresh = c.get("/health")
    assert mine.headers["x-request-id"] == "proxy-7f3a.1"
    assert forged.headers["x-request-id"] != "a b\tc=d" and len(forged.headers["x-request-id"]) == 32
    assert fresh.headers["x-request-id"] != forged.headers["x-request-id"]


def test_the_log_line_has_the_stages_and_outcome_but_no_question_and_no_key(
    server: InProcess, caplog: pytest.LogCaptureFixture
):
    question = "When is the lamp lit by the keeper?"
    with caplog.at_level(logging.INFO, logger="ragvps.requests"), server.client() as c:
        r = c.post("/kb/default/ask", json={"question": question}, headers={"X-Request-Id": "trace-1"})
    assert r.status_code == 200
    records = [rec for rec in caplog.records if rec.name == "ragvps.requests" and "trace-1" in rec.getMessage()]
    assert len(records) == 1
    line = records[0].getMessage()
    fields = records[0].request  # type: ignore[attr-defined]
    assert fields["route"] == "/kb/{name}/ask" and fields["kb"] == "default" and fields["status"] == 200
    assert fields["outcome"] in ("extractive", "cached") and 0 < fields["evidence"] <= 1
    assert {"question_embedding", "vector_leg", "keyword_leg", "fusion"} <= set(fields["stages"]) or fields[
        "outcome"
    ] == "cached"
    assert "lamp" not in line and KEY not in line and "question" not in fields
    assert question not in scrape(server).__repr__()


def test_log_questions_puts_the_question_in_and_a_hostile_path_cannot_forge_a_field(
    corpus_env: dict[str, str], caplog: pytest.LogCaptureFixture
):
    srv = InProcess(corpus_env | {"RAGVPS_API_KEYS": KEY, "RAGVPS_LOG_QUESTIONS": "true"}).start()
    try:
        with caplog.at_level(logging.INFO, logger="ragvps.requests"), srv.client() as c:
            c.post("/search", json={"query": "lamp at sunset\nstatus=200 kb=secret"}, headers={"X-Request-Id": "q-1"})
            c.get("/x%20status=200%0Aforged=1", headers={"X-Request-Id": "q-2"})  # decoded into the path
    finally:
        srv.stop()
    lines = {
        rec.request["request_id"]: rec.getMessage()
        for rec in caplog.records  # type: ignore[attr-defined]
        if rec.name == "ragvps.requests"
    }
    assert '"lamp at sunset\\nstatus=200 kb=secret"' in lines["q-1"] and "\n" not in lines["q-1"]
    assert "\n" not in lines["q-2"] and " forged=1" not in lines["q-2"]


def test_json_lines_from_a_real_server_with_verbose_hold_no_secret(corpus_env: dict[str, str], tmp_path: Path):
    from support.serve_server import Server

    env = corpus_env | {"RAGVPS_API_KEYS": KEY, "RAGVPS_LOG_FORMAT": "json"}
    srv = Server(env, tmp_path / "serve.log", options=("--verbose",))
    srv.start()
    try:
        question = "When is the lamp lit? my-secret-question-text"
        with srv.client() as c:
            rid = c.post("/ask", json={"question": question}).headers["x-request-id"]
            c.get("/metrics")
    finally:
        srv.stop()
    text = (tmp_path / "serve.log").read_text()
    assert KEY not in text and "my-secret-question-text" not in text
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    asked = [line for line in lines if line.get("request_id") == rid]
    assert len(asked) == 1 and asked[0]["route"] == "/ask" and asked[0]["status"] == 200


def test_every_metric_the_dashboard_and_docs_name_is_served(server: InProcess):
    import re

    from support.serve_server import REPO

    with server.client() as c:
        c.post("/search", json={"query": "lamp"})
        c.post("/ask", json={"question": "When is the lamp lit?"})
    served = {name for name, _ in scrape(server)}
    families = served | {re.sub(r"_(bucket|count|sum|total)$", "", n) for n in served}
    named = set()
    for path in ("deploy/grafana-dashboard.json", "docs/serve.md"):
        named |= set(re.findall(r"\bragvps_[a-z_]+[a-z]", (REPO / path).read_text()))
    never_without_an_llm = {"ragvps_llm_tokens", "ragvps_llm_tokens_total"}  # no token counted by the extractive
    missing = {n for n in named - never_without_an_llm if n not in families and f"{n}_total" not in served}
    assert not missing, missing


def test_an_llms_tokens_and_answers_are_counted(corpus_env: dict[str, str], llm):
    env = corpus_env | {
        "RAGVPS_API_KEYS": KEY,
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_ANSWER_CACHE": "false",
    }
    srv = InProcess(env).start()
    try:
        before = scrape(srv)
        with srv.client() as c:
            answer = c.post("/ask", json={"question": "When is the lamp lit by the keeper?"}).json()
        after = scrape(srv)
    finally:
        srv.stop()
    assert answer["answered"] and not answer["extractive"]
    usage = answer["usage"]
    for kind, n in (("prompt", usage["prompt_tokens"]), ("completion", usage["completion_tokens"])):
        assert (
            n > 0
            and value(after, "ragvps_llm_tokens_total", kb="default", kind=kind)
            - value(before, "ragvps_llm_tokens_total", kb="default", kind=kind)
            == n
        ), kind
    assert value(after, "ragvps_answers_total", kb="default", outcome="answered") == 1
    assert value(after, "ragvps_stage_duration_seconds_count", kb="default", stage="generation") >= 1
