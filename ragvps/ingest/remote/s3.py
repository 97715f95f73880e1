"""An S3-compatible bucket as a source: the objects under a prefix, listed with ListObjectsV2 and read with
GetObject only when their ETag changed, over httpx with Signature V4 (sigv4.py). The credentials are the source's
own (given when it was added, kept encrypted), or a profile of the server's source_credentials_file that the
source names, or the server's ambient AWS credentials only where source_ambient_credentials names the source;
else the requests are unsigned (a public bucket). The region and endpoint come from the source, or AWS_REGION and
AWS_ENDPOINT_URL(_S3) (path-style URLs: MinIO, Ceph, Garage, moto). No signed request follows a redirect. An
object whose key is not a safe relative path (`../x`, `/x`, `a//b`) is skipped and named, never written outside
the mirror. Each object links to `<endpoint>/<bucket>/<key>`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import httpx
from defusedxml import ElementTree

from ragvps import reach
from ragvps.db.sources import Item
from ragvps.errors import UnavailableError
from ragvps.ingest.remote import Fetch, Fetched
from ragvps.ingest.remote.http import Refused, decoded, get, site
from ragvps.ingest.remote.mirror import kept, remove, safe_rel
from ragvps.ingest.remote.sigv4 import Credentials, encode, signed_headers
from ragvps.ingest.remote.sigv4 import decoded as decoded_credentials
from ragvps.ingest.sources import KINDS

_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
LISTING_BYTES = 16 << 20  # one ListObjectsV2 page (1,000 keys of at most 1,024 bytes each is about 1.5 MB)
MIN_PAGES = 100  # listing pages read at least (beyond 10 x max_items / 1,000): skipped objects count too


@dataclass(frozen=True)
class Bucket:
    endpoint: str
    name: str
    region: str
    creds: Credentials | None

    def url(self, key: str = "", query: str = "") -> str:
        path = f"/{self.name}" + (f"/{encode(key, safe='/-_.~')}" if key else "")
        return f"{self.endpoint}{path}" + (f"?{query}" if query else "")

    def headers(self, url: str) -> dict[str, str]:
        return signed_headers(url, self.region, self.creds) if self.creds else {}


def bucket(fetch: Fetch) -> Bucket:
    region = fetch.text("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    endpoint = (
        fetch.text("endpoint")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or f"https://s3.{region}.amazonaws.com"
    )
    return Bucket(endpoint.rstrip("/"), fetch.location, region, decoded_credentials(fetch.secret))


def _listing(fetch: Fetch, client: httpx.Client, b: Bucket) -> Iterator[tuple[str, str, int | None]]:
    """(key, ETag, size: None when the listing's is not a number) of each object under the prefix, page by page;
    each page read as a stream and bounded (LISTING_BYTES), the pages bounded too (max_items, then a margin for
    the objects skipped), and each page a point where a cancel stops the sync."""
    token, seen, pages = "", set[str](), max(MIN_PAGES, 10 * fetch.max_items // 1000 + 1)
    for page in range(1, pages + 1):
        fetch.progress("list", page, 0)  # raises Cancelled when the sync is cancelled
        query = "list-type=2&max-keys=1000&prefix=" + encode(fetch.text("prefix"))
        query += f"&continuation-token={encode(token)}" if token else ""
        root = _page(fetch, client, b, b.url(query=query))
        for entry in root.iter(f"{_NS}Contents"):
            size = (entry.findtext(f"{_NS}Size") or "0").strip()
            yield (
                entry.findtext(f"{_NS}Key") or "",
                (entry.findtext(f"{_NS}ETag") or "").strip('"'),
                int(size) if size.isdigit() else None,
            )
        token = root.findtext(f"{_NS}NextContinuationToken") or ""
        if root.findtext(f"{_NS}IsTruncated") != "true" or not token or token in seen:
            return
        seen.add(token)
    fetch.warn(f"source {fetch.name}: the listing goes on past {pages:,} pages; the rest not listed")


def _page(fetch: Fetch, client: httpx.Client, b: Bucket, url: str) -> ElementTree.Element:
    try:
        with client.stream("GET", url, headers=b.headers(url)) as response:
            body = b"".join(decoded(response, url, LISTING_BYTES, "the listing page limit", fetch.tick))
    except Refused as exc:
        raise UnavailableError(f"source {fetch.name}: listing bucket {b.name}: {exc}") from None
    except reach.Blocked as exc:
        raise UnavailableError(f"source {fetch.name}: S3 endpoint {b.endpoint}: {exc}") from None
    except httpx.HTTPError as exc:
        raise UnavailableError(
            f"source {fetch.name}: S3 at {b.endpoint} unreachable ({exc.__class__.__name__}); sync again later"
        ) from None
    try:
        root = ElementTree.fromstring(body) if body else None
    except (ElementTree.ParseError, ValueError) as exc:
        raise UnavailableError(f"source {fetch.name}: listing bucket {b.name}: not S3's XML ({exc})") from None
    if response.status_code != 200 or root is None:
        code = root.findtext("Code") if root is not None else ""
        raise UnavailableError(
            f"source {fetch.name}: listing bucket {b.name} at {b.endpoint}: HTTP "
            f"{response.status_code} {code or ''}; check the bucket, the endpoint and the source's credentials"
        )
    return root


def fetch(fetch: Fetch) -> Fetched:
    """Sync the bucket's objects under the prefix into the mirror, reading only those whose ETag changed."""
    b = bucket(fetch)
    out = Fetched()
    with reach.client(fetch.reach, fetch.timeout) as client:
        wanted = _wanted(fetch, client, b, out)
        changed = [
            k
            for k, etag in wanted.items()
            if (old := fetch.known.get(k)) is None or old.version != etag or not (fetch.mirror / old.rel).exists()
        ]
        for key in wanted:
            if key not in changed:
                out.items[key] = fetch.known[key]
                out.unchanged += 1
        for n, key in enumerate(changed, start=1):
            _read(fetch, client, b, key, wanted[key], out)
            fetch.progress("fetch", n, len(changed))
    for key, old in fetch.known.items():
        if key not in out.items:
            remove(fetch.mirror, old.rel)
            out.deleted += 1
    return out


def _wanted(fetch: Fetch, client: httpx.Client, b: Bucket, out: Fetched) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for key, etag, size in _listing(fetch, client, b):
        if key.endswith("/"):
            continue  # a folder marker
        if size is None:
            out.skip(
                "bad listing",
                f"{fetch.name}: object {key!r}: its listed size is not a number, skipped",
                fetch.warn,
                key,
            )
        elif safe_rel(key) is None:
            out.skip(
                "unsafe key", f"{fetch.name}: object key {key!r} is not a safe relative path, skipped", fetch.warn, key
            )
        elif PurePosixPath(key).suffix.lower() not in KINDS:
            out.skipped["unsupported type"] += 1
        elif size > fetch.max_item_bytes:
            out.skip(
                "too large",
                f"{fetch.name}: {key}: {size:,} bytes, more than max_item_bytes ({fetch.max_item_bytes:,}), skipped",
                fetch.warn,
                key,
            )
        elif len(wanted) >= fetch.max_items:
            out.skip(
                "over max_items",
                f"{fetch.name}: more than {fetch.max_items:,} objects; {key} and the rest skipped (raise max_items)",
                fetch.warn,
            )
            break
        else:
            wanted[key] = etag
    return wanted


def _read(fetch: Fetch, client: httpx.Client, b: Bucket, key: str, etag: str, out: Fetched) -> None:
    url = b.url(key)
    try:
        got = get(client, url, fetch.max_item_bytes, same_site=site(b.endpoint), extra=b.headers(url), tick=fetch.tick)
    except Refused as exc:
        if (old := fetch.known.get(key)) is not None and not exc.gone:
            out.items[key] = old
        out.skip(exc.reason, f"{fetch.name}: {exc}", fetch.warn, url)
        return
    rel = safe_rel(key)
    assert rel is not None  # _wanted kept only safe keys
    if not kept(fetch, out, key, rel, got.body):
        return
    out.items[key] = Item(rel, url, etag)
    out.read += 1
