"""Hostile files, names and bundles (issue 42), from tests/support/hostile_files.py: bombs by reuse fail by name beside
good files, links out of the folder are not followed, hostile names fail alone or are made safe and unique,
failed and cancelled uploads are never stored later, and tampered bundles are refused before anything is written.
Real PostgreSQL, the real local model, the real CLI, the server in this process."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import httpx
import psycopg
import pytest
from support import waiting
from support.asgi_server import InProcess
from support.hostile_files import (
    HOSTILE_NAMES,
    PDF_BOMBS,
    bundle_members,
    corpus,
    epub_padded_spine_bomb,
    epub_spine_bomb,
    extra_chunk,
    foreign_root,
    links,
    markdown_chunk_bomb,
    odt_repeat_bomb,
    xlsx_padded_shared_bomb,
    xlsx_shared_string_bomb,
)
from support.serve_server import KEY, ragvps_env
from test_documents_api import page, run_cli

from ragvps.ingest import sources


@pytest.fixture(scope="module")
def served(module_db_url: str, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("hostile")
    env = ragvps_env(module_db_url, root / "data", upload_max_json_bytes=str(64 << 10), pdf_max_memory_mb="256")
    (root / "seed").mkdir()
    (root / "seed" / "seed.md").write_bytes(page("seed"))
    run_cli(env, "ingest", str(root / "seed"))
    srv = InProcess(env | {"RAGVPS_API_KEYS": KEY}, key=KEY).start()
    srv.data = root / "data"  # type: ignore[attr-defined]
    srv.env = env  # type: ignore[attr-defined]
    yield srv
    srv.stop()


def wait(c: httpx.Client, job: str, timeout: float = 120) -> dict:
    deadline = waiting.deadline(timeout)
    while (status := c.get(f"/jobs/{job}").json())["state"] not in ("done", "failed", "cancelled"):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    return status


def upload(c: httpx.Client, files: list[tuple[str, bytes]]) -> dict:
    r = c.post("/kb/default/documents", files=[("files", (name, data)) for name, data in files])
    assert r.status_code == 202, r.text
    return wait(c, r.json()["job"])


def sources_stored(db_url: str) -> set[str]:
    with psycopg.connect(db_url) as conn:
        return {r[0] for r in conn.execute("SELECT source FROM kb_1.documents")}


@pytest.mark.parametrize(
    ("make", "suffix"),
    [
        (epub_spine_bomb, ".epub"),
        (odt_repeat_bomb, ".odt"),
        (xlsx_shared_string_bomb, ".xlsx"),
        (epub_padded_spine_bomb, ".epub"),  # padding members lift its unpacked size: the bound counts packed bytes
        (xlsx_padded_shared_bomb, ".xlsx"),
    ],
)
def test_a_reuse_bomb_is_refused_by_its_reader_naming_it(make, suffix, tmp_path):
    bomb = make(tmp_path / f"bomb{suffix}")
    with pytest.raises(sources.SkipFile) as refused:
        sources.load(sources.SourceFile(bomb, bomb.name, sources.KINDS[bomb.suffix]), lambda _: None)
    assert refused.value.reason == "too much text"
    message = str(refused.value)
    assert message.startswith(f"{bomb.name}: its text passes ") and "max_text_ratio" in message
    assert "skipped" in message and str(tmp_path) not in message
    if make in (epub_spine_bomb, epub_padded_spine_bomb):
        assert re.search(r"it reads OEBPS/c\.xhtml [\d,]+ times", message)  # the part read again, counted
    packed = f"per byte of its {bomb.stat().st_size:,}, at least"  # its packed size: padding lifts nothing
    assert packed in message, message


def test_a_file_of_too_many_chunks_is_skipped_by_name(cli, tmp_path):
    (tmp_path / "in").mkdir()
    markdown_chunk_bomb(tmp_path / "in" / "sections.md")
    (tmp_path / "in" / "fine.md").write_text("# Fine\n\nA page of its own.\n")
    done = cli("chunk", str(tmp_path / "in"), "--json")
    report = json.loads(done.stdout)
    assert report["skipped"] == {"too many chunks": 1} and report["files"] == 1, report
    assert "sections.md: it makes 40,000 chunks, more than a file may store" in done.stderr


@pytest.mark.parametrize("name", sorted(PDF_BOMBS))
def test_a_pdf_bomb_fails_by_name_within_its_bounds(name, tmp_path):
    """A million empty pages in 13 KB, forms drawing forms 2^39 times in 8 KB, a page tree 20,000 deep: each is
    refused by a bound of the PDF reader's process (page count, memory, PDFium's own check), naming the file."""
    from ragvps.ingest.pdfproc import PdfLimits

    make, reason = PDF_BOMBS[name]
    bomb = make(tmp_path / name)
    source = sources.SourceFile(bomb, name, "pdf", limits=PdfLimits(memory_mb=256))
    with pytest.raises(sources.SkipFile) as refused:
        sources.load(source, lambda _: None)
    assert refused.value.reason == reason and str(refused.value).startswith(f"{name}: ")
    assert "skipped" in str(refused.value) and str(tmp_path) not in str(refused.value)


def test_a_pdf_page_over_its_time_is_stopped_and_the_next_pdf_is_read(tmp_path):
    from ragvps.ingest.pdfproc import PdfLimits
    from tests.test_pdf_pages import text_pdf

    bomb = PDF_BOMBS["form_bomb.pdf"][0](tmp_path / "slow.pdf")
    slow = sources.SourceFile(bomb, "slow.pdf", "pdf", limits=PdfLimits(page_seconds=0.5, memory_mb=4096))
    with pytest.raises(sources.SkipFile, match=r"^slow.pdf: page 1 took longer than pdf_page_seconds=0.5; skipped"):
        sources.load(slow, lambda _: None)
    good = text_pdf(tmp_path / "good.pdf", ["The harbour opened in spring."])
    assert "harbour opened" in sources.load(sources.SourceFile(good, "good.pdf", "pdf"), print)[0].text


def test_a_forked_reader_keeps_the_bounds_and_the_next_pdf_gets_a_spawned_one(tmp_path):
    """A command forks the PDF reader as it starts (pdfproc.start, in a process of one thread): the copy is bounded
    as a spawned reader is (its memory, a page's time), a bomb fails alone, and the next PDF is read by a reader
    spawned as before."""
    from tests.test_pdf_pages import text_pdf

    bomb = PDF_BOMBS["form_bomb.pdf"][0](tmp_path / "bomb.pdf")
    good = text_pdf(tmp_path / "good.pdf", ["The harbour opened in spring."])
    code = f"""
import json
from pathlib import Path
from ragvps.ingest import pdfproc, sources
from ragvps.ingest.pdfproc import PdfLimits
limits = PdfLimits(page_seconds=20, memory_mb=256)
pdfproc.start()
kinds = [type(pdfproc._CHILDREN[0].process).__name__]
try:
    sources.load(sources.SourceFile(Path({str(bomb)!r}), "bomb.pdf", "pdf", limits=limits), print)
    refused = ""
except sources.SkipFile as exc:
    refused = exc.reason + ": " + str(exc)
text = sources.load(sources.SourceFile(Path({str(good)!r}), "good.pdf", "pdf", limits=limits), print)[0].text
kinds.append(type(pdfproc._CHILDREN[0].process).__name__)
print(json.dumps([kinds, refused, text]))
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=waiting.seconds(300)
    )
    kinds, refused, text = json.loads(done.stdout.strip().splitlines()[-1])
    assert kinds == ["_Forked", "Popen"]
    assert refused.startswith(("PDF reader failed: bomb.pdf: ", "PDF too slow: bomb.pdf: ")), refused
    assert "The harbour opened in spring." in text


