"""The use-case layer driven directly, the way the HTTP API drives it: no CLI in between."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import waiting

from ragvps.app import App, SearchRequest
from ragvps.config import Settings
from ragvps.errors import EXIT_CODES, HTTP_STATUS, ModelMismatchError, RagvpsError, UsageError
from ragvps.retrieve.filters import Filters

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.fixture
def settings(db_url: str, tmp_path: Path) -> Settings:
    return Settings.of(database_url=db_url, data_dir=tmp_path / "data")


def test_ingest_then_search_through_the_app(settings: Settings, tmp_path: Path):
    shutil.copytree(DOCS, tmp_path / "docs")
    stages: set[str] = set()
    with App.open(settings) as app:
        report = app.ingest(tmp_path / "docs", lambda stage, done, total: stages.add(stage))
        assert report.documents >= 5 and report.embedded == report.chunks > 0
        assert {"chunk", "embed", "store"} <= stages
        first = app.embedder
        result = app.search(SearchRequest("what happens when I run ingest twice?", k=3))
        assert app.embedder is first  # the model loaded once for the whole process
        assert [h.rank for h in result.hits] == [1, 2, 3]
        assert result.hits[0].path == "incremental-ingest.md"
        top = result.hits[0]
        stored = top.text
        assert 0 <= top.start < top.end and top.end - top.start <= len(stored) + len(top.heading_path) + 400
        assert result.model == app.spec.name and result.timings["search_ms"] > 0
        only = app.search(SearchRequest("rank fusion", mode="keyword", filters=Filters(path_prefix="search")))
        assert only.hits and all(h.path.startswith("search") for h in only.hits)
        health = app.health()
        assert health.ready and not health.empty and health.chunks == report.chunks and health.dims == 512
        assert app.stats().rows["chunks"] == report.chunks
        again = app.ingest(tmp_path / "docs")
        assert again.embedded == 0 and again.unchanged == report.documents


def test_use_case_errors_carry_a_kind(settings: Settings, tmp_path: Path):
    with App.open(settings) as app:
        with pytest.raises(UsageError, match="nothing is ingested yet"):
            app.search(SearchRequest("anything"))
        with pytest.raises(UsageError, match="mode 'fuzzy'"):
            app.search(SearchRequest("anything", mode="fuzzy"))  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="the path is empty"):
            app.ingest("")
        health = app.health()  # empty is a state, not a failure: ready to take the first ingest
        assert health.ready and health.database and health.empty and health.chunks == 0 and health.model is None
    for kind in ("usage", "config", "not_found", "conflict", "unavailable", "too_long", "failed"):
        error = RagvpsError("x", kind=kind)  # type: ignore[arg-type]
        assert error.exit_code == EXIT_CODES[kind] and error.http_status == HTTP_STATUS[kind]


def test_a_pooled_app_serves_threads_with_one_embedder(settings: Settings, tmp_path: Path):
    from concurrent.futures import ThreadPoolExecutor

    shutil.copytree(DOCS, tmp_path / "docs")
    with App.open(settings) as app:
        app.ingest(tmp_path / "docs")
        alone = app.search(SearchRequest("how do I rotate the keys?", k=5))
    assert alone.legs == "sequential"  # one connection: the legs one after the other
    with App.open(settings.replace(pool_size=3), pooled=True) as app:
        questions = ["how do I rotate the keys?", "what does reindex do?", "embedded database"] * 4
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda q: app.search(SearchRequest(q, k=2)), questions))
        assert all(len(r.hits) == 2 for r in results)
        assert results[0].hits == results[3].hits  # same question, same answer, whichever connection
        # Alone, a hybrid search's keyword leg runs on a spare connection (once the pool has grown to one).
        again = [app.search(SearchRequest("how do I rotate the keys?", k=5)) for _ in range(10)]
        parallel = [r for r in again if r.legs == "parallel"]
        assert parallel and parallel[-1].hits == alone.hits
        assert {"embed_ms", "keyword_ms", "keyword_wait_ms", "vector_ms", "fusion_ms"} <= set(parallel[-1].timings)
        with app.connection():  # one of three held: with the search's own, more than half the pool is busy
            busy = app.search(SearchRequest("how do I rotate the keys?", k=5))
        assert busy.legs == "fallback" and busy.hits == alone.hits  # on its own connection, beside the embedding
        assert app.search(SearchRequest("embedded database", mode="keyword")).legs == ""  # one leg
        with app.connection() as a, app.connection() as b, app.connection() as c:  # searches ran in autocommit
            assert not any(conn.autocommit for conn in (a, b, c))  # and gave their connections back as they were


def test_a_model_switched_under_an_app_is_refused_and_the_next_search_before_its_embedding(
    settings: Settings, tmp_path: Path
):
    shutil.copytree(DOCS, tmp_path / "docs")
    with App.open(settings) as app:
        app.ingest(tmp_path / "docs")
        assert app.search(SearchRequest("rank fusion", k=1)).hits  # the set matched: checked in the search only
        with app.connection() as conn:
            conn.execute("UPDATE embedding_sets SET identity = 'another-model|||384' WHERE active")
        embedded: list[str] = []
        real = app.embed_query
        app.embed_query = lambda text: embedded.append(text) or real(text)  # type: ignore[method-assign]
        for question in ("rank fusion", "reindex"):
            with pytest.raises(ModelMismatchError, match="run `ragvps reindex` to switch"):
                app.search(SearchRequest(question, k=1))
        assert embedded == ["rank fusion"]  # the second was refused before its question was embedded


def test_chunk_imports_neither_the_database_driver_nor_numpy(tmp_path):
    """`ragvps chunk` runs the chunk stage alone: none of the App's imports (psycopg, numpy, the model), and PDFium
    only in the PDF reader's process, which it forks as it starts."""
    from tests.test_pdf_pages import text_pdf

    (tmp_path / "docs").mkdir()
    text_pdf(tmp_path / "docs" / "harbour.pdf", ["The harbour opened in spring.", "The quay was built of stone."])
    (tmp_path / "docs" / "notes.md").write_text("# Notes\n\nThe lighthouse keeper counts ships.\n")
    (tmp_path / "empty.toml").write_text("")
    code = (
        "import runpy, sys, json\n"
        f"sys.argv = ['ragvps', 'chunk', {str(tmp_path / 'docs')!r}, '--json']\n"
        "try:\n"
        "    runpy.run_module('ragvps', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "from ragvps.ingest import pdfproc\n"
        "loaded = [m for m in ('psycopg', 'numpy', 'onnxruntime', 'pypdfium2') if m in sys.modules]\n"
        "print(json.dumps([loaded, type(pdfproc._CHILDREN[0].process).__name__]))\n"
    )
    env = {**os.environ, "RAGVPS_DATA_DIR": str(tmp_path / "data"), "RAGVPS_CONFIG": str(tmp_path / "empty.toml")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=waiting.seconds(300),
    )
    *summary, last = done.stdout.strip().splitlines()
    assert json.loads(last) == [[], "_Forked"]
    report = json.loads("\n".join(summary))
    assert report["files"] == 2 and report["documents"] == 2 and report["chunks"] == 3, report  # a page ends a chunk


def test_help_and_plan_import_neither_the_database_driver_nor_the_model():
    """`ragvps --help` and `ragvps plan` stay instant: psycopg and onnxruntime load only when used."""
    code = (
        "import runpy, sys, json\n"
        "for argv in (['ragvps', '--help'], ['ragvps', 'plan', '--tokens', '2500', '--chunk-size', '800']):\n"
        "    sys.argv = argv\n"
        "    try:\n"
        "        runpy.run_module('ragvps', run_name='__main__')\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps([m for m in ('psycopg', 'onnxruntime', 'tokenizers', 'httpx') if m in sys.modules]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
