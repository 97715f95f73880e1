"""An upload job whose worker is killed (SIGKILL, a real `ragvps worker --jobs` process) mid-job: after its lease
another worker takes the job over from the first file not marked; every file ends stored once, with as many
chunks and vectors as a plain `ragvps ingest` of the same files gives."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from support import waiting
from support.serve_server import REPO, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

FILES = 150


def staged_job(env: dict[str, str], folder: Path) -> str:
    """A job of every file in `folder`, staged and queued as the upload route does."""
    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env)) as app:
        job = d.new_job_id(app)
        kb_dir = app.settings.database.kb_dir
        staging = d.staging_dir(kb_dir, job)
        staging.mkdir(parents=True)
        files = []
        for seq, path in enumerate(sorted(folder.iterdir())):
            shutil.copy(path, staging / str(seq))
            files.append(d.StagedFile(seq, path.name, f"incoming/{job}/{seq}", path.stat().st_size))
        return d.submit(app, job, files)


def marked(db_url: str, job: str) -> int:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT count(*) FROM kb_1.ingest_job_files WHERE job_id = %s AND state <> 'pending'", (job,)
        ).fetchone()[0]


def kill_worker_when(env: dict[str, str], name: str, seen: Callable[[], bool], what: str, poll: float) -> None:
    """Start a real `ragvps worker --jobs --name NAME`, wait (at most 120 s) until `seen()` says it is at work, and
    SIGKILL it there, as an OOM killer would."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "worker", "--jobs", "--name", name],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = waiting.deadline(120)
        while not seen():
            assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
            assert time.monotonic() < deadline, f"{name} {what} within 120 s"
            time.sleep(poll)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
    finally:
        if worker.poll() is None:
            worker.kill()


def test_a_killed_workers_job_is_taken_over_and_nothing_is_lost_or_stored_twice(db_url, new_database, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(FILES):
        (folder / f"note{i:03}.md").write_text(
            f"# Note {i}\n\nItem {i} of the inventory is a crate of {i * 7} "
            f"widgets kept on shelf {i % 13} of aisle {i % 5}.\n"
        )
    env = ragvps_env(db_url, tmp_path / "data", worker_lease="2", upload_batch_files="64")
    job = staged_job(env, folder)
    kill_worker_when(env, "doomed", lambda: marked(db_url, job) > 0, "marked no file", poll=0.05)
    left = FILES - marked(db_url, job)
    assert left > 0, "the worker finished before it was killed: nothing to take over"

    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env), pooled=True) as app:
        report = d.run_jobs(app, "taker", threading.Event(), exit_when_empty=True, poll=0.2)
        status = d.job_status(app, job)
    assert report.jobs == 1 and status.state == "done" and status.attempts == 2, status
    assert status.files_done == FILES and status.files_failed == 0
    assert {f.state for f in status.files} <= {"done", "unchanged"}

    plain_url = new_database("plain")  # the same data directory: its vector cache, so nothing is embedded again
    done = CliRunner().invoke(
        cli_app, ["ingest", str(folder)], env=env | {"RAGVPS_DATABASE_URL": plain_url}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    uploaded, plain = facts(db_url), facts(plain_url)
    assert uploaded == plain and uploaded[0] == FILES and uploaded[1] == uploaded[2]


def facts(url: str) -> tuple[int, int, int]:
    """Documents, chunks, vectors of the knowledge base `default`."""
    with psycopg.connect(url) as conn:
        table = conn.execute("SELECT table_name FROM kb_1.embedding_sets WHERE active").fetchone()[0]
        row = conn.execute(
            f"SELECT (SELECT count(*) FROM kb_1.documents), (SELECT count(*) FROM kb_1.chunks), "
            f"(SELECT count(*) FROM kb_1.{table})"
        ).fetchone()
    return row[0], row[1], row[2]


def test_a_job_that_cannot_run_ends_failed_and_its_files_fail_with_why(db_url, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    for i in range(3):
        (folder / f"memo{i}.md").write_text(f"# Memo {i}\n\nThe memo {i} is about crates.\n")
    env = ragvps_env(db_url, tmp_path / "data")
    job = staged_job(env, folder)
    (tmp_path / "data/kb/default/uploads").write_text("a file where the uploads folder should be")

    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env), pooled=True) as app:
        report = d.run_jobs(app, "worker", threading.Event(), exit_when_empty=True, poll=0.2)
        status = d.job_status(app, job)
    assert report.jobs == 1 and status.state == "failed", status
    assert status.error is not None and status.error.startswith("the job could not run") and "uploads" in status.error
    assert status.files_failed == 3 and all(f.error == status.error for f in status.files)
    assert not (tmp_path / "data/kb/default/incoming" / job).exists()  # nothing left staged