def test_pdf_bombs_beside_good_files_fail_alone(cli, tmp_path, db_url):
    from tests.test_pdf_pages import text_pdf

    folder = tmp_path / "docs"
    folder.mkdir()
    for name, (make, _) in PDF_BOMBS.items():
        make(folder / name)
    text_pdf(folder / "good.pdf", ["The lighthouse keeper counts forty ships."])
    (folder / "good.md").write_text("# Good\n\nThe harbour crane lifts crates.\n")
    cli.env["RAGVPS_PDF_MAX_MEMORY_MB"] = "256"
    result = cli("ingest", str(folder), "--json")
    report, err = json.loads(result.stdout), " ".join(result.stderr.split())
    assert report["skipped"] == {reason: 1 for _, reason in PDF_BOMBS.values()}, report
    for name in PDF_BOMBS:
        assert f"{name}: " in err and "Traceback" not in err
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT source FROM documents")} == {"good.pdf", "good.md"}


def test_reuse_bombs_in_an_upload_fail_by_name_and_the_good_files_are_stored(served, module_db_url, tmp_path):
    expected = corpus(tmp_path / "bombs")
    files = [(name, (tmp_path / "bombs" / name).read_bytes()) for name in expected]
    good = [(f"good{i}.md", page(f"good topic {i}")) for i in range(3)]
    done = upload(served.client(), files + good)
    states = {f["name"]: (f["state"], f["error"] or "") for f in done["files"]}
    assert done["state"] == "done", done
    for name in expected:
        state, error = states[name]
        assert state == "failed" and error.startswith(f"{name}: "), states
        assert name.endswith(".pdf") or error.startswith(f"{name}: its text passes "), states
        assert str(served.data) not in error
        assert not (served.data / "kb/default/uploads" / name).exists()
    assert all(states[name][0] == "done" for name, _ in good)
    assert {name for name, _ in good} <= sources_stored(module_db_url)
    assert not set(expected) & sources_stored(module_db_url)


