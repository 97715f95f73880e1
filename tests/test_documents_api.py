"""The documents API in this process (tests/support/asgi_server.py): uploads streamed to disk and ingested by the
server's job runner, their progress (JSON and Server-Sent Events), cancel, the documents listed and deleted,
hostile uploads (names that try to leave the folder, sizes and counts over the limits, a body cut off, a zip
bomb beside good files), and who may see a job. Real PostgreSQL, the real local model, real files."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.office_files import zip_bomb
from support.serve_server import KEY, ragvps_env
from typer.testing import CliRunner

from ragvps.cli import app as cli_app

BOUNDARY = "rvtestboundary42"
LIMITS = {"upload_max_files": "50", "upload_max_file_bytes": str(64 << 10), "upload_max_bytes": str(512 << 10)}


def run_cli(env: dict[str, str], *args: str) -> str:
    done = CliRunner().invoke(
        cli_app, list(args), env={k: v for k, v in env.items() if k.startswith("RAGVPS_")}, catch_exceptions=False
    )
    assert done.exit_code == 0, done.output
    return done.stdout


def page(topic: str, n: int = 3) -> bytes:
    return (
        f"# {topic}\n\n"
        + "".join(
            f"## Part {i}\n\nThe {topic} section {i} explains step {i} of the {topic} procedure in plain words.\n\n"
            for i in range(n)
        )
    ).encode()


def multipart(parts: list[tuple[bytes, bytes]], end: bool = True) -> tuple[bytes, dict[str, str]]:
    """A multipart body with file names exactly as given (httpx would escape them)."""
    body = b"".join(
        b"--"
        + BOUNDARY.encode()
        + b'\r\nContent-Disposition: form-data; name="files"; filename="'
        + name
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + b"\r\n"
        for name, data in parts
    )
    if end:
        body += b"--" + BOUNDARY.encode() + b"--\r\n"
    return body, {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}


@pytest.fixture(scope="module")
def served(module_db_url: str, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("docs-api")
    # Embedding batches of 8 chunks (not 32): the embedding progress, and with it the count and the cancel of a job,
    # moves at a finer step, so that a cancel lands within a smaller batch to embed.
    env = ragvps_env(module_db_url, root / "data", batch_size="8", **LIMITS)
    (root / "seed").mkdir()
    (root / "seed" / "seed.md").write_bytes(page("seed"))
    run_cli(env, "ingest", str(root / "seed"))
    run_cli(env, "kb", "create", "other")
    keys = {
        role: run_cli(env, "key", "create", "--kb", "default", "--role", role, "--name", f"{role}-app").strip()
        for role in ("read", "write")
    }
    keys["outsider"] = run_cli(env, "key", "create", "--kb", "other", "--role", "write", "--name", "out").strip()
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY}, key=KEY).start()
    srv.keys = keys  # type: ignore[attr-defined]
    srv.data = root / "data"  # type: ignore[attr-defined]
    srv.root = root  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def client(srv: InProcess, who: str | None = None) -> httpx.Client:
    if who is None:
        return srv.client()
    return srv.keyless(headers={"Authorization": f"Bearer {srv.keys[who]}"})  # type: ignore[attr-defined]


def wait(c: httpx.Client, job: str, timeout: float = 120) -> dict:
    deadline = waiting.deadline(timeout)
    while True:
        status = c.get(f"/jobs/{job}").json()
        if status["state"] in ("done", "failed", "cancelled"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def upload(c: httpx.Client, files: dict[str, bytes], kb: str = "default") -> dict:
    r = c.post(f"/kb/{kb}/documents", files=[("files", (name, data)) for name, data in files.items()])
    assert r.status_code == 202, r.text
    return r.json()


def counts(db_url: str, schema: str = "kb_1") -> dict[str, int]:
    with psycopg.connect(db_url) as conn:
        conn.execute(f"SET search_path TO {schema}, public")
        table = conn.execute("SELECT table_name FROM embedding_sets WHERE active").fetchone()[0]
        return {
            "documents": conn.execute("SELECT count(*) FROM documents").fetchone()[0],
            "chunks": conn.execute("SELECT count(*) FROM chunks").fetchone()[0],
            "vectors": conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0],
        }


def doc_chunks(db_url: str, source: str) -> list[int]:
    with psycopg.connect(db_url) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT c.id FROM kb_1.chunks c JOIN kb_1.documents d ON d.id = c.document_id WHERE d.source = %s "
                "AND d.root LIKE '%%/uploads' ORDER BY c.id",
                (source,),
            )
        ]


def test_an_upload_is_stored_searchable_and_listed(served, module_db_url):
    c = client(served, "write")
    sent = upload(
        c, {"guide/alpaca.md": page("alpaca shearing"), "notes.txt": page("quokka feeding").replace(b"#", b"")}
    )
    assert sent["job"].startswith("j1-") and [f["name"] for f in sent["files"]] == ["guide/alpaca.md", "notes.txt"]
    done = wait(c, sent["job"])
    assert done["state"] == "done" and done["files_done"] == done["files_total"] == 2, done
    assert done["errors"] == [] and done["chunks_embedded"] > 0 and done["eta_s"] == 0.0
    hits = client(served).post("/search", json={"query": "alpaca shearing procedure", "k": 3}).json()["hits"]
    assert hits[0]["path"] == "guide/alpaca.md"
    listed = client(served, "read").get("/kb/default/documents", params={"limit": 1000}).json()["documents"]
    mine = {d["path"]: d for d in listed if d["uploaded"]}
    assert mine["guide/alpaca.md"]["format"] == "markdown" and mine["guide/alpaca.md"]["title"] == "alpaca shearing"
    assert mine["guide/alpaca.md"]["size"] == len(page("alpaca shearing")) and mine["notes.txt"]["chunks"] >= 1
    assert all(d["status"] == "embedded" and d["ingested_at"] for d in mine.values())
    assert (served.data / "kb/default/uploads/guide/alpaca.md").read_bytes() == page("alpaca shearing")
    assert not any((served.data / "kb/default/incoming").iterdir())  # staged files moved or removed


def test_json_texts_from_an_app(served):
    c = client(served, "write")
    r = c.post(
        "/kb/default/documents",
        json=[
            {"path": "tickets/4711", "text": "Printer on floor 3 jams daily."},
            {"path": "tickets/4712.md", "text": "# VPN\n\nThe VPN drops at noon."},
        ],
    )
    assert r.status_code == 202, r.text
    assert [f["name"] for f in r.json()["files"]] == ["tickets/4711.txt", "tickets/4712.md"]
    assert wait(c, r.json()["job"])["files_done"] == 2
    r = c.post("/kb/default/documents", json={"path": "x.md"})
    assert r.status_code == 400 and "item 0" in r.json()["error"]


def test_names_that_try_to_leave_the_folder_are_reduced_inside_it(served):
    c = client(served, "write")
    body, headers = multipart(
        [
            (b"../../../../tmp/escape-dotdot.md", page("dotdot")),
            (b"/etc/escape-abs.md", page("absolute")),
            (b"..\\..\\win\\escape-back.md", page("backslash")),
            (b".hidden.md", page("hidden")),
        ]
    )
    r = c.post("/kb/default/documents", content=body, headers=headers)
    assert r.status_code == 202, r.text
    names = [f["name"] for f in r.json()["files"]]
    assert names == ["tmp/escape-dotdot.md", "etc/escape-abs.md", "win/escape-back.md", "_hidden.md"]
    assert wait(c, r.json()["job"])["files_done"] == 4
    uploads = served.data / "kb/default/uploads"
    for name in names:
        assert (uploads / name).is_file()
    assert not Path("/tmp/escape-dotdot.md").exists() and not Path("/etc/escape-abs.md").exists()
    for path in served.root.rglob("escape-*"):
        assert path.is_relative_to(uploads), path


def test_a_nul_byte_in_a_name_is_refused_and_nothing_is_kept(served):
    before = counts_of_incoming(served)
    body, headers = multipart([(b"ok.md", page("fine")), (b"evil\x00.md", page("nul"))])
    r = client(served, "write").post("/kb/default/documents", content=body, headers=headers)
    assert r.status_code == 400 and "NUL" in r.json()["error"]
    assert counts_of_incoming(served) == before


def counts_of_incoming(served) -> int:
    incoming = served.data / "kb/default/incoming"
    return sum(1 for _ in incoming.rglob("*")) if incoming.exists() else 0


@pytest.mark.parametrize(
    ("files", "setting"),
    [
        ({"big.md": b"x" * (65 << 10)}, "upload_max_file_bytes"),
        ({f"f{i}.md": b"# f" for i in range(51)}, "upload_max_files"),
        ({f"f{i}.md": b"y" * (60 << 10) for i in range(9)}, "upload_max_bytes"),
    ],
)
def test_limits_answer_413_naming_the_setting(served, files, setting):
    before = counts_of_incoming(served)
    body, headers = multipart(list((n.encode(), d) for n, d in files.items()))
    for declared in (True, False):  # by Content-Length at once, and counted as the body streams
        send = body if declared else iter([body[i : i + 8192] for i in range(0, len(body), 8192)])
        r = client(served, "write").post("/kb/default/documents", content=send, headers=headers)
        assert r.status_code == 413 and r.json()["kind"] == "too_long", r.text
        assert setting in r.json()["error"]
    assert counts_of_incoming(served) == before


def test_a_body_cut_off_keeps_nothing_and_makes_no_job(served):
    body, headers = multipart([(b"a.md", page("cut")), (b"b.md", page("cut two"))], end=False)
    r = client(served, "write").post("/kb/default/documents", content=body[:-40], headers=headers)
    assert r.status_code == 400 and "cut off" in r.json()["error"]
    assert counts_of_incoming(served) == 0


def test_a_zip_bomb_fails_by_name_while_the_other_files_store(served, tmp_path):
    bomb = zip_bomb(tmp_path / "bomb.docx", "word/document.xml", 64 << 20).read_bytes()
    c = client(served, "write")
    done = wait(c, upload(c, {"bomb.docx": bomb, "wombat.md": page("wombat burrows")})["job"])
    assert done["state"] == "done" and done["files_failed"] == 1, done
    [error] = done["errors"]
    assert error["file"] == "bomb.docx" and "bomb.docx" in error["error"]
    assert {f["name"]: f["state"] for f in done["files"]} == {"bomb.docx": "failed", "wombat.md": "done"}
    assert not (served.data / "kb/default/uploads/bomb.docx").exists()  # nothing stored from it: not kept
    scraped = metrics(served)  # /metrics reads the jobs' work from the database
    assert scraped[("ragvps_ingest_job_files_failed_total", "default")] >= 1
    assert scraped[("ragvps_ingest_job_chunks_embedded_total", "default")] >= done["chunks_embedded"] > 0
    assert scraped[("ragvps_ingest_jobs_open", "other")] == 0


def test_an_upload_whose_every_file_fails_ends_failed_naming_them(served):
    c = client(served, "write")
    done = wait(c, upload(c, {"broken.docx": b"not a zip at all", "torn.pptx": b"PK\x03\x04 torn"})["job"])
    assert done["state"] == "failed" and done["files_failed"] == 2, done
    assert "every file failed (2 of 2)" in done["error"] and "broken.docx" in done["error"]
    assert [e["file"] for e in done["errors"]] == ["broken.docx", "torn.pptx"]


def metrics(srv: InProcess) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = client(srv).get("/metrics").text
    return {(s.name, s.labels.get("kb", "")): s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_same_upload_embeds_nothing_and_a_changed_file_replaces_its_chunks(served, module_db_url):
    c = client(served, "write")
    first = wait(c, upload(c, {"koala.md": page("koala sleep", 6)})["job"])
    old = doc_chunks(module_db_url, "koala.md")
    assert first["chunks_embedded"] == len(old) > 1
    before = counts(module_db_url)
    again = wait(c, upload(c, {"koala.md": page("koala sleep", 6)})["job"])
    assert again["chunks_embedded"] == 0 and again["files"][0]["state"] == "unchanged"
    assert counts(module_db_url) == before and doc_chunks(module_db_url, "koala.md") == old
    changed = wait(c, upload(c, {"koala.md": page("koala sleep", 6).replace(b"step 5", b"stage 5")})["job"])
    new = doc_chunks(module_db_url, "koala.md")
    assert changed["files"][0]["state"] == "done" and changed["chunks_embedded"] == 1  # only the changed chunk
    assert len(new) == len(old) and not set(new) & set(old)  # every old chunk replaced, none left beside
    assert counts(module_db_url) == before


def test_progress_as_server_sent_events(served):
    c = client(served, "write")
    job = upload(c, {f"ev{i}.md": page(f"event {i}") for i in range(5)})["job"]
    seen = []
    with c.stream("GET", f"/jobs/{job}/events") as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                seen.append((event, json.loads(line[6:])))
    assert seen[-1][0] == "done" and seen[-1][1]["files_done"] == 5
    assert all(e == "progress" for e, _ in seen[:-1])
    done = [d["files_done"] for _, d in seen]
    assert done == sorted(done)  # a progress bar that never goes back
    with c.stream("GET", f"/jobs/{job}", headers={"Accept": "text/event-stream"}) as r:
        assert "event: done" in r.read().decode()


def test_cancel_mid_batch_stores_nothing_half_and_a_reupload_resumes_from_the_vectors(served, module_db_url):
    c = client(served, "write")
    # long sections (about 200 tokens a chunk, 288 chunks): the batch takes seconds to embed, so that the cancel,
    # read on the job's next heartbeat, lands while it is being embedded rather than after
    files = {f"c{i:02}.md": page(f"cancel topic {i} " + " ".join(f"w{i}x{j}" for j in range(60)), 4) for i in range(16)}
    job = upload(c, files)["job"]
    deadline = waiting.deadline(120)
    while (status := c.get(f"/jobs/{job}").json())["chunks_embedded"] == 0:  # the batch is being embedded
        assert status["state"] in ("queued", "running") and time.monotonic() < deadline, status
        time.sleep(0.05)
    cancelled = c.delete(f"/jobs/{job}")
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"]
    end = wait(c, job)
    assert end["state"] == "cancelled", end
    states = {f["name"]: f["state"] for f in end["files"]}
    stored = {n for n, s in states.items() if s == "done"}
    assert set(states.values()) <= {"done", "cancelled"} and "cancelled" in states.values()
    with psycopg.connect(module_db_url) as conn:  # exactly the files marked done are stored, each whole
        rows = conn.execute(
            "SELECT d.source, count(c.id) FROM kb_1.documents d JOIN kb_1.chunks c ON "
            "c.document_id = d.id WHERE d.source LIKE 'c__.md' GROUP BY d.source"
        ).fetchall()
    chunks = {f["name"]: f["chunks"] for f in end["files"]}
    assert {r[0]: r[1] for r in rows} == {n: chunks[n] for n in stored}
    resumed = wait(c, upload(c, files)["job"])
    assert resumed["state"] == "done" and resumed["files_done"] == len(files) and resumed["files_failed"] == 0
    total = sum(f["chunks"] for f in resumed["files"])
    assert 0 < resumed["chunks_embedded"] < total  # what the cancelled job embedded is not embedded again
    assert c.delete(f"/jobs/{job}").json()["state"] == "cancelled"  # cancelling an ended job changes nothing


def test_documents_page_by_cursor_and_delete_removes_everything(served, module_db_url):
    c = client(served, "write")
    wait(c, upload(c, {f"pg{i}.md": page(f"paging {i}") for i in range(5)})["job"])
    seen, cursor = [], None
    while True:
        body = c.get("/kb/default/documents", params={"limit": 2} | ({"cursor": cursor} if cursor else {})).json()
        assert len(body["documents"]) <= 2
        seen += [d["id"] for d in body["documents"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == counts(module_db_url)["documents"]
    doc = next(
        d for d in c.get("/kb/default/documents", params={"limit": 1000}).json()["documents"] if d["path"] == "pg3.md"
    )
    before = counts(module_db_url)
    gone = c.delete(f"/kb/default/documents/{doc['id']}")
    assert gone.status_code == 200 and gone.json()["chunks"] == doc["chunks"] and gone.json()["file_removed"]
    after = counts(module_db_url)
    assert after == {
        "documents": before["documents"] - 1,
        "chunks": before["chunks"] - doc["chunks"],
        "vectors": before["vectors"] - doc["chunks"],
    }
    assert not (served.data / "kb/default/uploads/pg3.md").exists()
    assert c.delete(f"/kb/default/documents/{doc['id']}").status_code == 404
    assert c.get("/kb/default/documents", params={"cursor": "x"}).status_code == 400


def test_a_delete_waits_its_turn_behind_a_writer_past_the_usual_lock_wait(served, module_db_url):
    """At a load of 16 an upload's batch held the knowledge base's write lock past the 3 s every writer waits, and a
    DELETE of a document was refused with a 503 (schemathesis, issue 51). It now waits its turn."""
    from ragvps.db.store import WRITE_LOCK, WRITE_LOCK_WAIT

    c = client(served, "write")
    wait(c, upload(c, {"turn.md": page("waiting its turn")})["job"])
    doc = next(
        d for d in c.get("/kb/default/documents", params={"limit": 1000}).json()["documents"] if d["path"] == "turn.md"
    )
    with psycopg.connect(module_db_url, autocommit=True) as writer:
        writer.execute("SELECT pg_advisory_lock(hashtext(%s))", (f"{WRITE_LOCK}:kb_1",))  # another writer's batch
        with ThreadPoolExecutor(1) as pool:
            deleting = pool.submit(c.delete, f"/kb/default/documents/{doc['id']}")
            time.sleep(WRITE_LOCK_WAIT + 1)  # the writer holds on past the usual wait (a condition cannot say this)
            assert not deleting.done(), deleting.result().text
            writer.execute("SELECT pg_advisory_unlock(hashtext(%s))", (f"{WRITE_LOCK}:kb_1",))
            gone = deleting.result(timeout=waiting.seconds(60))
    assert gone.status_code == 200, gone.text


def test_a_job_is_seen_only_by_keys_that_read_its_knowledge_base(served):
    job = upload(client(served, "write"), {"secret-plan.md": page("secret plan")})["job"]
    reader, outsider = client(served, "read"), client(served, "outsider")
    assert reader.get(f"/jobs/{job}").status_code == 200
    for c in (outsider,):
        for r in (c.get(f"/jobs/{job}"), c.get(f"/jobs/{job}/events"), c.delete(f"/jobs/{job}")):
            assert r.status_code == 404 and "secret" not in r.text
    missing = outsider.get("/jobs/j1-0000000000000000")
    assert missing.status_code == 404 and missing.json()["error"] == outsider.get(f"/jobs/{job}").json()[
        "error"
    ].replace(job, "j1-0000000000000000")
    assert reader.delete(f"/jobs/{job}").status_code == 404  # cancelling takes write
    for r in (
        reader.post("/kb/default/documents", files=[("files", ("r.md", b"# r"))]),
        outsider.post("/kb/default/documents", files=[("files", ("r.md", b"# r"))]),
        reader.delete("/kb/default/documents/1"),
    ):
        assert r.status_code == 404
    assert outsider.get("/kb/default/documents").status_code == 404
    assert upload(outsider, {"o.md": page("other base")}, kb="other")["job"].startswith("j2-")


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("report.pdf", "report.pdf"),
        ("notes/2024/q1.md", "notes/2024/q1.md"),
        ("../../etc/passwd", "etc/passwd"),
        ("/abs/olute.md", "abs/olute.md"),
        ("C:\\Users\\me\\..\\x.docx", "C_/Users/me/x.docx"),
        ("a/./b//c.md", "a/b/c.md"),
        (".env", "_env"),
        ("dir/.git/config", "dir/_git/config"),
        ("tab\there.md", "tab_here.md"),
        ("..", None),
        ("/", None),
        ("", None),
        ("a\x00b.md", None),
    ],
)
def test_safe_name_keeps_a_name_inside_its_folder(sent, kept):
    from ragvps.errors import UsageError
    from ragvps.ingest.uploads import safe_name

    if kept is None:
        with pytest.raises(UsageError):
            safe_name(sent)
    else:
        assert safe_name(sent) == kept
