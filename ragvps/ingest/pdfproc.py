"""The PDF reader's own process. PDFium is C: a hostile file (a content-stream bomb, deep nesting, a page tree of a
million pages) cannot be stopped inside the process that reads it. So PDFs are read in a child process, one per
ingesting process, started at the first PDF (or forked as the command starts: `start`) and reused for the next (a
new interpreter, numpy and PDFium take about 0.25 s once; a fork, numpy and PDFium about 0.1 s): a page that takes
longer than pdf_page_seconds, or a file longer than pdf_file_seconds, has the child killed; the child's address
space is bounded by pdf_max_memory_mb; and a crash in PDFium fails that file alone. The file is skipped by name with
the bound it passed, and the next PDF gets a new child.

A command on a machine of two cores or more forks two readers as it starts, and a PDF of SHARE_PAGES pages or more
is read by both at once, each every other page (each within the same bounds), its pages put back in order here; a
server, or the reader after one was killed, reads with one, which leaves the other core to the searches.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
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
    multiprocessing, whose spawn runs the caller's main script again); `siblings`, the other readers' sockets, which
    a copy closes. Its memory is bounded at its first file, by that file's pdf_max_memory_mb (`memory_mb`: the bound
    it has, None before), and a reader is not reused for another bound."""

    def __init__(self, fork: bool = False, siblings: Sequence[int] = ()):
        ours, theirs = socket.socketpair()
        self.memory_mb: int | None = None
        self.process: subprocess.Popen[bytes] | _Forked = (
            _Forked.start(ours, theirs, siblings) if fork else _spawn(theirs)
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
READERS = 2  # the readers a command forks as it starts, where it has this many cores
SHARE_PAGES = 16  # a PDF of this many pages or more is shared between the readers there are
_MAIN = "import sys; from ragvps.ingest.pdfproc import main; main(int(sys.argv[1]))"
_THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
_LOCK = threading.Lock()
_CHILDREN: list[_Child] = []  # this process's readers, while they live: the first reads every PDF, the others share


def start() -> None:
    """Start the reader processes now, before the first PDF, so that their start overlaps the caller's own work:
    forked from this process where it has no other thread (a command starting), READERS of them on a machine with
    as many cores; else one, as a new interpreter."""
    with _LOCK:
        fork = _can_fork()
        _children(None, fork, min(READERS, _cores()) if fork else 1)


def _can_fork() -> bool:
    """Whether a copy of this process is a safe reader: Linux, and no thread but this one (a thread's locks would be
    copied held)."""
    return sys.platform == "linux" and threading.active_count() == 1


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _children(memory_mb: int | None, fork: bool = False, count: int = 1) -> list[_Child]:
    """The readers alive with this memory bound (or none yet), at least `count` of them (under _LOCK)."""
    alive = [c for c in _CHILDREN if c.memory_mb in (None, memory_mb) and c.alive()]
    for child in _CHILDREN:
        if child not in alive:
            child.kill()
    while len(alive) < count:
        alive.append(_Child(fork, siblings=[c.conn.fileno() for c in alive]))
    _CHILDREN[:] = alive
    return alive


def _spawn(theirs: socket.socket) -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])  # this ragvps, wherever the caller imported it from
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, str(theirs.fileno())],
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
    def start(cls, ours: socket.socket, theirs: socket.socket, siblings: Sequence[int]) -> _Forked:
        pid = os.fork()
        if pid:
            return cls(pid)
        code = 1
        try:  # the child: never back into the caller's code, nor its exit handlers or buffered output
            ours.close()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            for fd in siblings:  # the other readers' sockets: each reader sees the caller go when the caller goes
                os.close(fd)
            os.environ.update(_THREADS)
            main(theirs.fileno())
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
    """The file's page count and title, then its pages in order, read in the child processes within `limits`;
    PdfError (naming the file and the bound) when the file fails, whatever the way."""
    with _LOCK:
        children = _children(limits.memory_mb)
        try:
            children[0].wait_started()
        except PdfError as exc:
            _CHILDREN.clear()
            raise PdfError(exc.reason, f"{rel}: {exc}") from exc
        done = False
        try:
            yield from _Reading(children, path, rel, limits).answers(scans, figures)
            done = True
        finally:
            if not done:  # failed, or the caller stopped reading: the children may be mid-file
                for child in children:
                    child.kill()
                _CHILDREN.clear()


