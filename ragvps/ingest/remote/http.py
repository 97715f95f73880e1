"""HTTP for the web and S3 connectors: one GET with its limits (bytes, redirects, same site), a sitemap read as a
stream and cut at a number of URLs, robots.txt. Each refusal is a `Refused` naming the URL and the limit."""

from __future__ import annotations

import functools
import re
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx

from ragvps.reach import Blocked

AGENT = "ragvps"
MAX_REDIRECTS = 5
MAX_SITEMAP_BYTES = 50 << 20  # the sitemap protocol's own limit for one file
MAX_ENCODINGS = 2  # Content-Encoding layers undone (`gzip, gzip` is two)
MAX_GET_S = 120.0  # one GET, its redirects and its body (a page that trickles in stops here)
Tick = Callable[[], None] | None  # called as a response streams: a cancel raises from it
ACCEPT = "gzip, deflate"  # what ragvps undoes itself, each layer bounded


class Refused(Exception):
    """Not read: `reason` is the skip reason counted, the message names the URL; `gone` for 404 and 410."""

    def __init__(self, reason: str, message: str, gone: bool = False):
        super().__init__(message)
        self.reason, self.gone = reason, gone


@dataclass(frozen=True)
class Got:
    url: str  # after same-site redirects
    status: int  # 200, or 304 (not modified: no body)
    body: bytes
    content_type: str
    version: str  # etag:..., modified:... (what the next request sends back), or "" without either


