"""`ragvps watch`: a folder kept in sync as it changes; deletes remove documents, moves embed nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest
from support import waiting

from ragvps.app import App
from ragvps.config import Settings
from ragvps.errors import UsageError


def _wait(reports: list, count: int, timeout: float = 60.0) -> None:
    end = waiting.deadline(timeout)
    while len(reports) < count:
        assert time.monotonic() < end, f"no ingest after the change ({len(reports)} reports)"
        time.sleep(0.05)


def _docs(db_url: str) -> dict[str, str]:
    with psycopg.connect(db_url) as conn:
        return dict(conn.execute("SELECT doc_id, title FROM documents").fetchall())


def test_watch_follows_adds_moves_and_deletes(db_url: str, tmp_path: Path):
    folder = tmp_path / "docs"
    (folder / "archive").mkdir(parents=True)
    (folder / "alpha.md").write_text("# Alpha\n\nThe alpha file tells of lighthouses and their keepers.\n")
    settings = Settings.of(database_url=db_url, data_dir=tmp_path / "data")
    reports: list = []
    stop = threading.Event()
    with App.open(settings) as app:
        thread = threading.Thread(
            target=app.watch,
            args=(folder, lambda r, n: reports.append((r, n))),
            kwargs={"stop": stop, "debounce_ms": 200},
        )
        thread.start()
        try:
            _wait(reports, 1)
            assert reports[0][0].stored == 1 and reports[0][0].embedded > 0 and reports[0][1] == 0
            (folder / "beta.md").write_text("# Beta\n\nBeta is about harbour cranes.\n")
            (folder / ".hidden.md").write_text("# Hidden\n\nnever ingested\n")
            _wait(reports, 2)
            assert _docs(db_url) == {"alpha.md": "Alpha", "beta.md": "Beta"}
            assert reports[1][0].stored == 1 and reports[1][0].unchanged == 1
            embedded = sum(r.embedded for r, _ in reports)
            (folder / "alpha.md").rename(folder / "archive" / "alpha.md")
            end = waiting.deadline(60)
            while "archive/alpha.md" not in _docs(db_url) or "alpha.md" in _docs(db_url):
                assert time.monotonic() < end, "the move was not followed"
                time.sleep(0.05)
            assert sum(r.embedded for r, _ in reports) == embedded  # moved: no new embedding
            (folder / "beta.md").unlink()
            # the deletion itself, not the next report: a report of the move's second batch may come first
            waiting.wait_until(lambda: _docs(db_url) == {"archive/alpha.md": "Alpha"}, "the deletion to be followed")
        finally:
            stop.set()
            thread.join(30)
        assert not thread.is_alive()


def test_watch_needs_a_folder(db_url: str, tmp_path: Path):
    (tmp_path / "one.md").write_text("# One\n\ntext\n")
    with (
        App.open(Settings.of(database_url=db_url, data_dir=tmp_path / "data")) as app,
        pytest.raises(UsageError, match="is not a folder"),
    ):
        app.watch(tmp_path / "one.md", lambda r, n: None)
