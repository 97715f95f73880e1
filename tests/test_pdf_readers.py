"""Two PDF readers (issue 53): a command forks two reader processes as it starts, and a long PDF is read by both, each
every other page, its pages put back in order. The document is the one a single reader gives; each reader keeps its
bounds; a bomb in the second reader's share fails that file alone; and the readers go when their command is killed.
Each case runs in a fresh interpreter, as a command does (a process of one thread, which may fork)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from support import waiting
from support.hostile_files import pdf_late_bomb
from support.pdf_files import Run, content, write_pdf

ROOT = Path(__file__).resolve().parents[1]


def log_pdf(path: Path, pages: int) -> Path:
    """`pages` pages of forty lines each, every line naming its page (in digits, and in letters: a line repeated on
    every page but for its digits would be a running head)."""
    streams = [content([Run(72, 700 - 14 * k, line(n, k)) for k in range(40)]) for n in range(1, pages + 1)]
    return write_pdf(path, streams)


def line(page: int, k: int) -> str:
    return f"Page {page}, line {k}: the harbour log names the {str(page).translate(LETTERS)}."


LETTERS = str.maketrans("0123456789", "abcdefghij")


def run(code: str) -> object:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=waiting.seconds(300),
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_long_pdf_is_read_by_both_readers_into_the_document_one_reader_gives(tmp_path):
    log_pdf(tmp_path / "long.pdf", 41)
    log_pdf(tmp_path / "short.pdf", 3)
    code = f"""
import json
from pathlib import Path
from ragvps.ingest import pdfproc, sources

def cpu_ticks(pid):
    fields = Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime

def load(name):
    doc = sources.load(sources.SourceFile(Path({str(tmp_path)!r}) / name, name, "pdf"), print)[0]
    return [doc.text, doc.metadata["pages"]]

alone = [load("long.pdf"), load("short.pdf")]  # one reader, spawned (nothing was started)
for child in pdfproc._CHILDREN:
    child.kill()
pdfproc._CHILDREN.clear()
pdfproc.start()
kinds = [type(c.process).__name__ for c in pdfproc._CHILDREN]
for child in pdfproc._CHILDREN:
    child.wait_started()