def test_links_out_of_the_folder_are_not_followed_and_said_once_each(cli, tmp_path, db_url):
    folder = tmp_path / "docs"
    folder.mkdir()
    links(folder, tmp_path / "outside")
    os.symlink("/etc/hostname", folder / "hostname.txt")
    result = cli("ingest", str(folder), "--json")
    report, err = json.loads(result.stdout), " ".join(result.stderr.split())
    with psycopg.connect(db_url) as conn:
        stored = {r[0] for r in conn.execute("SELECT source FROM documents")}
        text = " ".join(r[0] for r in conn.execute("SELECT text FROM chunks"))
    assert stored == {"inner.md", "to_inner.md"}  # a link that stays inside is followed
    assert "plover" not in text
    assert report["skipped"]["link out of the folder"] == 3
    for name in ("to_secret.md", "to_outside", "hostname.txt"):
        assert err.count(f"{name}: a symbolic link to a place outside the folder; not followed") == 1
    assert "/etc/hostname" not in err and str(tmp_path / "outside") not in err
    type(cli)(cli.env | {"RAGVPS_FOLLOW_SYMLINKS": "true"})("ingest", str(folder))  # the setting allows them
    with psycopg.connect(db_url) as conn:
        assert {"to_secret.md", "to_outside/secret.md"} <= {r[0] for r in conn.execute("SELECT source FROM documents")}


def loops(folder: Path) -> None:
    """A link to itself, a loop of two links, a dangling link, beside a good file."""
    (folder / "good.md").write_text("# Good\n\nThe good file beside the loops tells of kingfishers.\n")
    os.symlink("loop.md", folder / "loop.md")
    os.symlink("b.md", folder / "a.md")
    os.symlink("a.md", folder / "b.md")
    os.symlink("gone.md", folder / "dangling.md")


def test_looping_and_dangling_links_are_skipped_with_a_line_each_and_the_rest_stored(cli, tmp_path, db_url):
    folder = tmp_path / "docs"
    folder.mkdir()
    loops(folder)
    result = cli("ingest", str(folder), "--json")
    report, err = json.loads(result.stdout), " ".join(result.stderr.split())
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT source FROM documents")} == {"good.md"}
    assert report["skipped"]["broken link"] == 4
    for name in ("loop.md", "a.md", "b.md"):
        assert err.count(f"{name}: a symbolic link that loops, skipped") == 1, err
    assert err.count("dangling.md: a symbolic link to nothing (its target is gone), skipped") == 1


