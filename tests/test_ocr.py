"""OCR (issue 46): a page without a text layer and an image file are read by Tesseract; the page number of a
scanned page is kept, so an answer cites `scan.pdf p. 2`; a missing Tesseract is named with how to install it."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from support.scanned import docs_paragraphs, page_image, scanned_pdf

from ragvps.ingest import sources
from tests.test_pdf_pages import text_pdf

pytestmark = pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Debian's tesseract-ocr")

DOCS = Path(__file__).resolve().parent.parent / "docs"
HARBOUR = (
    "The harbour master of Quillon counts eleven whaling boats each morning. The whaling boats leave "
    "the harbour before sunrise and return at dusk with their catch."
)


def _source(path: Path) -> sources.SourceFile:
    report = sources.scan(path)
    assert report.files, report
    return report.files[0]


def test_an_image_file_is_read(tmp_path):
    page_image(HARBOUR).save(tmp_path / "note.png")  # type: ignore[attr-defined]
    docs = sources.load(_source(tmp_path / "note.png"), print)
    assert docs[0].kind == "image" and "whaling boats" in docs[0].text.lower()


@pytest.mark.parametrize("suffix", [".jpg", ".tiff", ".webp"])
def test_other_image_formats(tmp_path, suffix):
    path = tmp_path / f"note{suffix}"
    page_image(HARBOUR).save(path)  # type: ignore[attr-defined]
    assert "harbour master" in sources.load(_source(path), print)[0].text.lower()


def test_only_pages_without_text_are_ocr_read(tmp_path):
    """A PDF of a text page and a scanned page: the text layer is taken as it is, the scan read by OCR, and
    each keeps its page number."""
    text = text_pdf(tmp_path / "text.pdf", ["The lighthouse keeper counts forty ships."])
    scan = scanned_pdf([HARBOUR], tmp_path / "scan.pdf")
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.append(str(text))
    writer.append(str(scan))
    writer.write(tmp_path / "both.pdf")
    seen: list[tuple[str, int, int]] = []
    from ragvps.ingest.ocr import OcrOptions

    options = OcrOptions(progress=lambda stage, done, total: seen.append((stage, done, total)))
    doc = sources.load(_source(tmp_path / "both.pdf"), print, ocr=options)[0]
    assert doc.metadata["ocr_pages"] == 1 and options.stats.pages == 1
    assert [p[1] for p in doc.metadata["pages"]] == [1, 2]  # type: ignore[union-attr]
    assert "forty ships" in doc.text and "whaling boats" in doc.text.lower()
    assert seen[-1] == ("ocr", 1, 1)  # the pages OCR read, of those given to it: one of the two has text


def test_missing_tesseract_names_the_file_and_the_install(tmp_path, monkeypatch):
    page_image(HARBOUR).save(tmp_path / "note.png")  # type: ignore[attr-defined]
    scanned_pdf([HARBOUR], tmp_path / "scan.pdf")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    for name in ("note.png", "scan.pdf"):
        with pytest.raises(sources.SkipFile) as err:
            sources.load(_source(tmp_path / name), print)
        assert err.value.reason == "needs tesseract"
        assert str(err.value).startswith(f"{name}: ") and "apt-get install tesseract-ocr" in str(err.value)


def test_a_language_without_data_is_named(tmp_path):
    from ragvps.ingest.ocr import OcrOptions

    page_image(HARBOUR).save(tmp_path / "note.png")  # type: ignore[attr-defined]
    skipped: Counter[str] = Counter()
    with pytest.raises(sources.SkipFile, match="ocr_languages='xyz'"):
        sources.load(_source(tmp_path / "note.png"), print, skipped, OcrOptions(languages="xyz"))
    # one of two missing: Tesseract reads the other and exits 0, with only a warning; refused the same (issue 51)
    with pytest.raises(sources.SkipFile, match="no data for zzz .ocr_languages='eng\\+zzz'.*tesseract-ocr-zzz"):
        sources.load(_source(tmp_path / "note.png"), print, skipped, OcrOptions(languages="eng+zzz"))


def test_a_scanned_docs_page_is_cited_by_its_page(cli, tmp_path):
    """Three pages of docs/ scanned into an image-only PDF: the answer cites the page its text is on."""
    folder = tmp_path / "docs"
    folder.mkdir()
    pages = [docs_paragraphs(DOCS / name, 3) for name in ("sizing.md", "bundle.md", "knowledge-bases.md")]
    scanned_pdf(pages, folder / "scan.pdf")
    cli.env["RAGVPS_CHUNK_SIZE"] = "100"
    out = cli("ingest", str(folder))
    assert "1 document," in out.stdout and "skipped" not in out.stdout, out.stdout + out.stderr
    hits = json.loads(cli("query", "a knowledge base in one file, a tar checked with SHA-256", "--json").stdout)
    assert hits[0]["path"] == "scan.pdf" and hits[0]["pages"] == [2], hits[0]
    answer = json.loads(cli("ask", "what is a bundle of a knowledge base?", "--json").stdout)
    assert answer["citations"] and answer["citations"][0]["pages"] == [2], answer


def test_an_image_too_large_is_skipped_by_name(tmp_path, monkeypatch):
    from ragvps.ingest import ocr

    page_image(HARBOUR).save(tmp_path / "poster.png")  # type: ignore[attr-defined]
    monkeypatch.setattr(ocr, "MAX_PIXELS", 1_000_000)
    with pytest.raises(sources.SkipFile, match=r"^poster.png: 1654x2339 pixels, more than OCR reads"):
        sources.load(_source(tmp_path / "poster.png"), print)


def test_the_ocr_bar_counts_the_runs_pages_not_the_last_files(tmp_path):
    from ragvps.ingest.ocr import OcrOptions

    seen: list[tuple[str, int, int]] = []
    options = OcrOptions(progress=lambda stage, done, total: seen.append((stage, done, total)))
    for name in ("one.png", "two.png", "three.png"):
        page_image(HARBOUR).save(tmp_path / name)  # type: ignore[attr-defined]
        sources.load(_source(tmp_path / name), print, Counter(), options)
    assert seen[-1] == ("ocr", 3, 3), seen  # af33e0a ended at ("ocr", 1, 1): the last file's one page
    assert all(done <= total for _, done, total in seen)
