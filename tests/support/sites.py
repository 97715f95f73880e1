"""Real servers for the connected-source tests (issue 46), on 127.0.0.1 in threads: a folder served over HTTP
(git's dumb protocol, a web site), with handlers a test can add (redirects, endless or huge answers)."""

from __future__ import annotations

import functools
import gzip
import http.server
import subprocess
import threading
import zlib
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


def gzip_bomb(size: int, layers: int = 2) -> bytes:
    """`size` zero bytes gzipped `layers` times (300 MiB twice: about 1 KiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(1 << 20)
    data = b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()
    for _ in range(layers - 1):
        data = gzip.compress(data, 9)
    return data


def encoded(body: bytes, encoding: str, content_type: str = "text/html") -> Handler:
    """A handler answering `body` as it is, declared with `Content-Encoding: encoding`."""

    def handle(handler: http.server.BaseHTTPRequestHandler) -> bool:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Encoding", encoding)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True

    return handle


S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def s3_bucket(
    name: str = "handbook",
    keys: dict[str, bytes] | None = None,
    sizes: dict[str, str] | None = None,
    raw_listing: bytes | None = None,
    endless: list[int] | None = None,
    heard: list[tuple[str, str]] | None = None,
) -> dict[str, Handler]:
    """Routes of a bucket as an S3 server answers it (path-style): ListObjectsV2 of `keys` (a listed size from
    `sizes` instead of the real one), or `raw_listing` sent gzipped, or, with `endless`, a listing whose every
    page says there is another (each page's number appended to `endless`); GetObject of each key. `heard` gets
    each request's (path, Authorization header)."""
    objects = keys or {}

    def listing(handler: http.server.BaseHTTPRequestHandler) -> bool:
        if heard is not None:
            heard.append((handler.path, handler.headers.get("Authorization", "")))
        if raw_listing is not None:
            return encoded(raw_listing, "gzip", "application/xml")(handler)
        entries = "".join(
            f"<Contents><Key>{key}</Key><ETag>&quot;{len(body)}-{hash(body) & 0xFFFF:x}&quot;</ETag>"
            f"<Size>{(sizes or {}).get(key, len(body))}</Size></Contents>"
            for key, body in objects.items()
        )
        more = ""
        if endless is not None:
            endless.append(len(endless) + 1)
            more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>t{len(endless)}</NextContinuationToken>"
            entries = entries if len(endless) == 1 else ""
        body = f'<?xml version="1.0"?><ListBucketResult xmlns="{S3_NS}">{entries}{more}</ListBucketResult>'
        return encoded(body.encode(), "identity", "application/xml")(handler)

    def getter(body: bytes) -> Handler:
        def get(handler: http.server.BaseHTTPRequestHandler) -> bool:
            if heard is not None:
                heard.append((handler.path, handler.headers.get("Authorization", "")))
            return encoded(body, "identity", "text/markdown")(handler)

        return get

    return {f"/{name}": listing} | {f"/{name}/{key}": getter(body) for key, body in objects.items()}