def site(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def get(
    client: httpx.Client,
    url: str,
    limit: int,
    version: str = "",
    same_site: str | None = None,
    extra: Mapping[str, str] | None = None,
    tick: Tick = None,
) -> Got:
    """GET `url`, following at most MAX_REDIRECTS redirects within `same_site`, reading at most `limit` bytes;
    with `version` (an earlier Got's), a conditional GET: 304 comes back with no body. `extra`: more headers,
    credentials among them: a request that carries an Authorization header (a signature, a password) follows
    no redirect at all, so they never reach another host or path."""
    headers = {"User-Agent": AGENT, "Accept-Encoding": ACCEPT, **(extra or {})}
    kind, _, value = version.partition(":")
    if kind == "etag":
        headers["If-None-Match"] = value
    elif kind == "modified":
        headers["If-Modified-Since"] = value
    deadline = time.monotonic() + MAX_GET_S
    for _ in range(MAX_REDIRECTS + 1):
        if tick:
            tick()
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.has_redirect_location:
                    target = urljoin(url, response.headers.get("location", ""))
                    if same_site is not None and site(target) != same_site:
                        raise Refused("redirect off-site", f"{url}: redirects off-site to {target}, not followed")
                    if extra and (same_site is None or "authorization" in {k.lower() for k in extra}):
                        raise Refused("redirect", f"{url}: redirects; not followed with credentials attached")
                    url = target
                    continue
                return _answer(url, response, limit, functools.partial(_alive, url, deadline, tick))
        except Blocked as exc:
            raise Refused("address not allowed", f"{url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise Refused("unreachable", f"{url}: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
    raise Refused("too many redirects", f"{url}: more than {MAX_REDIRECTS} redirects, not followed")


def _alive(url: str, deadline: float, tick: Tick) -> None:
    if tick:
        tick()
    if time.monotonic() > deadline:
        raise Refused("too slow", f"{url}: not read within {MAX_GET_S:.0f} s, skipped")


def _answer(url: str, response: httpx.Response, limit: int, alive: Callable[[], None]) -> Got:
    status = response.status_code
    if status in (404, 410):
        raise Refused("gone", f"{url}: HTTP {status}", gone=True)
    if status != 304 and not 200 <= status < 300:
        raise Refused(f"HTTP {status}", f"{url}: HTTP {status}")
    etag, modified = response.headers.get("etag"), response.headers.get("last-modified")
    version = f"etag:{etag}" if etag else f"modified:{modified}" if modified else ""
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if status == 304:
        return Got(url, 304, b"", content_type, version)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise Refused("too large", f"{url}: {int(declared):,} bytes, more than max_item_bytes ({limit:,}), skipped")
    body = bytearray()
    for block in decoded(response, url, limit, "max_item_bytes", alive):
        body += block
    return Got(url, status, bytes(body), content_type, version)


class _Layer:
    """One Content-Encoding layer undone with its output bounded (a zlib bomb stops at the bound, not in memory)."""

    def __init__(self, coding: str):
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}[coding]
        self.coding, self.raw = coding, coding == "deflate"
        self.inflate = zlib.decompressobj(wbits)
        self.out = 0

    def feed(self, data: bytes, budget: int) -> bytes:
        if self.raw and self.out == 0 and data and (data[0] & 0x0F) != 8:  # deflate sent without its zlib header
            self.inflate = zlib.decompressobj(-zlib.MAX_WBITS)
        self.raw = False
        got = self.inflate.decompress(data, budget + 1)
        self.out += len(got)
        if self.out > budget or self.inflate.unconsumed_tail:
            raise OverflowError
        return got


def decoded(
    response: httpx.Response, url: str, limit: int, setting: str, alive: Callable[[], None] | None = None
) -> Iterator[bytes]:
    """The response's body with its Content-Encoding layers undone (`gzip, gzip` too), in blocks, refused once the
    decoded bytes of any layer pass `limit`: the bound holds while the body streams, however well it packs."""
    codings = [c.strip().lower() for c in response.headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if len(codings) > MAX_ENCODINGS or any(c not in ("gzip", "x-gzip", "deflate") for c in codings):
        raise Refused("encoding", f"{url}: Content-Encoding {', '.join(codings)} is not read (gzip or deflate)")
    layers = [_Layer(c) for c in reversed(codings)]
    total = 0
    try:
        for raw in response.iter_raw():
            if alive:
                alive()
            for layer in layers:
                raw = layer.feed(raw, limit)
            total += len(raw)
            if total > limit:
                raise OverflowError
            if raw:
                yield raw
    except OverflowError:
        raise Refused("too large", f"{url}: more than {setting} ({limit:,} bytes) decoded, skipped") from None
    except zlib.error as exc:
        raise Refused("encoding", f"{url}: its {'/'.join(codings)} body is corrupt ({exc})") from None


def robots(client: httpx.Client, base: str, extra: Mapping[str, str] | None = None) -> RobotFileParser:
    """The site's robots.txt (none, or unreadable: everything allowed)."""
    parser = RobotFileParser()
    try:
        got = get(client, f"{base}/robots.txt", 512 << 10, same_site=base, extra=extra)
        parser.parse(got.body.decode("utf-8", "replace").splitlines())
    except Refused:
        parser.parse([])
    return parser


_LOC = re.compile(rb"<loc>\s*([^<\s]+)\s*</loc>", re.IGNORECASE)


def sitemap_urls(
    client: httpx.Client,
    url: str,
    limit: int,
    same_site: str,
    extra: Mapping[str, str] | None = None,
    tick: Tick = None,
) -> Iterator[tuple[str, bool]]:
    """(URL, is a nested sitemap) of a sitemap or sitemap index, read as a stream and stopped once `limit` URLs
    are out (a sitemap of a million URLs costs what its first `limit` do)."""
    count = 0
    try:
        headers = {"User-Agent": AGENT, "Accept-Encoding": ACCEPT, **(extra or {})}
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                raise Refused(f"HTTP {response.status_code}", f"{url}: HTTP {response.status_code}")
            index = None
            pending = b""
            for block in decoded(response, url, MAX_SITEMAP_BYTES, "the sitemap limit", tick):
                pending += block
                if index is None and b">" in pending:
                    index = b"<sitemapindex" in pending[:4096].lower()
                end = pending.rfind(b"</loc>")
                if end < 0:
                    continue
                for match in _LOC.finditer(pending[: end + 6]):
                    if count >= limit:
                        return
                    yield match.group(1).decode("utf-8", "replace").replace("&amp;", "&"), bool(index)
                    count += 1
                pending = pending[end + 6 :]
    except Blocked as exc:
        raise Refused("address not allowed", f"{url}: {exc}") from None
    except httpx.HTTPError as exc:
        raise Refused("unreachable", f"{url}: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
