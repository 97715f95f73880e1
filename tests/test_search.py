"""Search against real PostgreSQL: BM25 keyword leg, filters with HNSW iterative scan, hostile query text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from psycopg import sql

from ragvps.config import Settings
from ragvps.db import index, store
from ragvps.db.database import connect
from ragvps.db.sql import compose
from ragvps.errors import UsageError
from ragvps.records import Chunk, Document, ModelSpec
from ragvps.retrieve import fusion, search

DOCS = Path(__file__).resolve().parents[1] / "docs"
SPEC = ModelSpec("fake-8", 8, 256)


def _doc(doc_id: str, text: str, source: str | None = None, metadata: dict | None = None) -> Document:
    return Document(doc_id, source or doc_id, "", text, "txt", metadata or {})


def _write(conn: psycopg.Connection, eset: store.EmbeddingSet, docs: list[Document], vectors: np.ndarray) -> None:
    rows = []
    for doc, vec in zip(docs, vectors, strict=True):
        chunk = Chunk(doc.doc_id, 0, doc.title, doc.text, 0, len(doc.text), 1, 1)
        rows.append((doc, [chunk], vec[None, :]))
    store.replace_documents(conn, eset, "/root", "k", "english", rows)


@pytest.fixture
def conn(db_url: str) -> psycopg.Connection:
    settings = Settings.of(database_url=db_url)
    with connect(settings) as c:
        yield c


def _reference_bm25(conn: psycopg.Connection, query: str, k1: float = 1.2, b: float = 0.75) -> list[tuple[int, float]]:
    """BM25 computed in Python from each chunk's lexemes, as the SQL is meant to compute it."""
    tsv = {}
    rows = conn.execute(
        "SELECT c.id, u.lexeme, cardinality(u.positions) FROM chunks c, "
        "unnest(to_tsvector(c.language, c.heading_path || ' ' || c.text)) u"
    )
    for cid, lexeme, n in rows:
        tsv.setdefault(cid, {})[lexeme] = n
    terms = [r[0] for r in conn.execute("SELECT unnest(tsvector_to_array(to_tsvector('english', %s)))", (query,))]
    n_chunks = len(tsv)
    avgdl = sum(len(t) for t in tsv.values()) / n_chunks
    df = {t: sum(1 for lex in tsv.values() if t in lex) for t in terms}
    scores = {}
    for cid, lex in tsv.items():
        score = 0.0
        for t in terms:
            if t in lex:
                idf = math.log(1 + (n_chunks - df[t] + 0.5) / (df[t] + 0.5))
                score += idf * lex[t] * (k1 + 1) / (lex[t] + k1 * (1 - b + b * len(lex) / avgdl))
        if score:
            scores[cid] = score
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


TSV = "to_tsvector(language, heading_path || ' ' || text)"  # a chunk's lexemes, from its text
CORPUS = [
    "Protein folding in cells depends on chaperone proteins.",
    "Protein intake and muscle growth in adults.",
    "The zebrafish is a model organism for heart regeneration.",
    "Zebrafish protein expression during fin regeneration, protein by protein.",
    "Cells divide; cells grow; cells die.",
    "Muscle cells and heart cells differ in their protein content.",
    "A note about nothing in particular.",
]


def test_keyword_leg_is_bm25_and_finds_partial_matches(conn):
    eset = store.ensure_set(conn, SPEC, "vector", activate=True)
    _write(conn, eset, [_doc(f"d{i}", t) for i, t in enumerate(CORPUS)], np.eye(len(CORPUS), 8, dtype=np.float32))
    ids = dict(conn.execute("SELECT d.doc_id, c.id FROM chunks c JOIN documents d ON d.id = c.document_id"))
    by_id = {v: k for k, v in ids.items()}
    settings = Settings()
    for query in ("zebrafish protein", "heart regeneration in muscle cells", "protein", "cells unicornword"):
        got = search.keyword_leg(conn, query, settings, bm25=search.Bm25(budget=10**6))
        want = _reference_bm25(conn, query)
        assert [by_id[c] for c in got] == [by_id[c] for c, _ in want], query
    # The rare word outweighs the common one: IDF, which ts_rank_cd lacks.
    assert [by_id[c] for c in search.keyword_leg(conn, "zebrafish protein", settings)][:2] == ["d3", "d2"]
    # A question with a word no chunk has still finds the chunks with the others.
    assert by_id[search.keyword_leg(conn, "cells unicornword", settings)[0]] == "d4"
    assert search.keyword_leg(conn, "unicornword", settings) == []
    assert search.keyword_leg(conn, "the and of", settings) == []  # stop words only


