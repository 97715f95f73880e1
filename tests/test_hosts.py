"""Several Ollama hosts in one embed stage (three stand-in servers on loopback, each one lane with a fixed
per-input delay): every chunk embedded exactly once, a killed host's work goes to the others, a host that
disagrees is refused by name, and when no host is left one line names each."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from support.ollama_server import FakeOllama

from ragvps.config import Settings
from ragvps.embed.models import spec_for
from ragvps.embed.registry import make_lanes
from ragvps.errors import EmbedderError
from ragvps.ingest.embedding import embed_stage
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import Chunk

WORDS = ["postgres", "vector", "index", "chunk", "query", "answer", "model", "server", "batch", "lane"]


@pytest.fixture
def fakes() -> Iterator[list[FakeOllama]]:
    servers = [FakeOllama(real_vectors=False, delay_per_input=0.004).start() for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


def chunks(n: int) -> list[Chunk]:
    out = []
    for i in range(n):
        text = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(5 + i % 30)) + f" number {i}"
        out.append(Chunk(f"doc{i // 10}.md", i % 10, "", text, 0, len(text), 0, 0))
    return out


def settings(servers: list[FakeOllama]) -> Settings:
    return Settings.of(
        embedder="ollama",
        embed_model="nomic-embed-text",
        ollama_url=",".join(s.url for s in servers),
        ollama_retries=0,
        batch_size=4,
    )


def run(
    servers: list[FakeOllama],
    todo: list[Chunk],
    cache_dir: Path,
    warnings: list[str] | None = None,
    progress: list[tuple[str, int, int]] | None = None,
):
    s = settings(servers)
    spec = spec_for(s)
    cache = VectorCache(cache_dir, spec.identity, spec.dims)
    seen = progress if progress is not None else []
    outcome = embed_stage(
        cache,
        todo,
        spec,
        lambda: make_lanes(
            s,
            spec,
            lambda: None,  # type: ignore[arg-type,return-value]
            lambda *a: seen.append(a),
            (warnings if warnings is not None else []).append,
        ),
        s.embed.batch_size,
        lambda *a: None,
    )
    return cache, outcome


def sent(servers: list[FakeOllama]) -> Counter[str]:
    return Counter(t for s in servers for t in s.inputs)


def test_three_hosts_embed_every_chunk_exactly_once_and_share_the_work(fakes, tmp_path):
    todo = chunks(120)
    progress: list[tuple[str, int, int]] = []
    cache, outcome = run(fakes, todo, tmp_path, progress=progress)
    counts = sent(fakes)
    expected = {"search_document: " + c.embed_text for c in todo}
    assert set(counts) == expected and set(counts.values()) == {1}
    assert all(len(s.inputs) > 0 for s in fakes), [len(s.inputs) for s in fakes]
    assert outcome.embedded == 120 and len(cache) == 120
    assert cache.path.stat().st_size == 120 * cache.record.itemsize  # one record per chunk: none torn or doubled
    assert sum(h["chunks"] for h in outcome.hosts.values()) == 120
    assert all(h["state"] == "ready" and h["chunks_per_s"] for h in outcome.hosts.values())
    assert {stage for stage, _, _ in progress} == {f"embed {s.url}" for s in fakes}  # each host's own progress
    # the cache holds each chunk's own vector, whichever host embedded it
    one = FakeOllama(real_vectors=False).start()
    try:
        from ragvps.embed import embed_documents
        from ragvps.embed.ollama import OllamaEmbedder

        spec = spec_for(settings(fakes))
        direct = embed_documents(OllamaEmbedder(one.url, spec), [c.embed_text for c in todo[:12]])
    finally:
        one.stop()
    np.testing.assert_allclose(cache.get([c.content_hash for c in todo[:12]]), direct, atol=1e-6)


def test_a_host_killed_mid_run_leaves_its_work_to_the_others(fakes, tmp_path):
    todo = chunks(120)
    fakes[1].die_after_inputs = 10  # answers two batches, then drops the third unanswered and stops listening
    warnings: list[str] = []
    cache, outcome = run(fakes, todo, tmp_path, warnings)
    fakes[1].wait_stopped()
    counts = sent(fakes)
    assert set(counts) == {"search_document: " + c.embed_text for c in todo} and set(counts.values()) == {1}
    assert len(fakes[1].inputs) == 8 and len(cache) == 120
    host = outcome.hosts[fakes[1].url]
    assert host["state"] == "cooling" and host["failures"] == 1 and "not reachable" in host["reason"]
    assert any(fakes[1].url in w and "other hosts" in w for w in warnings)


def test_a_host_that_disagrees_is_refused_by_name(fakes, tmp_path):
    fakes[0].models["nomic-embed-text"].dims = 1024
    del fakes[2].models["nomic-embed-text"]
    warnings: list[str] = []
    cache, outcome = run(fakes, chunks(40), tmp_path, warnings)
    assert len(fakes[1].inputs) == 40 and not fakes[0].inputs and not fakes[2].inputs
    assert any(fakes[0].url in w and "returns 1024 dimensions" in w for w in warnings)
    assert any(fakes[2].url in w and "run `ollama pull nomic-embed-text`" in w for w in warnings)
    assert outcome.hosts[fakes[0].url]["state"] == outcome.hosts[fakes[2].url]["state"] == "refused"


def test_no_host_left_is_one_line_naming_each_and_a_rerun_embeds_only_what_is_missing(fakes, tmp_path):
    todo = chunks(60)
    for f in fakes:
        f.die_after_inputs = 8
    with pytest.raises(EmbedderError) as info:
        run(fakes, todo, tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith("no Ollama host is left to embed with model nomic-embed-text")
    assert all(f"{f.url} not reachable" in message for f in fakes)
    kept = sum(len(f.inputs) for f in fakes)
    assert kept == 24
    for f in fakes:
        f.wait_stopped()
        f.inputs.clear()
        f.die_after_inputs = None
        f.start()  # back on the same port
    cache, outcome = run(fakes, todo, tmp_path)
    assert outcome.embedded == 60 - kept == sum(len(f.inputs) for f in fakes) and len(cache) == 60


# --- through `ragvps ingest`, into the database ----------------------------------------------------


def use_hosts(cli, servers: list[FakeOllama]) -> None:
    cli.env.update(
        {
            "RAGVPS_EMBEDDER": "ollama",
            "RAGVPS_OLLAMA_URL": ",".join(s.url for s in servers),
            "RAGVPS_EMBED_MODEL": "nomic-embed-text",
            "RAGVPS_OLLAMA_RETRIES": "0",
            "RAGVPS_BATCH_SIZE": "2",
        }
    )


def stored(db_url: str) -> tuple[int, int, int]:
    """Chunks, vectors, distinct chunks with a vector."""
    import psycopg

    with psycopg.connect(db_url) as conn:
        table = conn.execute("SELECT table_name FROM embedding_sets WHERE active").fetchone()[0]
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        vectors, distinct = conn.execute(f"SELECT count(*), count(DISTINCT chunk_id) FROM {table}").fetchone()
    return chunks, vectors, distinct


def test_ingest_over_three_hosts_one_killed_midway(cli, folder, fakes, db_url):
    import json

    use_hosts(cli, fakes)
    for f in fakes:
        f.delay_per_input = 0.01  # every lane is busy for the whole run: each takes several batches
    fakes[2].die_after_inputs = 2  # answers its first batch, drops its second
    result = cli("ingest", str(folder), "--json")
    report = json.loads(result.stdout)
    counts = sent(fakes)
    assert len(counts) == report["chunks"] == report["embedded"] and set(counts.values()) == {1}
    assert stored(db_url) == (report["chunks"],) * 3
    assert all(len(s.inputs) for s in fakes) and len(fakes[2].inputs) == 2
    assert report["hosts"][fakes[2].url]["state"] == "cooling"
    assert f"Ollama is not reachable at {fakes[2].url}" in " ".join(result.stderr.split())


def test_ingest_with_every_host_down_fails_in_one_line_and_the_rerun_embeds_only_what_is_missing(
    cli, folder, fakes, db_url
):
    import json

    use_hosts(cli, fakes)
    for f in fakes:
        f.die_after_inputs = 4
    result = cli("ingest", str(folder), expect=1)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no Ollama host is left" in lines[0]
    assert all(f"{f.url} not reachable" in " ".join(result.stderr.split()) for f in fakes)
    kept = sum(len(f.inputs) for f in fakes)
    for f in fakes:
        f.wait_stopped()
        f.inputs.clear()
        f.die_after_inputs = None
        f.start()
    report = json.loads(cli("ingest", str(folder), "--json").stdout)
    assert report["embedded"] == report["chunks"] - kept == sum(len(f.inputs) for f in fakes)
    assert stored(db_url) == (report["chunks"],) * 3


def test_local_lanes_embed_every_chunk_once_with_the_one_thread_model_and_stop_at_a_failure():
    """The local model on every core: a lane a core, each one onnxruntime thread; vectors as the model gives them
    alone; a batch that fails stops the run, the batches answered before it are kept."""
    import os

    from ragvps.embed.hosts import ThreadLanes
    from ragvps.embed.local import LocalEmbedder
    from ragvps.errors import InputTooLongError

    settings = Settings.of(embedder="local")  # MiniLM: a lane a core (the multilingual default shares one model)
    spec = spec_for(settings)
    lanes = make_lanes(settings, spec, lambda: pytest.fail("the lanes load their own one-thread model"))
    assert isinstance(lanes, ThreadLanes) == ((os.cpu_count() or 1) > 1)
    texts = [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} note {i}" for i in range(40)]
    batches = [texts[i : i + 4] for i in range(0, 40, 4)]
    got = {
        t: v
        for items, vectors in lanes.run(batches, lambda e, b, emit: emit(b, e.embed(b)))
        for t, v in zip(items, vectors, strict=True)
    }
    alone = LocalEmbedder(threads=1, spec=spec).embed(texts)
    assert sorted(got) == sorted(texts) and np.allclose(np.stack([got[t] for t in texts]), alone, atol=1e-5)

    def fails_on_the_fifth(embedder, batch, emit):
        if batch is batches[4]:
            raise InputTooLongError("too long")
        emit(batch, np.zeros((len(batch), spec.dims), np.float32))

    kept: list[str] = []
    with pytest.raises(InputTooLongError):
        for items, _ in ThreadLanes([LocalEmbedder(threads=1, spec=spec)] * 2).run(batches, fails_on_the_fifth):
            kept += items
    assert set(kept) <= set(texts) - set(batches[4]) and len(kept) == len(set(kept))
