"""The embedding contract end to end through `ragvps ingest` with Ollama (the fake) and a real database:
the cache never redoes work, errors name what to fix, and a killed run resumes without duplicates."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from support import waiting
from support.ollama_server import FakeOllama

from tests.test_end_to_end import N_DOCS

REPO = Path(__file__).resolve().parents[1]


def use_ollama(cli, fake: FakeOllama, model: str = "nomic-embed-text") -> None:
    cli.env.update(
        {
            "RAGVPS_EMBEDDER": "ollama",
            "RAGVPS_OLLAMA_URL": fake.url,
            "RAGVPS_EMBED_MODEL": model,
            "RAGVPS_OLLAMA_RETRIES": "0",
        }
    )


def ingest(cli, folder: Path, expect: int = 0):
    result = cli("ingest", str(folder), "--json", expect=expect)
    return json.loads(result.stdout) if expect == 0 else result


def chunk_hashes(db_url: str) -> set[str]:
    with psycopg.connect(db_url) as conn:
        return {r[0] for r in conn.execute("SELECT content_hash FROM chunks")}


def state(db_url: str) -> tuple[list, int, int]:
    """What a user's database holds: (doc, seq, hash) rows, vectors, and vectors without a chunk."""
    with psycopg.connect(db_url) as conn:
        table = conn.execute("SELECT table_name FROM embedding_sets WHERE active").fetchone()[0]
        rows = conn.execute(
            "SELECT d.doc_id, c.seq, c.content_hash FROM chunks c JOIN documents d "
            "ON d.id = c.document_id ORDER BY 1, 2"
        ).fetchall()
        vectors = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        orphans = conn.execute(
            f"SELECT count(*) FROM {table} e LEFT JOIN chunks c ON c.id = e.chunk_id WHERE c.id IS NULL"
        ).fetchone()[0]
    return rows, vectors, orphans


def test_unchanged_corpus_embeds_nothing_and_an_edit_embeds_only_its_new_chunks(cli, folder, ollama, db_url):
    use_ollama(cli, ollama)
    first = ingest(cli, folder)
    assert first["embedded"] == first["chunks"] == len(ollama.inputs) > 5
    assert all(t.startswith("search_document: ") for t in ollama.inputs)
    assert all(len(b["input"]) <= 32 and b["truncate"] is False for b in ollama.embed_requests())
    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--json").stdout)
    assert hits[0]["path"] == "embedded-database.md"

    sent = len(ollama.inputs)
    again = ingest(cli, folder)
    assert again["embedded"] == 0 and len(ollama.inputs) == sent

    before = chunk_hashes(db_url)
    page = folder / "search.md"
    page.write_text(page.read_text() + "\n## Filters\n\nA filter keeps only chunks whose path starts with a prefix.\n")
    edited = ingest(cli, folder)
    new = chunk_hashes(db_url) - before
    assert edited["stored"] == 1 and edited["unchanged"] == N_DOCS - 1
    assert edited["embedded"] == len(new) == len(ollama.inputs) - sent
    assert 0 < len(new) < first["chunks"]
    assert all(t.startswith("search_document: How search works") for t in ollama.inputs[sent:])


def test_another_model_is_refused_for_ingest_and_query(cli, folder, ollama):
    use_ollama(cli, ollama)
    ingest(cli, folder)
    sent = len(ollama.embed_requests())
    use_ollama(cli, ollama, "mxbai-embed-large")
    refused = ingest(cli, folder, expect=1)
    assert "vectors from model nomic-embed-text" in refused.stderr and "run `ragvps reindex`" in refused.stderr
    result = cli("query", "anything at all", expect=1)
    assert "configure model nomic-embed-text to query" in " ".join(result.stderr.split())
    assert len(ollama.embed_requests()) == sent  # the first ingest's batches; nothing sent after