def test_looping_links_in_the_uploads_folder_leave_uploads_working(served, module_db_url):
    uploads = served.data / "kb/default/uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    loops(uploads)
    try:
        assert upload(served.client(), [("after_loops.md", page("after loops"))])["state"] == "done"
        run_cli(served.env, "reindex")
        assert {"good.md", "after_loops.md"} <= sources_stored(module_db_url)
        assert not {"loop.md", "a.md", "b.md", "dangling.md"} & sources_stored(module_db_url)
    finally:
        for name in ("good.md", "loop.md", "a.md", "b.md", "dangling.md"):
            (uploads / name).unlink()


def test_a_link_added_while_watching_is_not_followed(db_url, tmp_path):
    import threading

    from ragvps.app import App
    from ragvps.config import Settings

    folder, outside = tmp_path / "docs", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (folder / "alpha.md").write_text("# Alpha\n\nThe alpha file tells of lighthouses.\n")
    (outside / "vault.md").write_text("# Vault\n\nThe outside vault code is plover.\n")
    reports: list = []
    stop = threading.Event()
    with App.open(Settings.of(database_url=db_url, data_dir=tmp_path / "data")) as app:
        thread = threading.Thread(
            target=app.watch, args=(folder, lambda r, n: reports.append(r)), kwargs={"stop": stop, "debounce_ms": 200}
        )
        thread.start()
        try:
            deadline = waiting.deadline(60)
            while not reports:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            os.symlink(outside / "vault.md", folder / "vault.md")
            (folder / "beta.md").write_text("# Beta\n\nBeta is about harbour cranes.\n")
            while len(reports) < 2:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join(30)
    with psycopg.connect(db_url) as conn:
        assert {r[0] for r in conn.execute("SELECT source FROM documents")} == {"alpha.md", "beta.md"}
    assert reports[-1].skipped["link out of the folder"] == 1


def test_a_link_in_the_uploads_folder_is_not_followed(served, module_db_url, tmp_path):
    uploads = served.data / "kb/default/uploads"
    uploads.mkdir(parents=True, exist_ok=True)
    (tmp_path / "vault.md").write_text("# Vault\n\nThe outside vault code is plover.\n")
    os.symlink(tmp_path / "vault.md", uploads / "planted.md")
    done = upload(served.client(), [("fine.md", page("fine upload"))])
    assert done["state"] == "done"
    run_cli(served.env, "reindex")
    assert "planted.md" not in sources_stored(module_db_url)
    (uploads / "planted.md").unlink()


def test_hostile_names_fail_alone_or_are_shortened_keeping_their_extension_and_made_unique(served, module_db_url):
    c = served.client()
    sent = [(name, page(f"name case {n}")) for n, (name, _) in enumerate(HOSTILE_NAMES)]
    sent.append(("n" * 300 + ".md", page("a second long name, cut the same way")))
    sent.append(("plain.md", page("plain name")))
    done = upload(c, sent)
    assert done["state"] == "done" and done["files_failed"] == 0, done
    names = [f["name"] for f in done["files"]]
    assert len(set(names)) == len(names) == len(sent)
    for name, (raw, keeps) in zip(
        names, [*HOSTILE_NAMES, ("n" * 300 + ".md", ".md"), ("plain.md", "plain.md")], strict=True
    ):
        assert name.endswith(keeps) and all(len(p.encode()) <= 255 for p in name.split("/")), (raw[:20], name)
    assert names[2] == "coll.md" and names[3] == "coll.md~2/inner.md"
    assert set(names) <= sources_stored(module_db_url)
    # A name that clashes with the uploads folder on disk (a folder where the file would go) fails that file alone,
    # and its error shows no server path.
    done = upload(c, [("coll.md~2", page("a file where a folder is")), ("fine2.md", page("fine again"))])
    states = {f["name"]: (f["state"], f["error"] or "") for f in done["files"]}
    assert states["fine2.md"][0] == "done" and states["coll.md~2"][0] == "failed", states
    assert states["coll.md~2"][1].startswith("coll.md~2: cannot be stored under this name")
    assert str(served.data) not in json.dumps(done) and "/tmp/" not in json.dumps(done)


