"""An upload's body, streamed to disk as it arrives (never whole in memory), under the knowledge base's folder:
`multipart/form-data` with one or many files, or JSON `{"path", "text"}` (or a list of them) for apps that
send text. Bounded by upload_max_bytes (the whole body), upload_max_file_bytes (one file) and upload_max_files;
a JSON body is parsed in memory, so it is bounded by upload_max_json_bytes (16 MB) and refused above it with a
413 that says to send multipart. Names neutralised by ingest.uploads.safe_name and made unique by unique.
Whatever goes wrong (a limit, a cut-off body, a client gone), the files received so far are removed and no
job is made."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import unquote

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from ragvps.app import documents as uploads
from ragvps.app.documents import StagedFile
from ragvps.config import ServeSettings
from ragvps.errors import InputTooLongError, UsageError
from ragvps.serve.gate.limits import SlowBody
from ragvps.serve.shared.threads import in_thread

if TYPE_CHECKING:
    from starlette.requests import Request

TEXT_SUFFIXES = (".md", ".markdown", ".txt", ".text", ".html", ".htm", ".jsonl")
_FILENAME_STAR = re.compile(rb"filename\*\s*=\s*utf-8''([^;]+)", re.I)


class ClientGone(Exception):
    """The client disconnected before the body's end: nobody is there to answer."""


def too_large(what: str, limit: int, setting: str) -> InputTooLongError:
    return InputTooLongError(
        f"{what} is larger than {limit:,} (setting {setting}): send fewer or smaller files, or raise {setting}",
        settings=(setting,),
    )


def json_too_large(cap: int) -> InputTooLongError:
    """A JSON upload is parsed in memory: past its bound, the client is told to stream files as multipart."""
    return InputTooLongError(
        f"a JSON upload is larger than {cap:,} bytes (setting upload_max_json_bytes; JSON is "
        "parsed in memory): send large or many files as multipart/form-data, which is streamed "
        "to disk",
        settings=("upload_max_json_bytes",),
    )


async def receive(request: Request, kb_dir: Path, job: str, limits: ServeSettings) -> list[StagedFile]:
    """The upload's files, staged under KB_DIR/incoming/JOB; none left there when it fails."""
    declared = request.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limits.upload_max_bytes:
        raise too_large("the upload", limits.upload_max_bytes, "upload_max_bytes")
    folder = uploads.staging_dir(kb_dir, job)
    folder.mkdir(parents=True, exist_ok=True)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    try:
        if kind == "multipart/form-data":
            files = await Multipart(request, kb_dir, folder, limits).receive()
        elif kind == "application/json":
            files = await _json(request, kb_dir, folder, limits)
        else:
            raise UsageError(
                f'an upload is multipart/form-data (files) or application/json ({{"path", "text"}}), '
                f"not {kind or 'a body without a Content-Type'}"
            )
        if not files:
            raise UsageError("the upload holds no file: send each as a multipart part with a filename")
        return files
    except BaseException:
        uploads.discard(kb_dir, job)
        raise


async def _body(request: Request, idle: float) -> AsyncIterator[bytes]:
    """The body's pieces as they come; a piece not arriving within `idle` seconds ends the upload (408)."""
    stream = request.stream().__aiter__()
    while True:
        try:
            async with asyncio.timeout(idle):
                piece = await stream.__anext__()
        except StopAsyncIteration:
            return
        except ClientDisconnect:
            raise ClientGone from None
        except TimeoutError:
            raise SlowBody(
                f"the upload stalled: nothing arrived for {idle:g} s (setting request_timeout)",
                settings=("request_timeout",),
            ) from None
        yield piece


