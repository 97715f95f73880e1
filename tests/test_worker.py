"""Embedding workers coordinated by PostgreSQL: `ragvps ingest --defer-embedding`, then `ragvps worker`
processes (real subprocesses, each with its own data directory, as on other machines) against one database;
where network namespaces can be made, the workers run in their own and reach PostgreSQL over a veth hop."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np
import psycopg
import pytest
from support import waiting
from support.ollama_server import FakeOllama

REPO = Path(__file__).resolve().parents[1]
QUERIES = [
    "how do I stop the embedded database server?",
    "which settings change the chunk size?",
    "filter search results by path",
    "what happens when a file is edited?",
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOllama]:
    server = FakeOllama(host="0.0.0.0").start()  # reachable from a namespace through its veth address
    yield server
    server.stop()


@pytest.fixture
def ollama(fake: FakeOllama) -> FakeOllama:
    fake.reset()
    return fake


def ollama_env(url: str) -> dict[str, str]:
    return {
        "RAGVPS_EMBEDDER": "ollama",
        "RAGVPS_OLLAMA_URL": url,
        "RAGVPS_EMBED_MODEL": "nomic-embed-text",
        "RAGVPS_OLLAMA_RETRIES": "0",
        "RAGVPS_BATCH_SIZE": "4",
        "RAGVPS_WORKER_LEASE": "3",
        "RAGVPS_INDEX_MIN_ROWS": "1",
    }


@dataclass
class Hop:
    """How a worker reaches the database and Ollama: directly (loopback), or from a network namespace."""

    db_url: str
    ollama_url: str
    prefix: list[str] = field(default_factory=list)  # e.g. ["ip", "netns", "exec", NAME]


def start_worker(cli, hop: Hop, tmp_path: Path, name: str, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        **cli.env,
        **ollama_env(hop.ollama_url),
        "PYTHONPATH": str(REPO),
        "RAGVPS_DATABASE_URL": hop.db_url,
        "RAGVPS_DATA_DIR": str(tmp_path / f"data-{name}"),
    }
    cmd = [*hop.prefix, sys.executable, "-m", "ragvps", "worker", "--name", name, "--json", *extra]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> dict:
    out, errs = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"worker exited {proc.returncode}: {errs}"
    return json.loads(out)


def deferred_ingest(cli, folder: Path, ollama: FakeOllama) -> dict:
    cli.env.update(ollama_env(ollama.url))
    report = json.loads(cli("ingest", str(folder), "--defer-embedding", "--json").stdout)
    assert report["embedded"] == 0 and report["queued"] == report["chunks"] > 20 and not ollama.inputs
    return report


def snapshot(url: str) -> dict[tuple[str, int], tuple[str, np.ndarray | None]]:
    """(doc, seq) -> (content hash, vector or None), from the active set."""
    with psycopg.connect(url) as conn:
        table = conn.execute("SELECT table_name FROM embedding_sets WHERE active").fetchone()[0]
        rows = conn.execute(
            f"SELECT d.doc_id, c.seq, c.content_hash, e.embedding::text FROM chunks c "
            f"JOIN documents d ON d.id = c.document_id LEFT JOIN {table} e ON e.chunk_id = c.id"
        )
        return {(r[0], r[1]): (r[2], np.array(json.loads(r[3]), np.float32) if r[3] else None) for r in rows}


def queue_rows(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM embed_queue").fetchone()[0]


def top10(cli) -> list[list[tuple[str, int]]]:
    return [
        [(h["doc_id"], h["start"]) for h in json.loads(cli("query", q, "--k", "10", "--json").stdout)] for q in QUERIES
    ]


def document_inputs(ollama: FakeOllama) -> Counter[str]:
    return Counter(t for t in ollama.inputs if t.startswith("search_document: "))


def equals_plain_ingest(cli, folder: Path, db_url: str, new_database: Callable[[str], str], tmp_path: Path) -> None:
    """The workers' final state is a plain ingest's: same chunks, same vectors (float tolerance), same top-10."""
    deferred, deferred_top = snapshot(db_url), top10(cli)
    plain_url = new_database("worker_plain")
    cli.env.update({"RAGVPS_DATABASE_URL": plain_url, "RAGVPS_DATA_DIR": str(tmp_path / "data-plain")})
    cli("ingest", str(folder))
    plain, plain_top = snapshot(plain_url), top10(cli)
    assert deferred.keys() == plain.keys()
    for key, (digest, vector) in plain.items():
        assert deferred[key][0] == digest and vector is not None and deferred[key][1] is not None
        assert float(vector @ deferred[key][1]) > 0.9999, key  # both unit length: cosine
        np.testing.assert_allclose(deferred[key][1], vector, atol=2e-3)
    assert deferred_top == plain_top


def two_workers(
    cli,
    folder: Path,
    ollama: FakeOllama,
    hops: list[Hop],
    db_url: str,
    new_database: Callable[[str], str],
    tmp_path: Path,
) -> None:
    report = deferred_ingest(cli, folder, ollama)
    # Before any worker: the keyword leg finds the chunks, the vector leg finds nothing.
    keyword = json.loads(cli("query", "embedded database server", "--mode", "keyword", "--json").stdout)
    assert keyword and keyword[0]["vector_rank"] is None
    assert json.loads(cli("query", "embedded database server", "--mode", "vector", "--json").stdout) == []
    stats = json.loads(cli("stats", "--json").stdout)["queue"]
    assert (stats["pending"], stats["claimed"], stats["done"]) == (report["chunks"], 0, 0)

    ollama.inputs.clear()
    # One lane, about 2.5 s in all however large the user guide grows (0.12 s a batch of 4 at 85 chunks): long enough
    # that the worker started second takes part too.
    ollama.delay_per_input = 2.5 / report["chunks"]
    workers = [start_worker(cli, hop, tmp_path, f"w{i}", "--exit-when-empty") for i, hop in enumerate(hops)]
    reports = [finish(w) for w in workers]
    ollama.delay_per_input = 0
    assert all(r["embedded"] > 0 for r in reports), reports  # both did part of it
    assert sum(r["embedded"] for r in reports) == report["chunks"] and not any(r["lost"] for r in reports)
    sent = document_inputs(ollama)
    assert len(sent) == report["chunks"] and set(sent.values()) == {1}  # every chunk embedded once
    assert sum(r["index_built"] for r in reports) == 1  # the worker that emptied the queue built the index
    stats = json.loads(cli("stats", "--json").stdout)
    assert (stats["queue"]["pending"], stats["queue"]["claimed"], stats["queue"]["done"]) == (0, 0, report["chunks"])
    assert {n: w["done"] for n, w in stats["queue"]["workers"].items()} == {
        f"w{i}": r["embedded"] for i, r in enumerate(reports)
    }
    assert stats["vector_index"]["exists"] and stats["rows"]["vectors"] == report["chunks"]
    equals_plain_ingest(cli, folder, db_url, new_database, tmp_path)


def test_two_workers_embed_every_chunk_once_and_match_a_plain_ingest(
    cli, folder, ollama, db_url, new_database, tmp_path
):
    hops = [Hop(db_url, ollama.url.replace("0.0.0.0", "127.0.0.1"))] * 2
    two_workers(cli, folder, ollama, hops, db_url, new_database, tmp_path)


def test_a_worker_killed_mid_batch_loses_nothing(cli, folder, ollama, db_url, new_database, tmp_path):
    report = deferred_ingest(cli, folder, ollama)
    hop = Hop(db_url, ollama.url.replace("0.0.0.0", "127.0.0.1"))
    ollama.delay_per_input = 0.5  # 2 s a batch
    doomed = start_worker(cli, hop, tmp_path, "doomed")
    try:
        deadline = waiting.deadline(60)
        while time.monotonic() < deadline and doomed.poll() is None:
            with psycopg.connect(db_url) as conn:
                held = conn.execute("SELECT count(*) FROM embed_queue WHERE claimed_by = 'doomed'").fetchone()[0]
            if held and ollama.requests[-1:] and ollama.requests[-1][0] == "/api/embed":
                break
            time.sleep(0.05)
        assert held == 4 and doomed.poll() is None, "the worker never held a batch"
        time.sleep(0.3)  # its request is in flight
    finally:
        doomed.send_signal(signal.SIGKILL)
        doomed.communicate()
    assert queue_rows(db_url) == report["chunks"]  # nothing finished: its 4 rows still claimed
    ollama.delay_per_input = 0
    started = time.monotonic()
    survivor = finish(start_worker(cli, hop, tmp_path, "survivor", "--exit-when-empty"))
    assert survivor["embedded"] == report["chunks"] and survivor["lost"] == 0
    assert time.monotonic() - started >= 1.0  # it waited for the dead worker's lease (3 s from its claim)
    state = snapshot(db_url)
    assert len(state) == report["chunks"] and all(v is not None for _, v in state.values())
    assert queue_rows(db_url) == 0
    sent = document_inputs(ollama)
    assert len(sent) == report["chunks"] and sum(sent.values()) - len(sent) <= 4  # at most the killed batch twice
    with psycopg.connect(db_url) as conn:
        table = conn.execute("SELECT table_name FROM embedding_sets WHERE active").fetchone()[0]
        assert conn.execute(f"SELECT count(*), count(DISTINCT chunk_id) FROM {table}").fetchone() == (
            report["chunks"],
            report["chunks"],
        )
    equals_plain_ingest(cli, folder, db_url, new_database, tmp_path)


def test_a_worker_with_another_model_refuses_to_start_by_name(cli, folder, ollama, db_url, tmp_path):
    deferred_ingest(cli, folder, ollama)
    hop = Hop(db_url, ollama.url.replace("0.0.0.0", "127.0.0.1"))
    env = {
        **os.environ,
        **cli.env,
        **ollama_env(hop.ollama_url),
        "PYTHONPATH": str(REPO),
        "RAGVPS_EMBED_MODEL": "mxbai-embed-large",
        "RAGVPS_DATA_DIR": str(tmp_path / "data-other"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "ragvps", "worker", "--exit-when-empty"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    message = " ".join(result.stderr.split())
    assert result.returncode == 1
    assert "this worker embeds with model mxbai-embed-large (1024 dimensions)" in message
    assert "the queue fills vectors for model nomic-embed-text (768 dimensions" in message
    assert not document_inputs(ollama) and queue_rows(db_url) > 0


def test_stop_signal_finishes_the_batch_in_hand(cli, folder, ollama, db_url, tmp_path):
    report = deferred_ingest(cli, folder, ollama)
    ollama.delay_per_input = 0.3
    worker = start_worker(cli, Hop(db_url, ollama.url.replace("0.0.0.0", "127.0.0.1")), tmp_path, "stopped")
    deadline = waiting.deadline(60)
    while time.monotonic() < deadline and not any(p == "/api/embed" for p, _ in ollama.requests):
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)  # mid-batch: the batch is finished, then the worker exits
    done = finish(worker)
    ollama.delay_per_input = 0
    assert done["stopped"] == "stop" and done["embedded"] >= 4 and done["embedded"] % 4 == 0
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM embed_queue WHERE claimed_by IS NOT NULL").fetchone()[0] == 0
    assert queue_rows(db_url) == report["chunks"] - done["embedded"]


# --- the same, from network namespaces ---------------------------------------------------------------


def _netns_works() -> str | None:
    """None if namespaces and veth pairs can be made here; else why not."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return "network namespaces need root and iproute2 (`ip`)"
    probe = f"rvprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode:
        return f"`ip netns add` failed here ({made.stderr.strip()})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Forwarder:
    """A TCP listener on the root namespace's veth address that forwards to PostgreSQL's Unix socket
    (the embedded server listens on no TCP port): the worker's traffic crosses a real network hop."""

    def __init__(self, address: str, unix_path: str):
        self.unix_path = unix_path
        self.sock = socket.create_server((address, 0))
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX)
            upstream.connect(self.unix_path)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


