"""A web site as a source: a sitemap (a URL ending in .xml) or a start page and the same-site links from it,
breadth first, to `max_depth` links and `max_pages` pages; robots.txt honoured. Each page is asked for with its
last ETag or Last-Modified, so an unchanged page answers 304 and is not read again. A page's main text is kept
by trafilatura (the extra `web`) as Markdown; without it, the page's HTML is read by ragvps's own HTML reader.
Limits, each reported by URL: a page over max_item_bytes, a redirect to another site, a sitemap past
max_pages URLs (read as a stream and cut there).
"""

from __future__ import annotations

import base64
import hashlib
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import httpx

from ragvps import reach
from ragvps.db.sources import Item
from ragvps.errors import UnavailableError
from ragvps.ingest.remote import Fetch, Fetched
from ragvps.ingest.remote.http import AGENT, Got, Refused, get, robots, site, sitemap_urls
from ragvps.ingest.remote.mirror import hashed_rel, remove, write

PAGE_BYTES = 10 << 20  # a page's default limit (max_item_bytes)
_TYPES = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "application/pdf": ".pdf",
}
RAW = ".raw"  # the pages' HTML as served, for their links when they answer 304 (a dot folder: never ingested)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.canonical: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        href = found.get("href")
        if tag == "a" and href:
            self.links.append(href)
        elif tag == "link" and href and "canonical" in (found.get("rel") or "").lower().split():
            self.canonical = self.canonical or href


def canonical(url: str) -> str:
    """One name for one page: no fragment, scheme and host in lower case, no default port, `/` for an empty path,
    and a folder's index page (`/docs/index.html`) as its folder (`/docs/`)."""
    parts = urlsplit(urldefrag(url)[0])
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    if parts.port is not None and (parts.scheme, parts.port) not in (("http", 80), ("https", 443)):
        host += f":{parts.port}"
    path = parts.path or "/"
    for index in ("index.html", "index.htm"):
        if path.endswith("/" + index):
            path = path[: -len(index)]
    return urlunsplit((parts.scheme.lower(), host, path, parts.query, ""))


def links_of(url: str, html: bytes, base: str) -> tuple[list[str], str | None]:
    """The page's same-site links, canonical, and the same-site canonical URL it declares (`<link rel=canonical>`)
    when it names another than its own."""
    parser = _Links()
    parser.feed(html.decode("utf-8", "replace"))
    out = []
    for href in parser.links:
        try:
            target = canonical(urljoin(url, href.strip()))
            if urlsplit(target).scheme in ("http", "https") and site(target) == base:
                out.append(target)
        except ValueError:  # a malformed link (`http://[broken`): not followed, the page is kept
            continue
    declared = None
    try:
        if parser.canonical:
            declared = canonical(urljoin(url, parser.canonical.strip()))
    except ValueError:
        declared = None
    same = declared is not None and site(declared) == base and declared != canonical(url)
    return out, declared if same else None


@dataclass
class _Crawl:
    fetch: Fetch
    client: httpx.Client
    out: Fetched
    base: str
    limit: int
    pages: int
    refused: dict[str, Refused] = field(default_factory=dict)  # URL -> why it was not read
    auth: dict[str, str] = field(default_factory=dict)  # the source's credential, for its own site only

    def page(self, url: str) -> Got | None:
        """Read one page into the mirror (or find it unchanged); None when it is not kept."""
        known = self.fetch.known.get(url)
        try:
            got = get(
                self.client, url, self.limit, known.version if known else "", self.base, self.auth, self.fetch.tick
            )
        except Refused as exc:
            if known is not None and not exc.gone:  # a passing failure keeps the page as it was
                self.out.items[url] = known
            self.refused[url] = exc
            self.out.skip(exc.reason, f"{self.fetch.name}: {exc}", self.fetch.warn, url)
            return None
        if got.status == 304 and known is not None and (self.fetch.mirror / known.rel).exists():
            self.out.items[url] = known
            self.out.unchanged += 1
            return got
        suffix = _TYPES.get(got.content_type)
        if suffix is None:
            self.out.skipped[f"type {got.content_type or 'unknown'}"] += 1
            return None
        version = got.version or "sha256:" + hashlib.sha256(got.body).hexdigest()
        if known is not None and known.version == version and (self.fetch.mirror / known.rel).exists():
            self.out.items[url] = known
            self.out.unchanged += 1
            return got
        rel = hashed_rel(url, suffix)
        data = got.body
        if suffix == ".html":
            write(self.fetch.mirror, f"{RAW}/{rel}", got.body)
            rel, data = main_text(url, got.body, rel)
        if known is not None and known.rel != rel:
            remove(self.fetch.mirror, known.rel)
        write(self.fetch.mirror, rel, data)
        self.out.items[url] = Item(rel, url, version)
        self.out.read += 1
        return got

    def drop(self, url: str, declared: str) -> None:
        """The page at `url` is a copy of `declared` (its rel=canonical): not an item of its own."""
        item = self.out.items.pop(url, None)
        if item is not None:
            remove(self.fetch.mirror, item.rel)
            if item is self.fetch.known.get(url):  # page() kept it unchanged
                self.out.unchanged -= 1
            else:
                self.out.read -= 1
        self.out.skipped["a copy of its canonical page"] += 1

    def html(self, url: str, got: Got) -> bytes:
        if got.status != 304:
            return got.body if _TYPES.get(got.content_type) == ".html" else b""
        raw = self.fetch.mirror / RAW / hashed_rel(url, ".html")
        return raw.read_bytes() if raw.exists() else b""


