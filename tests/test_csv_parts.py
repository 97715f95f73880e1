"""A large CSV is read, chunked, embedded and stored in parts (ragvps.ingest.parts), each part a document whose
table repeats the header row: progress in rows, nothing embedded or stored again for the same file, a run cut
short goes on to the same final state, a shorter file loses its parts beyond the end, and an upload job shows the
rows read. The part size is made small here (the bench measures the memory of a 1,000,000-row file)."""

from __future__ import annotations

import psycopg
import pytest
from support.asgi_server import in_process
from support.serve_server import ragvps_env

from ragvps.app import App
from ragvps.config import load_settings
from ragvps.ingest import parts
from ragvps.ingest.formats import delimited

HEADER = "| sku | aisle | count |"


@pytest.fixture(autouse=True)
def small_parts(monkeypatch):
    monkeypatch.setattr(parts, "STREAM_BYTES", 1)
    monkeypatch.setattr(delimited, "PART_ROWS", 100)


def write_csv(path, rows: int) -> None:
    path.write_text("sku,aisle,count\n" + "".join(f"SKU-{i:05},aisle {i % 17},{i * 7 % 1000}\n" for i in range(rows)))


def stored(db_url: str) -> tuple[list[str], list[str], int]:
    """Document ids, chunk texts (by document and order), vectors."""
    with psycopg.connect(db_url) as conn:
        table = conn.execute("SELECT table_name FROM kb_1.embedding_sets WHERE active").fetchone()[0]
        docs = [r[0] for r in conn.execute("SELECT doc_id FROM kb_1.documents ORDER BY doc_id")]
        texts = [
            r[0]
            for r in conn.execute(
                "SELECT c.text FROM kb_1.chunks c JOIN kb_1.documents d "
                "ON d.id = c.document_id ORDER BY d.doc_id, c.seq"
            )
        ]
        vectors = conn.execute(f"SELECT count(*) FROM kb_1.{table}").fetchone()[0]
    return docs, texts, vectors


def ingest(env, folder, progress=lambda *_: None):
    with App.open(load_settings(env=env)) as app:
        return app.ingest(folder, progress)


def test_a_large_csv_is_stored_in_parts_each_headed_and_again_embeds_nothing(db_url, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    write_csv(folder / "stock.csv", 450)
    env = ragvps_env(db_url, tmp_path / "data")
    seen: list[tuple[str, int, int]] = []
    report = ingest(env, folder, lambda stage, done, total: seen.append((stage, done, total)))
    rows = [(done, total) for stage, done, total in seen if stage == "rows stock.csv"]
    assert rows == [(0, 450), (100, 450), (200, 450), (300, 450), (400, 450), (450, 450)]
    docs, texts, vectors = stored(db_url)
    assert docs == [
        "stock.csv#rows-1-100",
        "stock.csv#rows-101-200",
        "stock.csv#rows-201-300",
        "stock.csv#rows-301-400",
        "stock.csv#rows-401-450",
    ]
    assert all(t.startswith(HEADER) for t in texts) and vectors == len(texts)
    assert sum(t.count("| SKU-") for t in texts) == 450  # every row once
    assert (report.documents, report.chunks, report.embedded, report.stored) == (5, len(texts), len(texts), 5)

    again = ingest(env, folder)
    assert (again.embedded, again.stored, again.unchanged, again.deleted, again.chunks) == (0, 0, 5, 0, len(texts))
    assert stored(db_url) == (docs, texts, vectors)


def test_a_run_cut_short_goes_on_to_the_same_state_and_a_shorter_file_loses_its_last_parts(
    db_url, new_database, tmp_path
):
    folder = tmp_path / "files"
    folder.mkdir()
    write_csv(folder / "stock.csv", 450)
    env = ragvps_env(db_url, tmp_path / "data")

    def killed_after_two_parts(stage: str, done: int, total: int) -> None:
        if stage == "rows stock.csv" and done == 200:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ingest(env, folder, killed_after_two_parts)
    assert stored(db_url)[0] == ["stock.csv#rows-1-100", "stock.csv#rows-101-200"]
    resumed = ingest(env, folder)
    assert (resumed.stored, resumed.unchanged) == (3, 2)
    clean_url = new_database("clean")
    ingest(env | {"RAGVPS_DATABASE_URL": clean_url}, folder)
    assert stored(db_url) == stored(clean_url)

    write_csv(folder / "stock.csv", 150)
    shorter = ingest(env, folder)
    assert (shorter.unchanged, shorter.stored, shorter.deleted) == (1, 1, 4)
    docs, texts, vectors = stored(db_url)
    assert docs == ["stock.csv#rows-1-100", "stock.csv#rows-101-150"] and vectors == len(texts)
    assert sum(t.count("| SKU-") for t in texts) == 150


def test_an_upload_job_shows_the_rows_read_of_a_large_csv(db_url, tmp_path):
    """The job runs in this process (the server's own worker is a child process, with the real part size)."""
    import threading

    from test_documents_worker import staged_job

    from ragvps.app import documents as d

    env = ragvps_env(db_url, tmp_path / "data", defer_embedding="true")
    folder = tmp_path / "files"
    folder.mkdir()
    write_csv(folder / "stock.csv", 450)
    job = staged_job(env, folder)
    with App.open(load_settings(env=env), pooled=True) as app:
        assert d.run_jobs(app, "here", threading.Event(), exit_when_empty=True, poll=0.2).jobs == 1
    with in_process(env) as srv, srv.client() as c:
        status = c.get(f"/jobs/{job}").json()
    assert status["state"] == "done", status
    (file,) = status["files"]
    assert (file["state"], file["documents"], file["rows_done"], file["rows_total"]) == ("done", 5, 450, 450)
    assert file["chunks"] == len(stored(db_url)[1]) and status["bytes_done"] == status["bytes_total"]


def test_a_file_being_read_in_parts_counts_its_rows_read_in_the_bytes_done():
    from datetime import UTC, datetime

    from ragvps.app.documents import status_of
    from ragvps.db.jobs import FileRow, JobRow

    now = datetime.now(UTC)
    row = JobRow("running", False, now, now, None, "w", 1, 0, None, 10.0)
    files = [
        FileRow(0, "a.md", 100, "done", None, 1, 2, None, None),
        FileRow(1, "big.csv", 1000, "pending", None, 0, 0, 250, 1000),
    ]
    status = status_of("j1-x", row, files)
    assert (status.bytes_done, status.bytes_total, status.files_done) == (350, 1100, 1)
    assert (status.files[1].rows_done, status.files[1].rows_total) == (250, 1000)
