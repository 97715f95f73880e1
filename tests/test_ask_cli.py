"""`ragvps ask` through the real CLI: --json, --show-prompt, the cited sources listed, errors in one line,
and the API key never in any output or log line (with --verbose, in a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ragvps.generate.prompt import REFUSAL

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-live-DO-NOT-SHOW-7731"
DOC = (
    "# Backups\n\nBackups run every night at 02:00 on the second disk. Each backup is kept for thirty days.\n\n"
    "## Restore\n\nA restore reads the newest backup and replays the journal on top of it.\n"
)


def _ingest(cli, tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "backups.md").write_text(DOC)
    cli("ingest", str(docs))
    return docs


def test_ask_extractive_json_and_text(cli, tmp_path):
    _ingest(cli, tmp_path)
    out = json.loads(cli("ask", "When do backups run?", "--json").stdout)
    assert out["extractive"] and out["answered"] and out["cache"] == "miss" and out["generator"] == "extractive"
    assert out["citations"][0]["path"] == "backups.md" and out["prompt_version"]
    assert set(out["usage"]) == {
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cache_creation_tokens",
        "counted",
    }
    text = cli("ask", "When do backups run?")
    assert "Extractive answer" in text.stdout and "Sources:" in text.stdout
    assert "backups.md | Backups" in text.stdout and "(backups.md#" in text.stdout
    assert "cache hit" in text.stderr


def test_off_topic_is_refused_on_the_cli_with_the_threshold_from_the_setting(cli, tmp_path, caplog):
    _ingest(cli, tmp_path)
    off = json.loads(cli("ask", "What is the capital of France?", "--json").stdout)
    assert not off["answered"] and off["answer"] == REFUSAL and off["sources"] == [] and off["cache"] == "miss"
    assert off["evidence"] < off["min_evidence"] and off["retrieved"]
    assert max(r["evidence"] for r in off["retrieved"]) == off["evidence"]
    text = cli("ask", "What is the capital of France?")
    assert text.stdout.strip() == REFUSAL and "cache hit" in text.stderr and "below answer_min_evidence" in text.stderr
    on = json.loads(cli("ask", "When do backups run?", "--json").stdout)
    assert on["answered"] and on["evidence"] >= on["min_evidence"]
    cli.env["RAGVPS_ANSWER_MIN_EVIDENCE"] = str(min(1.0, on["evidence"] + 0.01))  # just above: refused
    high = json.loads(cli("ask", "When do backups run?", "--json").stdout)
    assert not high["answered"] and high["min_evidence"] == float(cli.env["RAGVPS_ANSWER_MIN_EVIDENCE"])
    del cli.env["RAGVPS_ANSWER_MIN_EVIDENCE"]
    cli.env["RAGVPS_ANSWER_MIN_SCORE"] = "1"  # the old name still works, with a warning naming the new one
    old = json.loads(cli("ask", "When do backups run?", "--json").stdout)
    assert old["min_evidence"] == 1.0, old
    assert any("answer_min_evidence" in r.getMessage() for r in caplog.records)  # (a real process: on stderr)


def test_show_prompt_prints_the_prompt_and_its_count_and_sends_nothing(cli, tmp_path, llm):
    _ingest(cli, tmp_path)
    cli.env |= {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
    }
    r = cli("ask", "How does a restore work?", "--show-prompt")
    assert r.stdout.rstrip().endswith("Question: How does a restore work?")
    assert "--- system ---" in r.stdout and "[1] backups.md" in r.stdout
    assert "prompt tokens (o200k_base" in r.stderr and "nothing was sent" in r.stderr
    assert llm.llm_requests() == []


def test_usage_the_llm_server_does_not_send_is_counted_on_the_cli(cli, tmp_path, llm):
    _ingest(cli, tmp_path)
    cli.env |= {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gemma-3-270m",
        "RAGVPS_GENERATOR_RETRIES": "0",
    }
    llm.no_usage = True  # as llama.cpp's server streams
    usage = json.loads(cli("ask", "When do backups run?", "--json").stdout)["usage"]
    assert usage["counted"] is True and usage["prompt_tokens"] > 100 and usage["completion_tokens"] > 0
    text = cli("ask", "When do backups run?", "--no-cache")
    assert " 0 prompt tokens" not in text.stderr and "answer tokens (counted by ragvps" in text.stderr


def test_errors_are_one_line_and_the_key_never_shows(cli, tmp_path, llm):
    _ingest(cli, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGVPS_", "OPENAI_", "ANTHROPIC_"))}
    env |= cli.env | {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "OPENAI_API_KEY": KEY,
        "RAGVPS_GENERATOR_RETRIES": "0",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ragvps", "--verbose", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )

    llm.fail(401, f"Incorrect API key provided: {KEY}")
    refused = run("ask", "When do backups run?")
    assert refused.returncode == 2 and "refused the API key" in refused.stderr
    ok = run("ask", "When do backups run?", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["citations"]
    assert llm.llm_requests()[-1]["headers"]["authorization"] == f"Bearer {KEY}"  # the key was used ...
    llm.context_limit = 10
    too_long = run("ask", "How does a restore work?")
    assert too_long.returncode == 1 and "context_window" in too_long.stderr.splitlines()[-1]
    stats = run("stats", "--json")
    for r in (refused, ok, too_long, stats):
        assert KEY not in r.stdout + r.stderr  # ... and never shown, logged or cached
    with __import__("psycopg").connect(cli.env["RAGVPS_DATABASE_URL"]) as conn:
        dump = conn.execute("SELECT coalesce(string_agg(answer::text || key, ''), '') FROM answer_cache").fetchone()
    assert dump is not None and KEY not in dump[0]


def test_query_and_eval_accept_rerank(cli, tmp_path, llm):
    docs = _ingest(cli, tmp_path)
    (docs / "other.md").write_text("# Other\n\nThe office plants are watered on Mondays by the facilities team.\n")
    cli("ingest", str(docs))
    cli.env |= {"RAGVPS_RERANKER_URL": llm.url + "/v2/rerank", "RAGVPS_RERANKER_MODEL": "stand-in"}
    hits = json.loads(cli("query", "when are the plants watered", "--rerank", "--json").stdout)
    assert hits[0]["path"] == "other.md" and len([r for r in llm.requests if r["path"] == "/v2/rerank"]) == 1
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"question": "when are the plants watered", "doc": "other.md"}) + "\n")
    report = json.loads(cli("eval", str(gold), "--rerank", "--json").stdout)
    assert report["questions"] == 1 and len([r for r in llm.requests if r["path"] == "/v2/rerank"]) > 1