class Multipart:
    """The multipart parser's callbacks: each part with a filename goes to a file of its own as it arrives."""

    def __init__(self, request: Request, kb_dir: Path, folder: Path, limits: ServeSettings):
        self.request, self.kb_dir, self.folder, self.limits = request, kb_dir, folder, limits
        self.files: list[StagedFile] = []
        self.names: set[str] = set()
        self.header: list[bytes] = []
        self.value: list[bytes] = []
        self.disposition = b""
        self.out: IO[bytes] | None = None
        self.name = ""
        self.size = 0
        self.ended = False

    async def receive(self) -> list[StagedFile]:
        _, params = parse_options_header(self.request.headers.get("content-type", ""))
        boundary = params.get(b"boundary")
        if not boundary:
            raise UsageError("the multipart upload has no boundary in its Content-Type")
        parser = MultipartParser(
            boundary,
            {
                "on_part_begin": self._begin,
                "on_header_field": lambda d, s, e: self.header.append(d[s:e]),
                "on_header_value": lambda d, s, e: self.value.append(d[s:e]),
                "on_header_end": self._header_end,
                "on_headers_finished": self._open,
                "on_part_data": self._data,
                "on_part_end": self._close,
                "on_end": self._end,
            },
        )
        total = 0
        try:
            async for piece in _body(self.request, float(self.limits.request_timeout)):
                total += len(piece)
                if total > self.limits.upload_max_bytes:
                    raise too_large("the upload", self.limits.upload_max_bytes, "upload_max_bytes")
                parser.write(piece)
        except ValueError as exc:  # python_multipart's parse errors are ValueErrors
            raise UsageError(
                f"the multipart body is malformed after {total:,} bytes ({exc}): nothing of it was "
                "kept; send files as multipart/form-data parts with a filename"
            ) from None
        finally:
            if self.out is not None:
                self.out.close()
        if not self.ended:
            raise UsageError(
                f"the upload was cut off after {total:,} bytes, before the multipart body's end: "
                "nothing of it was kept; send it again"
            )
        return self.files

    def _begin(self) -> None:
        self.header, self.value, self.disposition = [], [], b""

    def _header_end(self) -> None:
        if b"".join(self.header).lower() == b"content-disposition":
            self.disposition = b"".join(self.value)
        self.header, self.value = [], []

    def _open(self) -> None:
        _, params = parse_options_header(self.disposition)
        star = _FILENAME_STAR.search(self.disposition)
        raw = (
            unquote(star.group(1).decode("latin-1"))
            if star
            else params.get(b"filename", b"").decode("utf-8", "replace")
        )
        if not star and b"filename" not in params:
            self.out = None  # a plain form field: not a file, not kept
            return
        if len(self.files) >= self.limits.upload_max_files:
            raise too_large(
                f"the number of files (more than {self.limits.upload_max_files:,})",
                self.limits.upload_max_files,
                "upload_max_files",
            )
        self.name, self.size = uploads.unique(uploads.safe_name(raw), self.names), 0
        self.out = (self.folder / str(len(self.files))).open("wb")

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self.out is None:
            return
        self.size += end - start
        if self.size > self.limits.upload_max_file_bytes:
            raise too_large(f"file {self.name}", self.limits.upload_max_file_bytes, "upload_max_file_bytes")
        self.out.write(data[start:end])

    def _close(self) -> None:
        if self.out is None:
            return
        path = Path(self.out.name)
        self.out.close()
        self.out = None
        self.files.append(StagedFile(len(self.files), self.name, path.relative_to(self.kb_dir).as_posix(), self.size))

    def _end(self) -> None:
        self.ended = True


async def _json(request: Request, kb_dir: Path, folder: Path, limits: ServeSettings) -> list[StagedFile]:
    """`{"path", "text"}` or a list of them, each written as a file named by its path (`.txt` added when the
    path's extension is not one of a text format)."""
    cap = min(limits.upload_max_json_bytes, limits.upload_max_file_bytes)
    declared = request.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > cap:
        raise json_too_large(cap)
    body = bytearray()
    async for piece in _body(request, float(limits.request_timeout)):
        body += piece
        if len(body) > cap:
            raise json_too_large(cap)
    return await in_thread(lambda: _staged(bytes(body), kb_dir, folder, limits), float(limits.request_timeout))


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # a JSON string, unrolled: linear, at C speed


def parsed_json(body: bytes, max_items: int) -> object:
    """`body` as JSON `{...}` or `[{...}, ...]`, bounded before it is parsed: at most `max_items` objects and
    arrays, nested two deep at most (what an upload is), so that `[[],[],...]` of 16 MiB or `[[[[...]]]]` costs
    a scan, not a parse (a list each, or Python's recursion)."""
    skeleton = _STRING.sub(b'""', body)
    opened = skeleton.count(b"{") + skeleton.count(b"[")
    if opened > max_items + 1:
        raise too_large(f"the number of JSON objects and arrays ({opened:,})", max_items, "upload_max_files")
    depth = deepest = 0
    for byte in skeleton.translate(None, b' \t\r\n",:0123456789.-+eEtruefalsn'):
        depth += 1 if byte in b"[{" else -1
        deepest = max(deepest, depth)
    if deepest > 2:
        raise UsageError('the JSON body is nested deeper than an upload is: send {"path": ..., "text": ...} or a list')
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f'the body is not valid JSON ({exc}): send {{"path": ..., "text": ...}}') from None


def _staged(body: bytes, kb_dir: Path, folder: Path, limits: ServeSettings) -> list[StagedFile]:
    """The JSON upload's texts written as files (off the event loop: the parse of 16 MiB takes a while)."""
    parsed = parsed_json(body, limits.upload_max_files)
    items = parsed if isinstance(parsed, list) else [parsed]
    if len(items) > limits.upload_max_files:
        raise too_large(f"the number of texts ({len(items):,})", limits.upload_max_files, "upload_max_files")
    files: list[StagedFile] = []
    names: set[str] = set()
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str) or not isinstance(item.get("text"), str):
            raise UsageError(f'item {n} is not {{"path": string, "text": string}}')
        name = uploads.safe_name(item["path"])
        if not name.lower().endswith(TEXT_SUFFIXES):
            name += ".txt"
        name = uploads.unique(name, names)
        data = item["text"].encode("utf-8", "replace")
        (folder / str(n)).write_bytes(data)
        files.append(StagedFile(n, name, (folder / str(n)).relative_to(kb_dir).as_posix(), len(data)))
    return files