def test_the_legs_scores_are_the_ones_each_leg_ranks_by_and_convex_fusion_uses_them(conn):
    eset = store.ensure_set(conn, SPEC, "vector", activate=True)
    vectors = np.eye(len(CORPUS), 8, dtype=np.float32)
    _write(conn, eset, [_doc(f"d{i}", t) for i, t in enumerate(CORPUS)], vectors)
    ids = dict(conn.execute("SELECT d.doc_id, c.id FROM chunks c JOIN documents d ON d.id = c.document_id"))
    query = vectors[2] + 0.5 * vectors[3]
    vec = search.vector_scored(conn, eset, query, Settings())
    unit = query / np.linalg.norm(query)
    assert vec[0] == (ids["d2"], pytest.approx(float(unit @ vectors[2]), abs=1e-6))  # the cosine, best first
    assert [s for _, s in vec] == sorted((s for _, s in vec), reverse=True)
    kw = search.keyword_scored(conn, "zebrafish protein", Settings(), bm25=search.Bm25(budget=10**6))
    want_kw = _reference_bm25(conn, "zebrafish protein")
    assert [c for c, _ in kw] == [c for c, _ in want_kw]  # pytest.approx takes no nested data (9.2)
    assert [s for _, s in kw] == pytest.approx([s for _, s in want_kw])
    settings = Settings.of(fusion="convex", vector_weight=3.0)
    kw = search.keyword_scored(conn, "zebrafish protein", settings)
    hits = search.search(conn, eset, "zebrafish protein", query, settings, k=len(CORPUS))
    by_chunk = {c: doc for doc, c in ids.items()}
    want = fusion.convex([vec, kw], [3.0, 1.0])
    assert [(h.doc_id, h.score) for h in hits] == [(by_chunk[c], pytest.approx(s)) for c, s in want]
    assert hits[0].doc_id == "d2" and hits[0].score <= 1.0  # the vector leg's first, weighted 3 to 1


def test_candidate_budget_keeps_the_best_when_common_words_are_left_out(conn):
    eset = store.ensure_set(conn, SPEC, "vector", activate=True)
    docs = [_doc(f"c{i}", f"common words filler text number {i}") for i in range(60)]
    docs.append(_doc("rare", "common words about the axolotl"))
    _write(conn, eset, docs, np.ones((len(docs), 8), dtype=np.float32))
    settings = Settings()
    got = search.keyword_leg(conn, "axolotl common words", settings, bm25=search.Bm25(budget=5))
    names = dict(conn.execute("SELECT c.id, d.doc_id FROM chunks c JOIN documents d ON d.id = c.document_id"))
    assert [names[c] for c in got] == ["rare"]  # only the rarest lexeme found candidates
    full = search.keyword_leg(conn, "axolotl common words", settings, bm25=search.Bm25(budget=10**6))
    assert names[full[0]] == "rare" and len(full) == settings.search.candidates


def test_term_statistics_follow_every_write(conn):
    eset = store.ensure_set(conn, SPEC, "vector", activate=True)
    docs = [_doc(f"d{i}", t) for i, t in enumerate(CORPUS)]
    _write(conn, eset, docs, np.eye(len(docs), 8, dtype=np.float32))
    _write(conn, eset, [_doc("d1", "Replaced: zebrafish only.")], np.eye(1, 8, dtype=np.float32))
    store.delete_documents(conn, "/root", ["d2", "d5"])
    conn.execute(
        "UPDATE chunks SET text = 'edited heart text' WHERE seq = 0 AND document_id = "
        "(SELECT id FROM documents WHERE doc_id = 'd0')"
    )
    conn.commit()
    stats = dict(conn.execute("SELECT lexeme, df FROM term_stats"))
    truth = dict(conn.execute("SELECT word, ndoc FROM ts_stat(%s)", (f"SELECT {TSV} FROM chunks",)))
    assert stats == truth and stats["zebrafish"] == 2
    totals = conn.execute("SELECT chunks, lengths FROM corpus_stats").fetchone()
    assert totals == conn.execute(f"SELECT count(*), sum(length({TSV})) FROM chunks").fetchone() == (5, totals[1])
    terms = conn.execute(f"SELECT c.id, {TSV} FROM chunks c ORDER BY c.id").fetchall()
    assert terms == conn.execute("SELECT id, tsv FROM chunk_terms ORDER BY id").fetchall()  # the keyword leg's rows
    assert conn.execute("SELECT count(*) FROM chunk_terms WHERE len <> length(tsv)").fetchone()[0] == 0
    conn.execute("TRUNCATE chunks CASCADE")
    assert conn.execute(
        "SELECT (SELECT count(*) FROM chunk_terms), (SELECT count(*) FROM term_stats), "
        "chunks, lengths FROM corpus_stats"
    ).fetchone() == (0, 0, 0, 0)