@pytest.fixture
def namespaces(db_url: str, fake: FakeOllama) -> Iterator[list[Hop]]:
    why = _netns_works()
    if why:
        pytest.skip(f"workers run over loopback only (test above): {why}")
    parts = urlsplit(db_url)
    socket_dir = parse_qs(parts.query).get("host", [""])[0]
    if not socket_dir.startswith("/"):
        pytest.skip("RAGVPS_TEST_DATABASE_URL is not the embedded server's Unix socket: no forwarder needed or made")
    dbname = parts.path.lstrip("/")
    hops, made, forwarders = [], [], []
    try:
        for i in (1, 2):
            ns, host_if, ns_if = f"rvw{os.getpid() % 10000}{i}", f"rvh{os.getpid() % 10000}{i}", "eth0"
            net = f"10.213.{i}"
            for cmd in (
                ["ip", "netns", "add", ns],
                ["ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns],
                ["ip", "addr", "add", f"{net}.1/30", "dev", host_if],
                ["ip", "link", "set", host_if, "up"],
                ["ip", "-n", ns, "addr", "add", f"{net}.2/30", "dev", ns_if],
                ["ip", "-n", ns, "link", "set", ns_if, "up"],
                ["ip", "-n", ns, "link", "set", "lo", "up"],
            ):
                subprocess.run(cmd, check=True, capture_output=True)
                if cmd[2] == "add" and cmd[1] == "netns":
                    made.append((ns, host_if))
            forwarder = Forwarder(f"{net}.1", f"{socket_dir}/.s.PGSQL.{parts.port or 5432}")
            forwarders.append(forwarder)
            hops.append(
                Hop(
                    f"postgresql://postgres@{net}.1:{forwarder.port}/{dbname}",
                    f"http://{net}.1:{fake.port}",
                    ["ip", "netns", "exec", ns],
                )
            )
        yield hops
    finally:
        for f in forwarders:
            f.close()
        for ns, host_if in made:
            subprocess.run(["ip", "link", "del", host_if], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_two_workers_in_their_own_network_namespaces(cli, folder, ollama, namespaces, db_url, new_database, tmp_path):
    for hop in namespaces:  # the namespace reaches nothing but its veth peer
        assert hop.prefix and "127.0.0.1" not in hop.db_url
    two_workers(cli, folder, ollama, namespaces, db_url, new_database, tmp_path)


def test_a_live_worker_keeps_its_lease_through_a_batch_longer_than_the_lease(cli, ollama, db_url, tmp_path):
    small = tmp_path / "small"
    small.mkdir()
    for i in range(6):
        (small / f"note{i}.md").write_text(f"# Note {i}\n\nA short note number {i} about backups and indexes.\n")
    cli.env.update(ollama_env(ollama.url))
    report = json.loads(cli("ingest", str(small), "--defer-embedding", "--json").stdout)
    assert report["queued"] == 6
    hop = Hop(db_url, ollama.url.replace("0.0.0.0", "127.0.0.1"))
    ollama.delay_per_input = 0.45  # a batch of 4 takes 1.8 s, against a lease of 1 s
    workers = [start_worker(cli, hop, tmp_path, f"slow{i}", "--exit-when-empty", "--lease", "1") for i in range(2)]
    reports = [finish(w) for w in workers]
    ollama.delay_per_input = 0
    assert sum(r["embedded"] for r in reports) == 6 and not any(r["lost"] for r in reports), reports
    sent = document_inputs(ollama)
    assert len(sent) == 6 and set(sent.values()) == {1}  # no batch was taken from a live worker and redone
