"""What a hostile server can make a sync hold (issue 50, items 4 and 7): a page sent `Content-Encoding: gzip, gzip`
stops at max_item_bytes decoded, however well it packs; an S3 listing is read as a stream with a bound per page, its
pages are bounded and a cancel stops them; a listing's bad entries (`<Size>lots</Size>`, `coll.md` beside
`coll.md/inner.md`, a 300-character key) fail alone, by name. The connectors run here, against servers on
loopback (tests/support/sites.py), with the memory they allocate measured by tracemalloc."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest
from support.sites import encoded, gzip_bomb, s3_bucket, served

from ragvps.errors import UnavailableError
from ragvps.ingest.cancel import Cancelled
from ragvps.ingest.remote import Fetch, s3, web
from ragvps.reach import Reach

LOOPBACK = Reach.of(["127.0.0.1"])
MiB = 1 << 20


def _fetch(location: str, mirror: Path, progress=None, **config: object) -> tuple[Fetch, list[str]]:
    said: list[str] = []
    return Fetch(
        "hostile",
        location,
        config,
        mirror,
        {},
        None,
        progress or (lambda *_: None),
        said.append,
        max_items=int(str(config.get("max_items", 10_000))),
        max_item_bytes=int(str(config.get("max_item_bytes", 10 * MiB))),
        reach=LOOPBACK,
    ), said


def _peak(run) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_twice_gzipped_page_stops_at_its_bound_as_it_streams(tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text('<html><body><p>Fine.</p><a href="/bomb">b</a></body></html>')
    bomb = gzip_bomb(300 * MiB, layers=2)
    assert len(bomb) < 64 << 10
    with served(tmp_path / "site", {"/bomb": encoded(bomb, "gzip, gzip")}) as base:
        request, said = _fetch(f"{base}/index.html", tmp_path / "mirror")
        found = {}
        peak = _peak(lambda: found.setdefault("out", web.fetch(request)))
    out = found["out"]
    assert out.skipped["too large"] == 1 and f"{base}/bomb" in "\n".join(said), said
    assert "decoded" in "\n".join(said)
    assert peak < 64 * MiB, f"{peak / MiB:.0f} MiB held"


def test_an_s3_listing_is_streamed_with_a_bound(tmp_path):
    listing = gzip.compress(b"<ListBucketResult>" + b"<Contents><Key>a.md</Key></Contents>" * (2 * MiB))
    with served(tmp_path, s3_bucket(raw_listing=listing)) as base:
        request, _ = _fetch("handbook", tmp_path / "mirror", endpoint=base)
        failed = {}

        def run() -> None:
            with pytest.raises(UnavailableError) as caught:
                s3.fetch(request)
            failed["why"] = str(caught.value)

        peak = _peak(run)
    assert "listing page limit" in failed["why"], failed
    assert peak < 96 * MiB, f"{peak / MiB:.0f} MiB held"


def test_endless_pagination_is_bounded_and_cancellable(tmp_path):
    calls: list[int] = []
    with served(tmp_path, s3_bucket(keys={"a.md": b"# A\n\nOne.\n"}, endless=calls)) as base:
        request, said = _fetch("handbook", tmp_path / "mirror", endpoint=base, max_items=10)
        out = s3.fetch(request)
        assert "a.md" in out.items and any("past 100 pages" in s for s in said), said
        assert len(calls) == 100

        def cancel(stage: str, done: int, total: int) -> None:
            if stage == "list" and done == 5:
                raise Cancelled

        request, _ = _fetch("handbook", tmp_path / "mirror2", cancel, endpoint=base)
        with pytest.raises(Cancelled):
            s3.fetch(request)


def test_bad_listing_entries_fail_alone_by_name(tmp_path):
    long_key = "docs/" + "k" * 300 + ".md"
    keys = {
        "docs/good.md": b"# Good\n\nThe night ferry leaves at eleven.\n",
        "docs/coll.md": b"# Coll\n\nA file.\n",
        "docs/coll.md/inner.md": b"# Inner\n\nUnder a file's name.\n",
        long_key: b"# Long\n\nA long name.\n",
        "docs/lots.md": b"# Lots\n\nIts size is a word.\n",
    }
    with served(tmp_path, s3_bucket(keys=keys, sizes={"docs/lots.md": "lots"})) as base:
        request, said = _fetch("handbook", tmp_path / "mirror", endpoint=base)
        out = s3.fetch(request)
    assert {"docs/good.md", "docs/coll.md"} <= set(out.items), out.items
    failed = dict(out.failures)
    assert "docs/lots.md" in failed and "size is not a number" in failed["docs/lots.md"]
    assert "docs/coll.md/inner.md" in failed and long_key in failed, failed
    assert str(tmp_path) not in "\n".join(said)