def test_filtered_vector_query_still_returns_k_rows_through_hnsw(conn):
    eset = store.ensure_set(conn, SPEC, "vector", activate=True)
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(3000, 8)).astype(np.float32)
    docs = [
        _doc(
            f"d{i}",
            f"text {i}",
            source=("rare/" if i % 10 == 0 else "common/") + f"{i}.md",
            metadata={"team": "blue" if i % 50 == 0 else "red"},
        )
        for i in range(3000)
    ]
    _write(conn, eset, docs, vectors)
    settings = Settings.of(index_min_rows=1000, candidates=20, ef_search=20)
    assert index.ensure_index(conn, eset, settings)
    conn.execute("ANALYZE")
    query = rng.normal(size=8).astype(np.float32)
    filters = search.Filters(path_prefix="rare/")
    with conn.transaction():
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                sql.SQL("EXPLAIN ") + compose("vector_search_filtered", table=eset.table, filter=filters.condition()),
                {"embedding": query, "candidates": 20} | filters.params(),
            )
        )
    assert eset.index_name in plan
    got = search.vector_leg(conn, eset, query, settings, filters)
    index_of = {
        cid: int(doc_id[1:])
        for cid, doc_id in conn.execute("SELECT c.id, d.doc_id FROM chunks c JOIN documents d ON d.id = c.document_id")
    }
    assert len(got) == 20 and all(index_of[c] % 10 == 0 for c in got)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    exact = sorted(range(0, 3000, 10), key=lambda i: -float(unit[i] @ query))[:20]
    assert len({index_of[c] for c in got} & set(exact)) >= 16  # HNSW is approximate
    # Without the iterative scan, HNSW's 20 nearest would hold about two "rare/" rows.
    with conn.transaction():
        conn.execute("SET LOCAL hnsw.ef_search = 20")
        plain = conn.execute(
            compose("vector_search_filtered", table=eset.table, filter=filters.condition()),
            {"embedding": query, "candidates": 20} | filters.params(),
        ).fetchall()
    assert len(plain) < 10
    # A filter so selective that fewer than k rows match returns them all.
    few = search.vector_leg(conn, eset, query, settings, search.Filters(path_prefix="rare/100"))
    assert sorted(index_of[c] for c in few) == [100, 1000]
    blue = search.keyword_leg(conn, "text", settings, search.Filters(metadata={"team": "blue"}))
    assert len(blue) == 20 and {index_of[c] % 50 for c in blue} == {0}


@pytest.fixture(scope="module")
def module_conn(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> psycopg.Connection:
    settings = Settings.of(database_url=module_db_url)
    with connect(settings) as c:
        eset = store.ensure_set(c, SPEC, "vector", activate=True)
        _write(c, eset, [_doc(f"d{i}", t) for i, t in enumerate(CORPUS)], np.eye(len(CORPUS), 8, dtype=np.float32))
        c.commit()
        yield c


@given(st.text(max_size=300))
@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_keyword_leg_never_errors_on_any_text(module_conn, text):
    try:
        text = search.check_query(text)
    except UsageError as exc:
        assert "no words" in str(exc)
        return
    got = search.keyword_leg(module_conn, text, Settings())
    assert isinstance(got, list) and len(got) <= Settings().search.candidates


@pytest.mark.parametrize(
    "text",
    [
        "it's O'Reilly's \\ back\\slash 'quoted' \"double\"",
        "a & b | !c <-> (d:*",
        "NUL\x00in the middle",
        "lone surrogate \udcff from a bad terminal",
        "x" * 3000 + " protein",
        '-protein OR "cells"',
    ],
)
def test_hostile_text_searches_normally(module_conn, text):
    got = search.keyword_leg(module_conn, search.check_query(text), Settings())
    assert isinstance(got, list)


def test_check_query_explains_what_is_wrong():
    with pytest.raises(UsageError, match="no words"):
        search.check_query(" ?! ")
    with pytest.raises(UsageError, match="at most 20,000"):
        search.check_query("word " * 5000)
    assert search.check_query(" cells\x00divide ") == "cells divide"


@pytest.fixture
def folder(folder: Path) -> Path:
    """The docs pages and a page in a subfolder."""
    target = folder
    (target / "team").mkdir()
    (target / "team" / "notes.md").write_text("# Team notes\n\nThe search service answers questions about pgvector.\n")
    return target


def test_cli_filters_by_path_prefix_and_modes(cli, folder):
    cli("ingest", str(folder), "--json")
    hits = json.loads(cli("query", "pgvector", "--path-prefix", "team/", "--json").stdout)
    assert [h["path"] for h in hits] == ["team/notes.md"]
    for mode in ("vector", "keyword"):
        hits = json.loads(cli("query", "pgvector", "--mode", mode, "--path-prefix", "team/", "--json").stdout)
        assert {h["path"] for h in hits} == {"team/notes.md"}
    assert json.loads(cli("query", "pgvector", "--meta", "lang=xx", "--json").stdout) == []
    bad = cli("query", "pgvector", "--meta", "nokey", expect=2)
    assert "KEY=VALUE" in bad.stderr
    odd = cli("query", 'what\'s "pgvector" -- OR 1=1; DROP TABLE chunks', "--mode", "keyword", "--json")
    assert json.loads(odd.stdout)
