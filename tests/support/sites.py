"""Real servers for the connected-source tests (issue 46), on 127.0.0.1 in threads: a folder served over HTTP
(git's dumb protocol, a web site), with handlers a test can add (redirects, endless or huge answers)."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

Handler = Callable[[http.server.BaseHTTPRequestHandler], bool]  # True: it answered the request


@contextmanager
def served(folder: Path, special: dict[str, Handler] | None = None) -> Iterator[str]:
    """`folder` served on 127.0.0.1 (ETag and Last-Modified from the file; 304 on a matching If-None-Match);
    `special` maps a path to a handler that answers it instead. Yields the base URL."""
    routes = special or {}

    class Handle(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            handler = routes.get(self.path.split("?")[0])
            if handler is not None and handler(self):
                return
            path = Path(self.translate_path(self.path))
            if path.is_file():
                tag = f'"{path.stat().st_mtime_ns:x}-{path.stat().st_size:x}"'
                if self.headers.get("If-None-Match") == tag:
                    self.send_response(304)
                    self.send_header("ETag", tag)
                    self.end_headers()
                    return
                self.etag = tag
            super().do_GET()

        def end_headers(self) -> None:
            tag = getattr(self, "etag", None)
            if tag:
                self.send_header("ETag", tag)
                self.etag = None
            super().end_headers()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handle, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def commit_all(repo: Path, message: str = "change") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def new_repo(repo: Path, files: dict[str, str]) -> str:
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    return commit_all(repo, "first")
