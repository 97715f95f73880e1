"""A web site as a connected source (issue 46), served in the test: same-site links from a start page or a
sitemap, robots.txt honoured, unchanged pages not read again (ETag, 304), deletions followed, each citation
the page's own URL; and the hostile cases bounded and reported: a sitemap of a million URLs, a redirect off-site,
a page of 100 MB."""

from __future__ import annotations

import json

import pytest
from support.sites import served

pytest.importorskip("trafilatura")

NAV = '<nav><a href="/index.html">Home</a> | <a href="/about.html">About</a></nav>'


def page(title: str, body: str, links: str = "") -> str:
    return (
        f"<html><head><title>{title}</title></head><body>{NAV}<article><h1>{title}</h1><p>{body}</p>"
        f"{links}</article><footer>Harbour guide, 2026</footer></body></html>"
    )


def _site(folder):
    folder.mkdir()
    links = (
        '<a href="ferries.html">Ferries</a> <a href="/lighthouse.html#top">Lighthouse</a> '
        '<a href="private/vault.html">Vault</a> <a href="/moved">Moved</a> <a href="/huge">Huge</a> '
        '<a href="http://elsewhere.invalid/x.html">Elsewhere</a>'
    )
    (folder / "index.html").write_text(page("Harbour guide", "Everything about the harbour.", links))
    (folder / "ferries.html").write_text(
        page("Ferries", "The night ferry to Brindle Island leaves at eleven from pier four.")
    )
    (folder / "lighthouse.html").write_text(page("Lighthouse", "The lighthouse keeper logs forty ships each week."))
    (folder / "private").mkdir()
    (folder / "private" / "vault.html").write_text(page("Vault", "The vault code is 8841."))
    (folder / "robots.txt").write_text("User-agent: *\nDisallow: /private/\n")


def _moved(handler) -> bool:
    handler.send_response(302)
    handler.send_header("Location", "http://elsewhere.invalid/landing.html")
    handler.end_headers()
    return True


def _huge(handler) -> bool:
    """100 MB of HTML without a Content-Length: only a reader that counts what it reads stops it."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/html")
    handler.end_headers()
    block = b"<p>" + b"x" * (1 << 20) + b"</p>"
    try:
        for _ in range(100):
            handler.wfile.write(block)
    except OSError:
        pass
    handler.close_connection = True
    return True


def _million(handler) -> bool:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/xml")
    handler.end_headers()
    try:
        handler.wfile.write(b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">')
        for n in range(1_000_000):
            handler.wfile.write(f"<url><loc>http://{handler.headers['Host']}/ferries.html?n={n}</loc></url>".encode())
    except OSError:
        pass
    handler.close_connection = True
    return True


@pytest.fixture(autouse=True)
def _loopback(cli):
    cli.env["RAGVPS_SOURCE_ALLOW_HOSTS"] = "127.0.0.1"  # the server's configuration lets sources reach loopback


def _sync(cli, expect: int = 0) -> dict:
    return json.loads(cli("sync", "--json", expect=expect).stdout)[0]


def test_a_site_crawled_incrementally_with_its_limits_reported(cli, tmp_path):
    _site(tmp_path / "site")
    with served(tmp_path / "site", {"/moved": _moved, "/huge": _huge}) as base:
        cli("source", "add", "web", "harbour", f"{base}/index.html")
        first = _sync(cli)
        assert first["read"] == 3 and first["items"] == 3, first
        assert first["skipped"]["disallowed by robots.txt"] == 1
        assert first["skipped"]["redirect off-site"] == 1 and first["skipped"]["too large"] == 1
        said = "\n".join(first["problems"])
        assert f"{base}/moved: redirects off-site to http://elsewhere.invalid/landing.html" in said
        assert f"{base}/huge: more than max_item_bytes" in said
        hits = json.loads(cli("query", "night ferry Brindle Island", "--json").stdout)
        assert hits[0]["path"] == f"{base}/ferries.html", hits[0]
        assert not json.loads(cli("query", "8841", "--json", "--mode", "keyword").stdout)

        again = _sync(cli)
        assert again["read"] == 0 and again["unchanged"] == 3 and not again["ingested"], json.dumps(again)

        (tmp_path / "site" / "lighthouse.html").write_text(page("Lighthouse", "The keeper now logs fifty ships."))
        (tmp_path / "site" / "ferries.html").unlink()
        changed = _sync(cli)
        assert (changed["read"], changed["unchanged"], changed["deleted"]) == (1, 1, 1), changed
        assert changed["skipped"]["gone"] == 2  # about.html never was; ferries.html is gone now
        assert f"{base}/ferries.html: HTTP 404" in "\n".join(changed["problems"])
        assert not json.loads(cli("query", "Brindle", "--json", "--mode", "keyword").stdout)
        hits = json.loads(cli("query", "keeper logs fifty ships", "--json").stdout)
        assert hits[0]["path"] == f"{base}/lighthouse.html"


def test_a_sitemap_of_a_million_urls_is_cut_at_max_pages(cli, tmp_path):
    _site(tmp_path / "site")
    with served(tmp_path / "site", {"/sitemap.xml": _million}) as base:
        cli("source", "add", "web", "big", f"{base}/sitemap.xml", "--max-pages", "5")
        report = _sync(cli)
        assert report["items"] == 5 and report["read"] == 5, report
        assert report["skipped"]["over max_pages"] == 1
        assert "the sitemap lists more than 5 URLs; the first 5 read" in report["problems"][0]


def test_canonical_urls_make_one_item_a_page(cli, tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "index.html").write_text(
        page("Harbour guide", "Everything about the harbour.", '<a href="/">Home</a> <a href="print.html">Print</a>')
    )
    (folder / "print.html").write_text(
        page("Ferries", "The night ferry to Brindle Island leaves at eleven.").replace(
            "<head>", '<head><link rel="canonical" href="/ferries.html">'
        )
    )
    (folder / "ferries.html").write_text(page("Ferries", "The night ferry to Brindle Island leaves at eleven."))
    with served(folder) as base:
        cli("source", "add", "web", "harbour", f"{base}/index.html")
        report = _sync(cli)
        assert report["items"] == 2 and report["skipped"]["a copy of its canonical page"] == 1, report
        urls = {d["path"] for d in json.loads(cli("query", "Brindle Island harbour", "--json", "--k", "10").stdout)}
        assert urls == {f"{base}/", f"{base}/ferries.html"}, urls


def test_a_site_that_cannot_be_read_fails_the_sync(cli, tmp_path):
    (tmp_path / "site").mkdir()
    with served(tmp_path / "site") as base:
        cli("source", "add", "web", "nomap", f"{base}/sitemap.xml")  # 404
    cli("source", "add", "web", "closed", f"{base}/index.html")  # the server is gone: refused
    reports = json.loads(cli("sync", "--json", expect=1).stdout)
    assert {r["name"]: r["state"] for r in reports} == {"nomap": "failed", "closed": "failed"}, reports
    said = cli("sync", expect=1).stderr
    assert "source nomap: source nomap" not in said and "web source nomap:" in said, said
