"""Switching the embedding model with `ragvps reindex`: re-embed the stored chunks (no source re-read, no
re-chunk) into new storage, switch when complete, keep queries working meanwhile; switching back is free."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest
from test_embed_cache import ingest, state, use_ollama

QUESTION = "how do I stop the embedded database server?"


def artifacts(cli) -> dict[str, float]:
    chunks = Path(cli.env["RAGVPS_DATA_DIR"]) / "kb" / "default" / "chunks"
    return {p.name: p.stat().st_mtime_ns for p in chunks.iterdir()}


def sets(db_url: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT model, dims, active, table_name, to_regclass(table_name) IS NOT NULL "
            "FROM embedding_sets ORDER BY id"
        ).fetchall()


def top_path(cli, text: str = QUESTION) -> str:
    return json.loads(cli("query", text, "--json", "--k", "1").stdout)[0]["path"]


def use_local(cli) -> None:
    cli.env["RAGVPS_EMBEDDER"] = "local"


def test_switch_to_ollama_and_back_without_rechunking(cli, folder, ollama, db_url):
    first = ingest(cli, folder)
    before, files = state(db_url)[0], artifacts(cli)
    assert top_path(cli) == "embedded-database.md"

    use_ollama(cli, ollama)
    refused = ingest(cli, folder, expect=1)
    assert "run `ragvps reindex` to switch models" in refused.stderr

    result = json.loads(cli("reindex", "--json").stdout)
    switch, root = result["switch"], result["roots"][str(folder.resolve())]
    assert (switch["old_model"], switch["new_model"]) == ("all-MiniLM-L6-v2-int8", "nomic-embed-text")
    assert switch["chunks"] == switch["embedded"] == first["chunks"] == len(ollama.inputs)
    assert all(t.startswith("search_document: ") for t in ollama.inputs)
    assert root["rechunked_files"] == 0 and root["embedded"] == 0 and root["stored"] == 0
    assert artifacts(cli) == files  # no chunk file rewritten
    assert state(db_url)[0] == before  # the same chunks
    assert [s[:3] for s in sets(db_url)] == [("nomic-embed-text", 768, True)]
    assert top_path(cli) == "embedded-database.md"

    again = ingest(cli, folder)  # the pinned chunk settings: nothing to redo
    assert (again["rechunked_files"], again["embedded"], again["stored"]) == (0, 0, 0)
    page = folder / "search.md"
    page.write_text(page.read_text() + "\n## Filters\n\nA filter keeps only chunks whose path starts with a prefix.\n")
    edited = ingest(cli, folder)
    assert edited["rechunked_files"] == 1 and edited["stored"] == 1 and 0 < edited["embedded"] <= 2

    use_local(cli)
    assert "configure model nomic-embed-text" in " ".join(cli("query", QUESTION, expect=1).stderr.split())
    sent = len(ollama.inputs)
    back = json.loads(cli("reindex", "--json").stdout)["switch"]
    assert back["new_model"] == "all-MiniLM-L6-v2-int8"
    assert back["embedded"] == edited["embedded"]  # only the edited chunks are new to this model
    assert len(ollama.inputs) == sent
    assert [s[:3] for s in sets(db_url)] == [("all-MiniLM-L6-v2-int8", 384, True)]
    assert top_path(cli) == "embedded-database.md"
    assert state(db_url)[1:] == (state(db_url)[0].__len__(), 0)


def test_interrupted_switch_keeps_the_old_index_working_and_resumes(cli, folder, ollama, db_url):
    first = ingest(cli, folder)
    use_ollama(cli, ollama)
    cli.env["RAGVPS_BATCH_SIZE"] = "2"
    ollama.fail_after_inputs = 4  # then Ollama answers 503: it is going away
    failed = cli("reindex", expect=1)
    assert "answered 503" in failed.stderr
    assert [s[:3] for s in sets(db_url)] == [("all-MiniLM-L6-v2-int8", 384, True)]
    use_local(cli)
    assert top_path(cli) == "embedded-database.md"  # queries run on the old vectors meanwhile

    use_ollama(cli, ollama)
    ollama.fail_after_inputs = None
    switch = json.loads(cli("reindex", "--json").stdout)["switch"]
    assert switch["embedded"] == first["chunks"] - 4
    assert len(set(ollama.inputs)) == first["chunks"]
    assert [s[:3] for s in sets(db_url)] == [("nomic-embed-text", 768, True)]
    assert top_path(cli) == "embedded-database.md"


def test_chunks_too_long_for_the_new_model_are_named_and_nothing_changes(cli, folder, ollama, db_url):
    use_ollama(cli, ollama)
    # One section of about 350 tokens: one nomic chunk (up to 400), too long for all-minilm (256).
    sentence = "The nightly reindex re-syncs every folder and rebuilds the vector index without blocking. "
    # Named so it sorts first: the message names the first three offenders, and the user guide in docs/
    # has long sections of its own (docs/answers.md) that all-minilm cannot take either.
    (folder / "a-long.md").write_text("# Long\n\n" + sentence * 22 + "\n")
    ingest(cli, folder)  # nomic: 400-token chunks
    sent = len(ollama.inputs)
    use_ollama(cli, ollama, "all-minilm")  # takes 256 tokens
    result = cli("reindex", expect=1)
    message = " ".join(result.stderr.split())
    assert "chunks are longer than model all-minilm takes (256 tokens with its prefix)" in message
    assert "document a-long.md chunk 0: 3" in message and "cut for model nomic-embed-text" in message
    assert len(ollama.inputs) == sent
    assert [s[:3] for s in sets(db_url)] == [("nomic-embed-text", 768, True)]
    use_ollama(cli, ollama)
    assert top_path(cli) == "embedded-database.md"


@pytest.mark.parametrize("prefix", ["", "passage: "])
def test_the_document_prefix_is_part_of_the_models_identity(cli, folder, ollama, prefix):
    use_ollama(cli, ollama)
    ingest(cli, folder)
    cli.env["RAGVPS_DOCUMENT_PREFIX"] = prefix
    if prefix == "":  # an empty environment variable means "not set": the model's prefix stays
        assert ingest(cli, folder)["embedded"] == 0
    else:
        assert "run `ragvps reindex`" in ingest(cli, folder, expect=1).stderr
        switch = json.loads(cli("reindex", "--json").stdout)["switch"]
        assert switch["embedded"] == switch["chunks"]
        assert all(t.startswith("passage: ") for t in ollama.inputs[-switch["chunks"] :])
