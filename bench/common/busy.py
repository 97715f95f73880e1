"""Upload-to-searchable on a machine whose cores are busy (issue 51 part 6): `ragvps serve` of this checkout and
of the baseline's side by side in one run, each taking a one-line note while other processes keep every core busy,
timed from the POST to the first search that finds it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from support.serve_server import KEY, Server

MAX_ROUND_S = 300.0  # one upload waits at most this long to be found


@dataclass
class BusyRun:
    label: str
    seconds: list[float]  # each round's upload-to-searchable; the first starts the server's worker
    load: list[float]  # the 1-minute load when each upload was sent

    def row(self) -> str:
        cold, warm = self.seconds[0], sorted(self.seconds[1:])
        median = warm[len(warm) // 2] if warm else float("nan")
        loads = f"{min(self.load):.1f}-{max(self.load):.1f}"
        return f"| {self.label} | {cold:.1f} | {median:.2f} | {max(self.seconds):.1f} | {loads} |"


def spinners(n: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    """`n` processes that each keep a core busy at normal priority, for at most `seconds`."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]


def searchable(c: httpx.Client, word: str, name: str, bound: float) -> float:
    """Seconds until a search for `word` finds the file `name` first (the bound when it never does)."""
    start = time.monotonic()
    while time.monotonic() - start < bound:
        hits = c.post("/search", json={"query": word, "k": 1, "mode": "keyword"}).json().get("hits", [])
        if hits and hits[0]["path"] == name:
            return time.monotonic() - start
        time.sleep(0.1)
    return bound


def busy_rounds(label: str, env: dict[str, str], checkout: Path, log: Path, rounds: int, spin: int) -> BusyRun:
    """`rounds` one-line uploads to a server of `checkout`, each while `spin` processes keep the cores busy."""
    server = Server(env | {"RAGVPS_API_KEYS": KEY}, log, key=KEY, cwd=checkout).start(timeout=300)
    run = BusyRun(label, [], [])
    try:
        c = server.client()
        for i in range(rounds):
            busy = spinners(spin, MAX_ROUND_S + 10)
            try:
                time.sleep(1.0)  # the spinners have the cores before the upload is sent
                word, name = f"kingfisher{label[:4]}{i}x{os.getpid()}", f"busy-note-{i}.md"
                note = f"# Note {i}\n\nThe {word} feeder is refilled on Thursdays.\n".encode()
                run.load.append(os.getloadavg()[0])
                start = time.monotonic()
                posted = c.post("/kb/default/documents", files=[("files", (name, note, "text/markdown"))])
                posted.raise_for_status()
                searchable(c, word, name, MAX_ROUND_S)
                run.seconds.append(time.monotonic() - start)
            finally:
                for p in busy:
                    p.kill()
                    p.wait()
    finally:
        server.stop()
    return run