def main_text(url: str, html: bytes, rel: str) -> tuple[str, bytes]:
    """The page's main text as Markdown (trafilatura), or its HTML as it is when trafilatura is not installed
    or finds no main text (ragvps's HTML reader then drops scripts, styles and navigation)."""
    try:
        import trafilatura  # lazy: trafilatura comes with the web extra
    except ImportError:
        return rel, html
    text = trafilatura.extract(
        html.decode("utf-8", "replace"), url=url, output_format="markdown", include_tables=True, favor_recall=True
    )
    if not text or not text.strip():
        return rel, html
    meta = trafilatura.extract_metadata(html.decode("utf-8", "replace"))
    title = (meta.title if meta is not None and meta.title else "").strip()
    if title and not text.lstrip().startswith("# "):
        text = f"# {title}\n\n{text}"
    return str(Path(rel).with_suffix(".md")), text.encode()


def fetch(fetch: Fetch) -> Fetched:
    """Sync a site (its sitemap, or a crawl from its start page) into the mirror."""
    start = fetch.location
    base = site(start)
    out = Fetched()
    pages = fetch.number("max_pages", min(fetch.max_items, 1000))
    limit = fetch.number("max_item_bytes", PAGE_BYTES)
    with reach.client(fetch.reach, fetch.timeout) as client:
        auth = {"Authorization": "Basic " + base64.b64encode(fetch.secret.encode()).decode()} if fetch.secret else {}
        crawl = _Crawl(fetch, client, out, base, limit, pages, auth=auth)
        rules = robots(client, base, auth)
        if urlsplit(start).path.lower().endswith(".xml"):
            _from_sitemap(crawl, rules)
        else:
            _from_links(crawl, rules, fetch.number("max_depth", 3))
    refused = crawl.refused.get(start) or crawl.refused.get(canonical(start))
    if refused is not None:  # the start page or the sitemap: nothing of the site was read
        raise UnavailableError(f"web source {fetch.name}: {refused}; check the source's URL (`ragvps source list`)")
    for url, old in fetch.known.items():
        if url not in out.items:
            remove(fetch.mirror, old.rel)
            remove(fetch.mirror, f"{RAW}/{hashed_rel(url, '.html')}")
            out.deleted += 1
    return out


def _allowed(crawl: _Crawl, rules: RobotFileParser, url: str) -> bool:
    if rules.can_fetch(AGENT, url):
        return True
    crawl.out.skipped["disallowed by robots.txt"] += 1
    return False


def _from_links(crawl: _Crawl, rules: RobotFileParser, depth: int) -> None:
    start = canonical(crawl.fetch.location)
    queue = deque([(start, 0)])
    seen = {start}
    done = 0
    while queue:
        url, level = queue.popleft()
        if not _allowed(crawl, rules, url):
            continue
        if done >= crawl.pages:
            crawl.out.skip(
                "over max_pages",
                f"{crawl.fetch.name}: more than {crawl.pages:,} pages; {url} and the rest not read (raise max_pages)",
                crawl.fetch.warn,
            )
            _keep_unreached(crawl, [url] + [u for u, _ in queue])
            return
        got = crawl.page(url)
        done += 1
        crawl.fetch.progress("fetch", done, done + len(queue))
        if got is None:
            continue
        links, declared = links_of(got.url, crawl.html(url, got), crawl.base)
        if declared is not None:  # the page says it is another's copy: that one is the item, read (or queued) once
            crawl.drop(url, declared)
            if declared not in seen:
                seen.add(declared)
                queue.appendleft((declared, level))
        if level >= depth:
            continue
        for link in links:
            if link not in seen:
                seen.add(link)
                queue.append((link, level + 1))


def _keep_unreached(crawl: _Crawl, urls: list[str]) -> None:
    """Pages beyond a limit are not read this time, and not deleted either."""
    for url in urls:
        if url in crawl.fetch.known and url not in crawl.out.items:
            crawl.out.items[url] = crawl.fetch.known[url]


def _from_sitemap(crawl: _Crawl, rules: RobotFileParser) -> None:
    sitemaps: list[str] = [crawl.fetch.location]
    urls: list[str] = []
    while sitemaps and len(urls) <= crawl.pages:
        sitemap = sitemaps.pop(0)
        try:
            for url, nested in sitemap_urls(
                crawl.client, sitemap, crawl.pages + 1 - len(urls), crawl.base, crawl.auth, crawl.fetch.tick
            ):
                if site(url) != crawl.base:
                    crawl.out.skipped["off-site URL in sitemap"] += 1
                elif nested and len(sitemaps) < 50:
                    sitemaps.append(url)
                elif not nested:
                    urls.append(canonical(url))
        except Refused as exc:
            crawl.refused[sitemap] = exc
            crawl.out.skip(exc.reason, f"{crawl.fetch.name}: sitemap {exc}", crawl.fetch.warn, sitemap)
            _keep_unreached(crawl, list(crawl.fetch.known))
    if len(urls) > crawl.pages:
        crawl.out.skip(
            "over max_pages",
            f"{crawl.fetch.name}: the sitemap lists more than {crawl.pages:,} URLs; "
            f"the first {crawl.pages:,} read (raise max_pages)",
            crawl.fetch.warn,
        )
        urls = urls[: crawl.pages]
        _keep_unreached(crawl, [u for u in crawl.fetch.known if u not in set(urls)])
    for n, url in enumerate(dict.fromkeys(urls), start=1):
        if _allowed(crawl, rules, url):
            crawl.page(url)
        crawl.fetch.progress("fetch", n, len(urls))