before = [cpu_ticks(c.process.pid) for c in pdfproc._CHILDREN]
shared = [load("long.pdf"), load("short.pdf")]
after = [cpu_ticks(c.process.pid) for c in pdfproc._CHILDREN]
print(json.dumps([kinds, before, after, alone, shared]))
"""
    kinds, before, after, alone, shared = run(code)  # type: ignore[misc]
    if len(os.sched_getaffinity(0)) >= 2:
        assert kinds == ["_Forked", "_Forked"]
        assert after[1] > before[1], "the second reader did not read its share of the long PDF"
    assert shared == alone
    text, pages = shared[0]
    assert [p[1] for p in pages] == list(range(1, 42))
    starts = [text.index(line(n, 0)) for n in range(1, 42)]
    assert starts == sorted(starts) and [p[0] for p in pages] == starts


def test_a_bomb_in_the_second_readers_share_fails_its_file_alone(tmp_path):
    """Page 20 of 40 (the second reader's) draws forms 2^39 times: the file is refused by name with the bound it met,
    both readers go, and the next PDF is read."""
    bomb = pdf_late_bomb(tmp_path / "late_bomb.pdf")
    good = log_pdf(tmp_path / "good.pdf", 20)
    code = f"""
import json
from pathlib import Path
from ragvps.ingest import pdfproc, sources
from ragvps.ingest.pdfproc import PdfLimits
limits = PdfLimits(page_seconds=20, memory_mb=256)
pdfproc.start()
pids = [c.process.pid for c in pdfproc._CHILDREN]
try:
    sources.load(sources.SourceFile(Path({str(bomb)!r}), "late_bomb.pdf", "pdf", limits=limits), print)
    refused = ""
except sources.SkipFile as exc:
    refused = exc.reason + ": " + str(exc)
gone = [c.process.poll() is not None for c in pdfproc._CHILDREN] if pdfproc._CHILDREN else []
text = sources.load(sources.SourceFile(Path({str(good)!r}), "good.pdf", "pdf", limits=limits), print)[0].text
print(json.dumps([pids, refused, gone, text]))
"""
    pids, refused, gone, text = run(code)  # type: ignore[misc]
    assert refused.startswith(("PDF reader failed: late_bomb.pdf: ", "PDF too slow: late_bomb.pdf: ")), refused
    assert "page 20" in refused or "pdf_max_memory_mb" in refused, refused
    assert gone == []  # both readers were killed, and none is kept for the next file
    for pid in pids:
        waiting.wait_until(lambda pid=pid: not _running(pid), f"reader {pid} to go")
    assert line(20, 39) in text


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_the_readers_go_when_their_command_is_killed(tmp_path):
    """No reader outlives its command: each sees its socket close (the other's copy of it closed too)."""
    code = """
import sys, time
from ragvps.ingest import pdfproc
pdfproc.start()
for child in pdfproc._CHILDREN:
    child.wait_started()
print(" ".join(str(c.process.pid) for c in pdfproc._CHILDREN), flush=True)
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        pids = [int(p) for p in line.split()]
        assert pids and all(_running(pid) for pid in pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(waiting.seconds(30))
    for pid in pids:
        waiting.wait_until(lambda pid=pid: not _running(pid), f"reader {pid} to go with its command")


def test_a_reading_command_with_a_pdf_is_told_from_its_words(tmp_path):
    """The readers fork before typer parses the command line (app/reading.py): for chunk and ingest, when an
    argument after the command names a PDF or a folder with one, whatever options stand around it."""
    from ragvps.app.reading import pdf_path
    from ragvps.cli import split_command

    def reads(argv: list[str]) -> str | None:
        return pdf_path(*split_command(argv))

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n")
    (tmp_path / "docs" / "deep").mkdir(parents=True)
    log_pdf(tmp_path / "docs" / "deep" / "log.pdf", 1)
    notes, docs, pdf = str(tmp_path / "notes"), str(tmp_path / "docs"), str(tmp_path / "docs" / "deep" / "log.pdf")
    assert reads(["chunk", pdf, "--json"]) == pdf
    assert reads(["--data-dir", "d", "ingest", "--kb", "docs", "--mode", "fixed", docs]) == docs
    assert reads(["ingest", notes, docs]) == docs
    assert reads(["chunk", notes]) is None
    assert reads(["search", pdf]) is None and reads([pdf]) is None
    assert reads(["--data-dir", "chunk", "search", pdf]) is None  # "chunk" there is the root option's value
    assert reads(["chunk", str(tmp_path / "missing.pdf")]) is None


def test_the_real_command_ingests_a_long_pdf_through_both_readers_and_cites_its_pages(cli, tmp_path):
    """`ragvps ingest` as a user runs it (a process of its own, which forks two readers): a line on page 30 of 41 is
    found and cited as page 30, and on page 31 as page 31 (one reader's page, then the other's)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    streams = []
    for n in range(1, 42):
        lines = [line(n, k) for k in range(40)]
        if n == 30:
            lines[5] = "The lighthouse keeper counted forty-two herons at dawn."
        if n == 31:
            lines[5] = "A cooper mended nine barrels for the brewery."
        streams.append(content([Run(72, 700 - 14 * k, text) for k, text in enumerate(lines)]))
    write_pdf(folder / "log.pdf", streams)
    env = {**os.environ, **cli.env}

    def ragvps(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ragvps", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=waiting.seconds(300),
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    report = json.loads(ragvps("ingest", str(folder), "--json"))
    assert report["documents"] == 1 and not report["skipped"], report
    for question, number in (("lighthouse keeper herons", 30), ("cooper barrels brewery", 31)):
        hits = json.loads(ragvps("query", question, "--json"))
        assert hits[0]["path"] == "log.pdf" and hits[0]["pages"] == [number], hits[0]
