"""Every mistake and fault of the sweep gets one clear line naming the setting or input and what to do,
never "unexpected error" or a traceback; a killed embedded PostgreSQL is survived by running again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from support import waiting
from support.serve_server import embed_threads

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration  # each test runs ragvps, and its embedded PostgreSQL, as a subprocess


def _clean(result) -> str:
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "unexpected error" not in out, out
    return " ".join(result.stderr.split())


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(3):
        (folder / f"d{i}.md").write_text(f"# Doc {i}\n\nThe harbour crane number {i} lifts containers.\n")
    return folder


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RAGVPS_DATABASE_URL": "not-a-url"}, "database_url='not-a-url' is not a PostgreSQL connection string"),
        ({"RAGVPS_DATABASE_URL": "mysql://u:pw@h/db"}, "database_url='mysql://u:***@h/db' is not a PostgreSQL"),
        ({"RAGVPS_CHUNK_SIZE": "abc"}, "chunk_size must be a whole number"),
        ({"RAGVPS_HNSW_M": "5000"}, "hnsw_m=5000 is out of range: use 2 to 100"),
        ({"RAGVPS_HNSW_EF_CONSTRUCTION": "2"}, "hnsw_ef_construction=2 is out of range: use 4 to 1000"),
        ({"RAGVPS_OLLAMA_URL": "http://[::1"}, "ollama_url='http://[::1' is not a valid URL"),
        ({"RAGVPS_OLLAMA_URL": "127.0.0.1:9"}, "ollama_url='127.0.0.1:9' is not an http(s) URL with a host"),
        ({"RAGVPS_CONFIG": "/nonexistent.toml"}, "config file /nonexistent.toml (from RAGVPS_CONFIG) does not exist"),
        ({"RAGVPS_INDEX_MEMORY": "lots"}, "index_memory='lots' is not a PostgreSQL memory size"),
    ],
)
def test_setting_mistakes_are_one_line(cli, docs, env, expected):
    cli.env.update(env | {"RAGVPS_INDEX_MIN_ROWS": "1"})
    err = _clean(cli("ingest", str(docs), expect=2))
    assert expected in err
    assert "pw@" not in err


def test_config_file_and_data_dir_mistakes(cli, docs, tmp_path):
    (tmp_path / "five.toml").write_text("ragvps = 5\n")
    cli.env["RAGVPS_CONFIG"] = str(tmp_path / "five.toml")
    assert "`ragvps` must be a table of settings" in _clean(cli("ingest", str(docs), expect=2))
    cli.env["RAGVPS_CONFIG"] = str(tmp_path / "empty.toml")
    (tmp_path / "a-file").write_text("")
    cli.env["RAGVPS_DATA_DIR"] = str(tmp_path / "a-file")
    assert "data_dir" in (err := _clean(cli("ingest", str(docs), expect=2))) and "is a file, not a folder" in err


def test_unknown_language_lists_what_exists(cli, docs):
    cli("ingest", str(docs))  # stored already: an unchanged ingest writes nothing, and still checks
    cli.env["RAGVPS_LANGUAGE"] = "klingon"
    for args in (("ingest", str(docs)), ("query", "crane")):
        err = _clean(cli(*args, expect=2))
        assert "setting language='klingon': PostgreSQL has no text search configuration" in err
        assert "english" in err and "simple" in err and "german" in err


def test_index_setting_postgres_refuses(cli, docs):
    cli.env.update({"RAGVPS_INDEX_MIN_ROWS": "1", "RAGVPS_INDEX_MEMORY": "4TB"})
    err = _clean(cli("ingest", str(docs), expect=2))
    assert "setting index_memory='4TB' is refused by PostgreSQL" in err
    assert "cannot join thread" not in err
    cli.env["RAGVPS_INDEX_MEMORY"] = "64MB"
    assert json.loads(cli("ingest", str(docs), "--json").stdout)["index_built"] is True


def test_eval_question_with_nul(cli, docs, tmp_path):
    cli("ingest", str(docs))
    gold = tmp_path / "gold.jsonl"
    gold.write_text(json.dumps({"question": "harbour\u0000crane 1", "doc": "d1.md"}) + "\n")
    result = cli("eval", str(gold), "--json")
    _clean(result)
    assert json.loads(result.stdout)["questions"] == 1


# --- the embedded PostgreSQL killed --------------------------------------------------------------------


def _env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "empty.toml").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGVPS_")}
    return env | {
        "PYTHONPATH": str(ROOT),
        "RAGVPS_DATA_DIR": str(tmp_path / "data"),
        "RAGVPS_CONFIG": str(tmp_path / "empty.toml"),
        "RAGVPS_EMBEDDER": "local",
        "RAGVPS_THREADS": embed_threads(),
    }


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ragvps", *args], env=env, capture_output=True, text=True, timeout=300)


def _postmaster(tmp_path: Path) -> int:
    return int((tmp_path / "data" / "pg" / "postmaster.pid").read_text().split()[0])


def _stop(env: dict[str, str]) -> None:
    _run(env, "server", "stop")


def test_embedded_postgres_killed_mid_ingest(tmp_path):
    env = _env(tmp_path)
    folder = tmp_path / "many"
    folder.mkdir()
    words = ["vessel", "harbour", "crane", "container", "ship", "cargo", "quay", "berth", "tide", "anchor"]
    for i in range(60):
        (folder / f"n{i:02}.md").write_text(f"# Note {i}\n\n" + " ".join(words[(i + j) % 10] for j in range(150)))
    (folder / "first.md").write_text("# First\n\nthe first note\n")  # also ingested alone, as its own root
    assert _run(env, "ingest", str(folder / "first.md")).returncode == 0  # the server is up
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragvps", "ingest", str(folder)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        vectors = tmp_path / "data" / "kb" / "default" / "embeddings"
        deadline = waiting.deadline(120)
        while not any(p.stat().st_size > 40_000 for p in vectors.rglob("*.f32")) and proc.poll() is None:
            assert time.monotonic() < deadline, "the ingest never embedded"
            time.sleep(0.05)
        os.kill(_postmaster(tmp_path), signal.SIGKILL)  # mid-embed: the store stage finds the server gone
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, (out, err)
        line = " ".join(err.split())
        assert "Traceback" not in line and "unexpected error" not in line, line
        assert "the embedded PostgreSQL stopped (" in line and "run the same command again to resume" in line
        rerun = _run(env, "ingest", str(folder), "--json")  # at once: the killed server may be a zombie still
        assert rerun.returncode == 0, rerun.stderr
        assert json.loads(rerun.stdout)["documents"] == 61
        check = _run(env, "stats", "--json")
        rows = json.loads(check.stdout)["rows"]
        assert rows["documents"] == 62 and rows["vectors"] == rows["chunks"]
    finally:
        _stop(env)


def test_stale_lock_files_of_a_dead_server(tmp_path):
    """A lock file naming a zombie (kill(pid, 0) calls it alive) or another program's pid is cleared."""
    env = _env(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.md").write_text("# A\n\nthe lamp of the lighthouse\n")
    assert _run(env, "ingest", str(tmp_path / "d")).returncode == 0
    pg = tmp_path / "data" / "pg"
    pid_file = pg / "postmaster.pid"
    lines = pid_file.read_text().splitlines()
    lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
    lock_lines = lock.read_text().splitlines()
    _stop(env)
    try:
        for victim in ("zombie", "reused"):
            child = subprocess.Popen(["sleep", "0" if victim == "zombie" else "60"])
            if victim == "zombie":
                time.sleep(0.3)  # exited, not reaped: a zombie until child.wait()
            pid_file.write_text("\n".join([str(child.pid), *lines[1:]]) + "\n")
            lock.write_text("\n".join([str(child.pid), *lock_lines[1:]]) + "\n")
            result = _run(env, "query", "lighthouse lamp")
            child.kill()
            child.wait()
            assert result.returncode == 0, result.stderr
            assert "a.md" in result.stdout
            _stop(env)
    finally:
        _stop(env)


@pytest.mark.slow
def test_rerun_right_after_an_ingest_killed_during_the_index_build(tmp_path, ollama):
    """The killed client's server process ends its CREATE INDEX within a second (and frees the write lock),
    and the rerun waits for the lock, so the same command run at once succeeds."""
    ollama.real_vectors = False
    env = _env(tmp_path) | {
        "RAGVPS_EMBEDDER": "ollama",
        "RAGVPS_OLLAMA_URL": ollama.url,
        "RAGVPS_EMBED_MODEL": "all-minilm",
        "RAGVPS_INDEX_MIN_ROWS": "100",
        "RAGVPS_HNSW_M": "100",
        "RAGVPS_HNSW_EF_CONSTRUCTION": "1000",
    }
    folder = tmp_path / "docs"
    folder.mkdir()
    words = ["vessel", "harbour", "crane", "container", "ship", "cargo", "quay", "berth", "tide", "anchor"]
    for i in range(3000):
        (folder / f"n{i:04}.md").write_text(f"# Note {i}\n\n" + " ".join(words[(i * j) % 10] for j in range(80)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "ingest", str(folder)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = waiting.deadline(240)
        building = False
        while not building and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            try:
                lines = (tmp_path / "data" / "pg" / "postmaster.pid").read_text().splitlines()
                url = f"postgresql://postgres:@/postgres?host={lines[4].strip()}"
                with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                    building = conn.execute("SELECT count(*) FROM pg_stat_progress_create_index").fetchone()[0] > 0
            except (OSError, IndexError, psycopg.Error):
                continue
        if not building:
            pytest.skip("the index build finished before it could be killed")
        proc.kill()
        proc.wait()
        rerun = _run(env, "ingest", str(folder), "--json")
        assert rerun.returncode == 0, rerun.stderr
        assert json.loads(rerun.stdout)["index_built"] is True
    finally:
        proc.kill()
        _stop(env)
