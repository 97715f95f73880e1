"""The PDF reader's own process. PDFium is C: a hostile file (a content-stream bomb, deep nesting, a page tree of a
million pages) cannot be stopped inside the process that reads it. So PDFs are read in a child process, one per
ingesting process, started at the first PDF (or forked as the command starts: `start`) and reused for the next (a
new interpreter, numpy and PDFium take about 0.25 s once; a fork, numpy and PDFium about 0.1 s): a page that takes
longer than pdf_page_seconds, or a file longer than pdf_file_seconds, has the child killed; the child's address
space is bounded by pdf_max_memory_mb; and a crash in PDFium fails that file alone. The file is skipped by name with
the bound it passed, and the next PDF gets a new child.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from ragvps.ingest.pdflayout import Opened, PageRead, PdfError


@dataclass(frozen=True)
class PdfLimits:
    """What reading one PDF may take (settings pdf_max_pages, pdf_page_seconds, pdf_file_seconds, pdf_max_memory_mb)."""

    max_pages: int = 10_000
    page_seconds: float = 60.0
    file_seconds: float = 600.0
    memory_mb: int = 1024


class _Child:
    """The reader process, its end of a socket pair passed by descriptor. Started, it is waited for (its hello) at its
    first file. `fork`: a copy of this process (a few milliseconds, where a new interpreter takes about 0.15 s before
    it imports anything), for a caller with no other thread yet (`start`, as a command starts); else `python -c` (not
    multiprocessing, whose spawn runs the caller's main script again)."""

    def __init__(self, memory_mb: int, fork: bool = False):
        ours, theirs = socket.socketpair()
        self.memory_mb = memory_mb
        self.process: subprocess.Popen[bytes] | _Forked = (
            _Forked.start(ours, theirs, memory_mb) if fork else _spawn(theirs, memory_mb)
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.started = False

    def wait_started(self) -> None:
        """Its start (an interpreter, numpy, PDFium) is not the first page's time."""
        if self.started:
            return
        try:
            self.started = self.conn.poll(STARTUP_SECONDS) and self.conn.recv() is True
        except (EOFError, OSError):
            self.started = False
        if not self.started:
            self.kill()
            raise PdfError(
                "PDF reader failed",
                "the PDF reader process did not start: install ragvps's dependencies (`pip install ragvps`, which "
                "brings pypdfium2); skipped",
            )

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)
        self.conn.close()


STARTUP_SECONDS = 120
_MAIN = "import sys; from ragvps.ingest.pdfproc import main; main(int(sys.argv[1]), int(sys.argv[2]))"
_THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
_LOCK = threading.Lock()
_CHILDREN: list[_Child] = []  # the one child of this process, while it lives


def start(memory_mb: int) -> None:
    """Start the reader process now, before the first PDF, so that its start overlaps the caller's own work; forked
    from this process where it has no other thread (a command starting), as a new interpreter otherwise."""
    with _LOCK:
        _child(memory_mb, fork=_can_fork())


def _can_fork() -> bool:
    """Whether a copy of this process is a safe reader: Linux, and no thread but this one (a thread's locks would be
    copied held)."""
    return sys.platform == "linux" and threading.active_count() == 1


def _child(memory_mb: int, fork: bool = False) -> _Child:
    """The one child, with this memory bound (under _LOCK)."""
    child = _CHILDREN[0] if _CHILDREN and _CHILDREN[0].alive() else None
    if child is None or child.memory_mb != memory_mb:
        if child is not None:
            child.kill()
        child = _Child(memory_mb, fork)
        _CHILDREN[:] = [child]
    return child


def _spawn(theirs: socket.socket, memory_mb: int) -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])  # this ragvps, wherever the caller imported it from
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, str(theirs.fileno()), str(memory_mb)],
        pass_fds=(theirs.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path, **_THREADS},
    )