def test_wrong_dimension_is_refused_before_storing(cli, folder, ollama, db_url):
    use_ollama(cli, ollama)
    ollama.models["nomic-embed-text"].dims = 1024
    result = ingest(cli, folder, expect=1)
    assert "model nomic-embed-text returns 1024 dimensions, the index holds 768" in " ".join(result.stderr.split())
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 0


def test_input_too_long_for_the_server_names_the_chunk_and_keeps_the_rest(cli, folder, ollama):
    use_ollama(cli, ollama)
    cli.env["RAGVPS_BATCH_SIZE"] = "4"
    title = "A very long title that " + "goes on and on " * 12
    (folder / "zz-notes.md").write_text(f"# {title}\n\n" + "Backups run every night at two. " * 80)
    # /api/show says 2048 (as Ollama reports the model's own context) but the runner takes 440 (its num_ctx)
    ollama.models["nomic-embed-text"].num_ctx = 440
    result = ingest(cli, folder, expect=1)
    message = " ".join(result.stderr.split())
    assert "document zz-notes.md chunk 0 has 4" in message
    assert "more than model nomic-embed-text takes on this server (ragvps assumed 2048" in message
    assert "ragvps doctor" in message
    assert not any("exceeds" in line for line in result.stdout.splitlines())
    ollama.models["nomic-embed-text"].num_ctx = None
    sent = len(ollama.inputs)
    done = ingest(cli, folder)
    assert done["embedded"] == len(ollama.inputs) - sent < done["chunks"]  # what was embedded before is kept


def test_unreachable_ollama_says_where(cli, folder, ollama):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    use_ollama(cli, ollama)
    cli.env["RAGVPS_OLLAMA_URL"] = f"http://127.0.0.1:{port}"
    result = ingest(cli, folder, expect=1)
    message = " ".join(result.stderr.split())
    assert f"Ollama is not reachable at http://127.0.0.1:{port}" in message and "ollama serve" in message


def test_doctor_reports_dimension_and_context_length(cli, folder, ollama):
    use_ollama(cli, ollama)
    result = cli("doctor")
    assert "nomic-embed-text (nomic-bert), 768 dimensions, context length 2048" in result.stdout
    assert "index: empty" in result.stdout
    report = json.loads(cli("doctor", "--json").stdout)
    assert (report["server_dims"], report["server_context"], report["probe_dims"]) == (768, 2048, 768)
    assert report["problems"] == []

    ollama.models["nomic-embed-text"].context_length = 512
    result = cli("doctor", expect=1)
    assert "Ollama gives nomic-embed-text a context of 512 tokens" in " ".join(result.stderr.split())

    ingest(cli, folder)
    use_ollama(cli, ollama, "mxbai-embed-large")
    del ollama.models["mxbai-embed-large"]
    result = cli("doctor", expect=1)
    problems = " ".join(result.stderr.split())
    assert "run `ollama pull mxbai-embed-large`" in problems
    assert "the index holds vector(768) vectors from model nomic-embed-text" in problems


def test_killed_ingest_reruns_to_the_same_state_without_duplicates(cli, folder, ollama, db_url, tmp_path):
    use_ollama(cli, ollama)
    cli.env["RAGVPS_BATCH_SIZE"] = "2"
    ollama.latency = 0.3
    env = {**os.environ, **cli.env, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "ingest", str(folder)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = waiting.deadline(60)
        while len(ollama.inputs) < 4 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the ingest finished before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_sent = len(ollama.inputs)
    ollama.latency = 0
    rerun = ingest(cli, folder)
    # At most the batch in flight (2 chunks) is embedded twice; everything else comes from the cache.
    assert rerun["chunks"] - killed_sent <= rerun["embedded"] <= rerun["chunks"] - killed_sent + 2
    assert len(set(ollama.inputs)) == rerun["chunks"]
    rows, vectors, orphans = state(db_url)
    assert len(rows) == len(set(rows)) == vectors == rerun["chunks"] and orphans == 0
    assert ingest(cli, folder)["embedded"] == 0