def test_a_json_upload_over_its_bound_gets_413_naming_multipart(served):
    c = served.client()
    big = {"path": "big.md", "text": "x" * (80 << 10)}
    r = c.post("/kb/default/documents", json=big)
    assert r.status_code == 413, r.text
    assert "upload_max_json_bytes" in r.json()["error"] and "multipart/form-data" in r.json()["error"]
    r = c.post(
        "/kb/default/documents",
        content=json.dumps(big).encode(),  # no Content-Length: read, then refused
        headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
    )
    assert r.status_code == 413, r.text
    small = c.post("/kb/default/documents", json={"path": "small.md", "text": "# Small\n\nA small JSON text."})
    assert small.status_code == 202


def test_a_json_upload_of_empty_arrays_or_deep_nesting_is_refused_before_it_is_parsed(served):
    c = served.client()
    headers = {"Content-Type": "application/json"}
    arrays = c.post("/kb/default/documents", content=b"[" + b"[]," * 20_000 + b"[]]", headers=headers)
    assert arrays.status_code == 413 and "JSON objects and arrays (20,002)" in arrays.text, arrays.text
    deep = c.post("/kb/default/documents", content=b"[" * 30_000 + b"]" * 30_000, headers=headers)
    assert deep.status_code in (400, 413), deep.text  # never a RecursionError (500)
    nested = c.post("/kb/default/documents", content=b'[{"path": "a.md", "text": [[["x"]]]}]', headers=headers)
    assert nested.status_code == 400 and "nested deeper than an upload is" in nested.text, nested.text


def test_cancelled_and_failed_uploads_are_never_stored_by_a_later_reindex(served, module_db_url):
    c = served.client()
    files = [
        (f"cx{i:02}.md", page(f"cancel topic {i} " + " ".join(f"w{i}x{j}" for j in range(60)), 4)) for i in range(16)
    ]
    r = c.post("/kb/default/documents", files=[("files", f) for f in files])
    job = r.json()["job"]
    deadline = waiting.deadline(120)
    while (status := c.get(f"/jobs/{job}").json())["chunks_embedded"] == 0:
        assert status["state"] in ("queued", "running") and time.monotonic() < deadline, status
        time.sleep(0.05)
    c.delete(f"/jobs/{job}")
    end = wait(c, job)
    assert end["state"] == "cancelled", end
    cancelled = {f["name"] for f in end["files"] if f["state"] == "cancelled"}
    assert cancelled
    uploads = served.data / "kb/default/uploads"
    assert not any((uploads / name).exists() for name in cancelled)
    run_cli(served.env, "reindex")
    assert not cancelled & sources_stored(module_db_url)
    # A new version that fails puts the stored one back: the failed bytes are never there to be read.
    upload(c, [("version.md", page("first version"))])
    again = upload(c, [("version.md", b"\x00\x01binary" * 200)])
    assert again["files"][0]["state"] == "failed"
    assert (uploads / "version.md").read_bytes() == page("first version")
    assert not [p for p in uploads.rglob("*.previous")]


@pytest.fixture
def exported(cli, tmp_path):
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / "one.md").write_text("# One\n\nThe first note is about lighthouses.\n")
    (folder / "two.md").write_text("# Two\n\nThe second note is about harbour cranes.\n")
    cli("ingest", str(folder))
    cli("export", str(tmp_path / "b.ragvps"))
    return tmp_path / "b.ragvps"