class _Forked:
    """A forked reader, waited for as subprocess.Popen waits for a spawned one (poll, wait, kill, returncode)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    @classmethod
    def start(cls, ours: socket.socket, theirs: socket.socket, memory_mb: int) -> _Forked:
        pid = os.fork()
        if pid:
            return cls(pid)
        code = 1
        try:  # the child: never back into the caller's code, nor its exit handlers or buffered output
            ours.close()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.environ.update(_THREADS)
            main(theirs.fileno(), memory_mb)
            code = 0
        finally:
            os._exit(code)

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int | None:
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def read(path: str, rel: str, limits: PdfLimits, scans: bool, figures: bool) -> Iterator[Opened | PageRead]:
    """The file's page count and title, then its pages, read in the child process within `limits`; PdfError
    (naming the file and the bound) when the file fails, whatever the way."""
    with _LOCK:
        child = _child(limits.memory_mb)
        try:
            child.wait_started()
        except PdfError as exc:
            _CHILDREN.clear()
            raise PdfError(exc.reason, f"{rel}: {exc}") from exc
        done = False
        try:
            yield from _answers(child, path, rel, limits, scans, figures)
            done = True
        finally:
            if not done:  # failed, or the caller stopped reading: the child may be mid-file
                child.kill()
                _CHILDREN.clear()


def _answers(
    child: _Child, path: str, rel: str, limits: PdfLimits, scans: bool, figures: bool
) -> Iterator[Opened | PageRead]:
    child.conn.send((path, rel, limits.max_pages, scans, figures))
    waited = 0.0  # the time spent waiting on the child (not the caller's own, such as OCR)
    page = 1
    while True:
        left = limits.file_seconds - waited
        started = time.monotonic()
        ready = child.conn.poll(max(0.0, min(limits.page_seconds, left)))
        waited += time.monotonic() - started
        if not ready:
            if left <= limits.page_seconds:
                raise PdfError(
                    "PDF too slow",
                    f"{rel}: reading it took longer than pdf_file_seconds={limits.file_seconds:g}; skipped",
                )
            raise PdfError(
                "PDF too slow", f"{rel}: page {page} took longer than pdf_page_seconds={limits.page_seconds:g}; skipped"
            )
        try:
            answer = child.conn.recv()
        except (EOFError, OSError) as exc:
            child.process.wait(5)
            raise PdfError(
                "PDF reader failed",
                f"{rel}: the PDF reader stopped on page {page} (exit {child.process.returncode}): more memory than "
                f"pdf_max_memory_mb={limits.memory_mb:,}, or a crash in PDFium; skipped",
            ) from exc
        if answer is None:
            return
        if isinstance(answer, PdfError):
            raise answer
        if isinstance(answer, PageRead):
            page = answer.page.number + 1
        yield answer


def main(fd: int, memory_mb: int) -> None:
    """The child: read the files asked for on the socket `fd`, one at a time, answering with each page and None
    at the end of each."""
    conn = Connection(fd)
    from ragvps.ingest import pdfpages  # lazy: only the child loads PDFium

    _bound_memory(memory_mb)
    conn.send(True)

    while True:
        try:
            path, rel, max_pages, scans, figures = conn.recv()
        except (EOFError, OSError):
            return
        try:
            for item in pdfpages.read(path, rel, max_pages, scans, figures):
                conn.send(item)
            conn.send(None)
        except PdfError as exc:
            conn.send(exc)
        except MemoryError:
            conn.send(
                PdfError("PDF too large", f"{rel}: needs more memory than pdf_max_memory_mb={memory_mb:,}; skipped")
            )
        except Exception as exc:  # PDFium's or pypdfium2's surprise on a damaged file
            message = f"{rel}: not a readable PDF ({exc.__class__.__name__}: {str(exc)[:200]}), skipped"
            conn.send(PdfError("unreadable PDF", message))


def _bound_memory(memory_mb: int) -> None:
    """Bound the child's address space to what it holds now (the interpreter, numpy, PDFium) plus `memory_mb`."""
    try:
        import resource  # lazy: POSIX only

        with open("/proc/self/statm") as f:
            now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return
    limit = now + (memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