def in_hand(db_url: str, job: str, name: str) -> str | None:
    """The worker holding the job while it reads file `name` (None when the file is not in anyone's hand)."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT j.claimed_by FROM kb_1.ingest_job_files f JOIN kb_1.ingest_jobs j "
            "ON j.id = f.job_id WHERE f.job_id = %s AND f.name = %s AND f.in_hand = j.claim",
            (job, name),
        ).fetchone()
    return None if row is None else row[0]


def test_a_file_that_kills_every_worker_fails_by_name_after_the_limit_and_the_others_are_stored(db_url, tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    for name in ("a.md", "b.md", "z.md"):
        (folder / name).write_text(f"# Memo {name}\n\nThe memo {name} lists the crates of aisle {len(name)}.\n")
    # Large enough that a worker is seen reading it (the test kills the worker then, as an OOM killer would)
    (folder / "huge.md").write_text(
        "".join(f"## Part {i}\n\nShelf {i} holds {i * 3} crates of part {i}.\n\n" for i in range(20_000))
    )
    env = ragvps_env(db_url, tmp_path / "data", worker_lease="1", worker_max_attempts="2")
    job = staged_job(env, folder)
    for attempt in (1, 2):  # the first has the four files in hand together, the second huge.md alone
        name = f"doomed{attempt}"
        kill_worker_when(
            env, name, lambda name=name: in_hand(db_url, job, "huge.md") == name, "did not read huge.md", poll=0.02
        )
    time.sleep(1.1)  # the second worker's lease runs out

    from support.asgi_server import in_process

    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env), pooled=True) as app:
        report = d.run_jobs(app, "taker", threading.Event(), exit_when_empty=True, poll=0.2)
    assert report.jobs == 1
    with in_process(env) as srv, srv.client() as c:
        status = c.get(f"/jobs/{job}").json()
    assert status["state"] == "done" and status["attempts"] == 3, status
    by_name = {f["name"]: f for f in status["files"]}
    assert {n: f["state"] for n, f in by_name.items()} == {
        "a.md": "done",
        "b.md": "done",
        "huge.md": "failed",
        "z.md": "done",
    }
    error = by_name["huge.md"]["error"]
    assert error.startswith("huge.md: a worker died 2 times while reading it") and "worker_max_attempts" in error
    assert status["errors"] == [{"file": "huge.md", "error": error}]
    with psycopg.connect(db_url) as conn:
        sources = [r[0] for r in conn.execute("SELECT source FROM kb_1.documents ORDER BY source")]
    assert sources == ["a.md", "b.md", "z.md"]  # each once; nothing of huge.md
    assert facts(db_url)[1] == facts(db_url)[2]  # every chunk has its one vector
    assert not (tmp_path / "data/kb/default/uploads/huge.md").exists()


def test_a_cancel_stops_a_batch_before_it_is_stored_never_while_it_is():
    """The stages the pipeline reports (ragvps/ingest/pipeline.py, parts.py): a cancel read while a batch is read,
    chunked, embedded or between a large file's parts stops it; read while it is stored, it waits for the batch's
    files to be marked (stored and marked cancelled was the defect)."""
    import inspect

    from ragvps.ingest import parts, pipeline
    from ragvps.ingest.jobs import stops_at

    assert 'progress("store", done, total)' in inspect.getsource(pipeline.store_stage)
    assert not stops_at("store")
    assert all(stops_at(stage) for stage in ("chunk", "embed", parts.ROWS + "big.csv"))


def test_a_waiting_worker_takes_a_job_when_it_is_queued_not_at_its_next_poll(db_url, tmp_path):
    """A worker between jobs LISTENs: the upload's NOTIFY wakes it (here its poll is an hour, so only the notice can),
    and a stop still ends its wait; the connection goes back to the pool without its LISTEN."""
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "memo.md").write_text("# Memo\n\nThe memo is about crates.\n")
    env = ragvps_env(db_url, tmp_path / "data")

    from ragvps.app import App
    from ragvps.app import documents as d
    from ragvps.config import load_settings

    with App.open(load_settings(env=env), pooled=True) as app:
        stop = threading.Event()
        waiting = threading.Thread(target=d.run_jobs, args=(app, "waiter", stop), kwargs={"poll": 3600.0})
        waiting.start()
        try:
            time.sleep(0.5)  # the worker has found no job and waits
            job = staged_job(env, folder)
            deadline = waiting.deadline(60)
            while (status := d.job_status(app, job)).state in ("queued", "running"):
                assert time.monotonic() < deadline, f"the queued job was not taken: {status}"
                time.sleep(0.05)
            assert status.state == "done" and status.files_done == 1, status
        finally:
            stop.set()
            waiting.join(30)
        assert not waiting.is_alive()  # the stop ended the wait
        with app.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()[0] == 0
