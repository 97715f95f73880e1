"""HTTP for the web and S3 connectors: one GET with its limits (bytes, redirects, same site), a sitemap read as a
stream and cut at a number of URLs, robots.txt. Each refusal is a `Refused` naming the URL and the limit."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit
from urllib.robotparser import RobotFileParser

import httpx

from ragvps.reach import Blocked

AGENT = "ragvps"
MAX_REDIRECTS = 5
MAX_SITEMAP_BYTES = 50 << 20  # the sitemap protocol's own limit for one file


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
) -> Got:
    """GET `url`, following at most MAX_REDIRECTS redirects within `same_site`, reading at most `limit` bytes;
    with `version` (an earlier Got's), a conditional GET: 304 comes back with no body. `extra`: more headers,
    credentials among them: a request that carries them follows a redirect only within `same_site` (never,
    without it), so they never reach another host."""
    headers = {"User-Agent": AGENT, **(extra or {})}
    kind, _, value = version.partition(":")
    if kind == "etag":
        headers["If-None-Match"] = value
    elif kind == "modified":
        headers["If-Modified-Since"] = value
    for _ in range(MAX_REDIRECTS + 1):
        try:
            with client.stream("GET", url, headers=headers) as response:
                if response.has_redirect_location:
                    target = urljoin(url, response.headers.get("location", ""))
                    if same_site is not None and site(target) != same_site:
                        raise Refused("redirect off-site", f"{url}: redirects off-site to {target}, not followed")
                    if extra and same_site is None:
                        raise Refused("redirect", f"{url}: redirects; not followed with credentials attached")
                    url = target
                    continue
                return _answer(url, response, limit)
        except Blocked as exc:
            raise Refused("address not allowed", f"{url}: {exc}") from None
        except httpx.HTTPError as exc:
            raise Refused("unreachable", f"{url}: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
    raise Refused("too many redirects", f"{url}: more than {MAX_REDIRECTS} redirects, not followed")


def _answer(url: str, response: httpx.Response, limit: int) -> Got:
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
    for block in response.iter_bytes():
        body += block
        if len(body) > limit:
            raise Refused("too large", f"{url}: more than max_item_bytes ({limit:,} bytes), skipped")
    return Got(url, status, bytes(body), content_type, version)


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
    client: httpx.Client, url: str, limit: int, same_site: str, extra: Mapping[str, str] | None = None
) -> Iterator[tuple[str, bool]]:
    """(URL, is a nested sitemap) of a sitemap or sitemap index, read as a stream and stopped once `limit` URLs
    are out (a sitemap of a million URLs costs what its first `limit` do)."""
    count = 0
    try:
        with client.stream("GET", url, headers={"User-Agent": AGENT, **(extra or {})}) as response:
            if response.status_code != 200:
                raise Refused(f"HTTP {response.status_code}", f"{url}: HTTP {response.status_code}")
            index = None
            pending, read = b"", 0
            for block in response.iter_bytes():
                read += len(block)
                if read > MAX_SITEMAP_BYTES:
                    raise Refused("sitemap too large", f"{url}: more than {MAX_SITEMAP_BYTES:,} bytes")
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