def test_a_bundle_naming_an_outside_folder_is_never_read_by_reindex(cli, exported, tmp_path, db_url):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "one.md").write_text("# Vault\n\nThe outside vault code is plover.\n")
    forged = foreign_root(tmp_path / "forged.ragvps", bundle_members(exported), str(outside))
    cli("import", str(forged), "--kb", "imported")
    done = cli("reindex", "--kb", "imported")
    err = " ".join(done.stderr.split())
    assert "imported from a bundle" in err and f"ragvps ingest {outside}" in err
    with psycopg.connect(db_url) as conn:
        schema = conn.execute("SELECT schema_name FROM ragvps.knowledge_bases WHERE name = 'imported'").fetchone()[0]
        roots = {r[0] for r in conn.execute(f"SELECT root FROM {schema}.documents")}
        text = " ".join(r[0] for r in conn.execute(f"SELECT text FROM {schema}.chunks"))
    assert roots == {f"bundle:{outside}"} and "plover" not in text
    # The user who ingests that folder gives it: its documents are adopted, then re-synced from it.
    cli("ingest", str(outside), "--kb", "imported")
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(f"SELECT root, source FROM {schema}.documents ORDER BY source").fetchall()
    assert rows == [(str(outside), "one.md")]


def test_a_bundle_whose_manifest_disagrees_with_its_content_is_refused_before_any_write(cli, exported, tmp_path):
    forged = extra_chunk(tmp_path / "forged.ragvps", bundle_members(exported))
    for args in (("import", str(forged), "--kb", "forged"), ("restore-check", str(forged))):
        refused = cli(*args, expect=None)
        err = " ".join(refused.stderr.split())
        assert refused.exit_code != 0 and "the manifest counts 2 chunks, but the bundle holds 3" in err, err
    assert "forged" not in cli("kb", "list").stdout
    manifest = json.loads(bundle_members(exported)["manifest.json"])
    assert len(manifest["manifest_sha256"]) == 64  # the manifest's own checksum, checked on open
    altered = bundle_members(exported)
    altered["manifest.json"] = altered["manifest.json"].replace(b'"name": "default"', b'"name": "defaulx"')
    rewrite = tmp_path / "altered.ragvps"
    with tarfile.open(rewrite, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in altered.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    err = " ".join(cli("import", str(rewrite), "--kb", "altered", expect=None).stderr.split())
    assert "fails its own checksum" in err, err


def test_a_link_in_a_watched_folder_never_ends_watch_json(cli, tmp_path):
    import queue
    import signal
    import subprocess
    import sys
    import threading

    from support.serve_server import REPO

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "alpha.md").write_text("# Alpha\n\nThe alpha file tells of lighthouses.\n")
    os.symlink("/etc/hostname", folder / "hostname.txt")
    env = os.environ | cli.env | {"PYTHONPATH": str(REPO)}
    watch = subprocess.Popen(
        [sys.executable, "-m", "ragvps", "watch", str(folder), "--json", "--debounce-ms", "200"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert watch.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in watch.stdout], daemon=True).start()  # type: ignore[union-attr]
    try:
        first = json.loads(lines.get(timeout=120))  # the first ingest's report, the link counted in it
        assert first["skipped"]["link out of the folder"] == 1, first
        os.symlink("/etc/passwd", folder / "passwd.txt")
        deadline, second = waiting.deadline(120), None
        for n in range(1000):  # a change now and then until the watcher reports one (it may start watching late)
            (folder / f"beta{n}.md").write_text(f"# Beta {n}\n\nThe beta file tells of harbours.\n")
            try:
                second = json.loads(lines.get(timeout=3))
                break
            except queue.Empty:
                assert watch.poll() is None and time.monotonic() < deadline, "watch ended, or reported nothing"
        assert second is not None and second["changes"] >= 1 and watch.poll() is None, second
    finally:
        watch.send_signal(signal.SIGTERM)
        try:
            watch.wait(60)
        except subprocess.TimeoutExpired:
            watch.kill()
            watch.wait()
