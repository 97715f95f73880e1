"""Any Ollama embedding model: what the server reports (/api/show) makes a model ragvps has no entry for
usable; a model the server lacks says `ollama pull`; the reported dimension is checked against the first real
embedding; `plan` and `--help` ask no server. And a batch halved to find a chunk too long keeps the vectors
already answered for its neighbours."""

from __future__ import annotations

import json

import psycopg
import pytest
from support.ollama_server import FakeModel

from ragvps.embed.registry import forget_specs


@pytest.fixture(autouse=True)
def fresh_specs():
    forget_specs()  # each test's server says something else about the same name
    yield
    forget_specs()


def use(cli, fake, model: str) -> None:
    cli.env.update(
        {
            "RAGVPS_EMBEDDER": "ollama",
            "RAGVPS_OLLAMA_URL": fake.url,
            "RAGVPS_EMBED_MODEL": model,
            "RAGVPS_OLLAMA_RETRIES": "0",
        }
    )


def chunks_stored(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute("SELECT count(*) FROM chunks").fetchone()[0]


def test_a_model_ragvps_has_no_entry_for_is_used_with_what_the_server_reports(cli, folder, ollama):
    ollama.models["acme-embed-m9"] = FakeModel(1024, 8192, "xlm-roberta")
    use(cli, ollama, "acme-embed-m9")
    report = json.loads(cli("ingest", str(folder), "--json").stdout)
    assert report["embedded"] == report["chunks"] > 5
    assert ollama.inputs and not any(t.startswith("search_document: ") for t in ollama.inputs)  # no task prefix
    assert [p for p, _ in ollama.requests].count("/api/show") >= 1
    hits = json.loads(cli("query", "how do I stop the embedded database server?", "--json").stdout)
    assert hits[0]["path"] == "embedded-database.md"
    doctor = json.loads(cli("doctor", "--json").stdout)
    assert (doctor["dims"], doctor["max_tokens"], doctor["known"], doctor["problems"]) == (1024, 8192, False, [])
    text = " ".join(cli("doctor").stdout.split())
    assert "model acme-embed-m9 has no entry in ragvps's table" in text and "no task prefixes" in text


def test_a_model_the_server_lacks_says_ollama_pull(cli, folder, ollama, db_url):
    use(cli, ollama, "not-pulled-yet")
    result = cli("ingest", str(folder), expect=1)
    message = " ".join(result.stderr.split())
    assert "has no model not-pulled-yet: run `ollama pull not-pulled-yet`" in message
    assert chunks_stored(db_url) == 0
    doctor = cli("doctor", expect=1)
    assert "run `ollama pull not-pulled-yet`" in " ".join(doctor.stderr.split())


def test_the_reported_dimension_is_checked_against_the_first_real_embedding(cli, folder, ollama, db_url):
    ollama.models["odd-embed"] = FakeModel(768, 2048, "bert", reported_dims=1024)
    use(cli, ollama, "odd-embed")
    result = cli("ingest", str(folder), expect=1)
    message = " ".join(result.stderr.split())
    assert "reported 1024 dimensions for model odd-embed (/api/show), but its embeddings have 768" in message
    assert chunks_stored(db_url) == 0


def test_a_model_that_does_not_embed_is_refused(cli, folder, ollama):
    ollama.models["chatty"] = FakeModel(4096, 8192, "llama", capabilities=("completion",))
    use(cli, ollama, "chatty")
    result = cli("ingest", str(folder), expect=1)
    assert "chatty, which is not an embedding model (capabilities: completion)" in " ".join(result.stderr.split())
    assert not ollama.embed_requests()


def test_plan_and_help_ask_no_server(cli, folder, ollama):
    ollama.models["acme-embed-m9"] = FakeModel(1024, 8192, "xlm-roberta")
    use(cli, ollama, "acme-embed-m9")
    cli("--help")
    cli("plan", "--tokens", "1000000", "--chunk-size", "400", "--overlap", "50")
    cli("plan", "--model", "nomic-embed-text", "--tokens", "1000000", "--chunk-size", "400", "--json")
    refused = cli("plan", "--path", str(folder), expect=2)  # the model's input limit would need the server
    assert "ragvps has no entry for Ollama model 'acme-embed-m9'" in " ".join(refused.stderr.split())
    assert ollama.requests == []


def test_a_halved_batch_keeps_the_vectors_answered_for_its_neighbours(cli, tmp_path, ollama):
    use(cli, ollama, "nomic-embed-text")
    cli.env["RAGVPS_BATCH_SIZE"] = "8"
    folder = tmp_path / "own"  # its own pages, so the batches do not depend on how docs/ chunks
    folder.mkdir()
    for i, topic in enumerate(
        [
            "restores",
            "retention",
            "encryption",
            "monitoring",
            "rotation",
            "quotas",
            "snapshots",
            "replicas",
            "alerts",
            "upgrades",
            "audits",
        ]
    ):
        (folder / f"page-{i:02}.md").write_text(f"# {topic.title()}\n\nHow {topic} work on the backup host.\n")
    body = "Backups run every night at two and are kept for a week. " * 40
    (folder / "zz-long.md").write_text("# Backups\n\n" + body)
    # The work list is sorted by length, so the long chunk ends the last batch: pad the folder with one-chunk
    # pages until that batch holds four chunks, whatever the chunker makes of these pages.
    chunks = json.loads(cli("chunk", str(folder), "--json").stdout)["chunks"]
    for i in range((4 - chunks) % 8):
        (folder / f"pad-{i}.md").write_text(f"# Pad {i}\n\nA short page number {i}.\n")
    ollama.models["nomic-embed-text"].num_ctx = 300  # /api/show says 2048; the runner takes 300
    result = cli("ingest", str(folder), "--json", expect=1)
    assert "has 4" in result.stderr or "tokens, more than model nomic-embed-text takes" in " ".join(
        result.stderr.split()
    )
    answered = set(ollama.inputs)
    halved = [b for b in ollama.embed_requests() if len(b["input"]) < 8]
    assert any(t in answered for b in halved for t in b["input"]), "no neighbour was answered in a halved batch"
    ollama.models["nomic-embed-text"].num_ctx = None
    ollama.inputs.clear()
    rerun = json.loads(cli("ingest", str(folder), "--json").stdout)
    again = set(ollama.inputs)
    assert not again & answered  # nothing answered before is embedded again
    assert rerun["embedded"] == len(again) == rerun["chunks"] - len(answered)