class _Reading:
    """One file read by the readers: the first opens it and says its page count; a long file is then shared, each
    reader reading every n-th page, and the answers are taken from each in turn, which is page order. The time
    waited on the readers is bounded per page and for the file."""

    def __init__(self, children: list[_Child], path: str, rel: str, limits: PdfLimits):
        self.children, self.path, self.rel, self.limits = children, path, rel, limits
        self.waited = 0.0  # the time spent waiting on the readers (not the caller's own, such as OCR)
        self.page = 1  # the page waited for

    def answers(self, scans: bool, figures: bool) -> Iterator[Opened | PageRead]:
        lead = self.children[0]
        ask = _Ask(self.path, self.rel, self.limits.max_pages, self.limits.memory_mb, scans, figures)
        for child in self.children:
            child.memory_mb = ask.memory_mb
        lead.conn.send(ask)
        opened = self._next(lead)
        if not isinstance(opened, Opened):
            raise PdfError("PDF reader failed", f"{self.rel}: the PDF reader answered out of turn; skipped")
        yield opened
        shared = [lead, *self._helpers()] if opened.pages >= SHARE_PAGES else [lead]
        lead.conn.send((0, len(shared)))
        for k, helper in enumerate(shared[1:], 1):
            helper.conn.send(replace(ask, share=(k, len(shared))))
        reading = list(shared)
        while reading:
            for child in list(reading):
                answer = self._next(child)
                if answer is None:
                    reading.remove(child)
                    continue
                if isinstance(answer, PageRead):
                    self.page = answer.page.number + 1
                yield answer

    def _helpers(self) -> list[_Child]:
        """The other readers that have started (a reader that cannot start is let go: the lead reads alone)."""
        out = []
        for child in self.children[1:]:
            try:
                child.wait_started()
            except PdfError:
                _CHILDREN.remove(child)
                continue
            out.append(child)
        return out

    def _next(self, child: _Child) -> Opened | PageRead | None:
        """The child's next answer: an Opened or PageRead, or None at the end of its share; PdfError otherwise."""
        limits, rel = self.limits, self.rel
        left = limits.file_seconds - self.waited
        started = time.monotonic()
        ready = child.conn.poll(max(0.0, min(limits.page_seconds, left)))
        self.waited += time.monotonic() - started
        if not ready:
            if left <= limits.page_seconds:
                raise PdfError(
                    "PDF too slow",
                    f"{rel}: reading it took longer than pdf_file_seconds={limits.file_seconds:g}; skipped",
                )
            raise PdfError(
                "PDF too slow",
                f"{rel}: page {self.page} took longer than pdf_page_seconds={limits.page_seconds:g}; skipped",
            )
        try:
            answer = child.conn.recv()
        except (EOFError, OSError) as exc:
            child.process.wait(5)
            raise PdfError(
                "PDF reader failed",
                f"{rel}: the PDF reader stopped on page {self.page} (exit {child.process.returncode}): more memory "
                f"than pdf_max_memory_mb={limits.memory_mb:,}, or a crash in PDFium; skipped",
            ) from exc
        if isinstance(answer, PdfError):
            raise answer
        return answer  # type: ignore[no-any-return]


@dataclass(frozen=True)
class _Ask:
    """A file for a reader to read; `share` (k, n): its pages k + 1, k + 1 + n, ..., or None for the lead, which
    first says the page count and is then told its share."""

    path: str
    rel: str
    max_pages: int
    memory_mb: int
    scans: bool
    figures: bool
    share: tuple[int, int] | None = None


def main(fd: int) -> None:
    """The child: read the files asked for on the socket `fd`, one at a time, answering with each page and None
    at the end of each; its memory bounded at the first."""
    conn = Connection(fd)
    from ragvps.ingest import pdfpages  # lazy: only the child loads PDFium

    conn.send(True)
    bounded = False
    while True:
        try:
            ask: _Ask = conn.recv()
        except (EOFError, OSError):
            return
        if not bounded:
            _bound_memory(ask.memory_mb)
            bounded = True
        rel = ask.rel
        try:
            doc, opened = pdfpages.open_counted(ask.path, rel, ask.max_pages)
            try:
                share = ask.share
                if share is None:  # the lead: its share once the caller knows the page count
                    conn.send(opened)
                    share = conn.recv()
                mine, shares = share
                for item in pdfpages.pages(doc, mine, shares, ask.scans, ask.figures):
                    conn.send(item)
            finally:
                doc.close()
            conn.send(None)
        except PdfError as exc:
            conn.send(exc)
        except MemoryError:
            conn.send(
                PdfError("PDF too large", f"{rel}: needs more memory than pdf_max_memory_mb={ask.memory_mb:,}; skipped")
            )
        except Exception as exc:  # PDFium's or pypdfium2's surprise on a damaged file
            message = f"{rel}: not a readable PDF ({exc.__class__.__name__}: {str(exc)[:200]}), skipped"
            conn.send(PdfError("unreadable PDF", message))


def _bound_memory(memory_mb: int) -> None:
    """Bound the child's address space to what it holds now (the interpreter, numpy, PDFium, idle before its first
    file) plus `memory_mb`."""
    try:
        import resource  # lazy: POSIX only

        with open("/proc/self/statm") as f:
            now = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return
    limit = now + (memory_mb << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
