"""A PDF read as a reader sees it (issue 53): two columns one after the other (even when the file writes their
lines alternately), running heads and feet dropped and counted, words hyphenated at a line end joined, ligatures
unfolded, a paragraph's lines as one paragraph, headings by font size as Markdown headings (the chunker's heading
path), aligned rows as a table whose header every later chunk repeats; and with ocr_figures, a figure's text."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from support.pdf_files import HEIGHT, Book, Run, content, stream_object, write_objects, write_pdf
from support.scanned import page_image

from ragvps.ingest import sources
from ragvps.ingest.chunk import ChunkerConfig, chunk_document
from ragvps.ingest.ocr import OcrOptions

WORDS = [
    "harbour",
    "crane",
    "lifts",
    "crates",
    "onto",
    "the",
    "quay",
    "while",
    "the",
    "lighthouse",
    "keeper",
    "counts",
    "ships",
    "and",
    "writes",
    "their",
    "names",
    "into",
    "a",
    "ledger",
    "kept",
    "beside",
    "the",
    "extraordinarily",
    "complicated",
    "signalling",
    "apparatus",
    "of",
    "the",
    "northern",
    "breakwater",
]
CHAPTERS = ["Harbour Cranes", "Lighthouse Keepers", "Northern Breakwater"]


def paragraphs(seed: int, count: int = 9) -> list[str]:
    rng = random.Random(seed)
    out = []
    for n in range(count):
        words = [rng.choice(WORDS) for _ in range(55)]
        words[rng.randrange(5, 50)] = "\ufb01sh\ufb02oat"  # the fi and fl ligature glyphs
        out.append(f"Paragraph {seed}.{n} " + " ".join(words) + ".")
    return out


def load(path: Path, ocr: OcrOptions | None = None):
    return sources.load(sources.SourceFile(path, path.name, "pdf"), print, ocr=ocr)[0]


def test_two_interleaved_columns_are_read_column_by_column_as_paragraphs(tmp_path):
    chapters = [(title, paragraphs(n)) for n, title in enumerate(CHAPTERS)]
    book = Book("The Harbour Book", interleave=True)
    pages = book.pages(chapters)
    assert len(pages) == 3 and any(r.text.endswith("-") for page in pages for r in page)  # hyphenated line ends
    doc = load(book.write(tmp_path / "book.pdf", chapters))
    text = doc.text
    for title, paras in chapters:
        assert f"# {title}" in text.splitlines()
        for para in paras:  # whole: lines joined, hyphens gone, ligatures unfolded, in reading order
            assert para.replace("\ufb01", "fi").replace("\ufb02", "fl") in text.splitlines(), para[:40]
    assert "The Harbour Book" not in text and "Confidential" not in text
    assert doc.metadata["running_lines"] == 9  # a head and two foot lines on each of 3 pages
    assert [p[1] for p in doc.metadata["pages"]] == [1, 2, 3]  # type: ignore[union-attr]
    chunks = chunk_document(doc, ChunkerConfig("structure", 120, 0, 256))
    for chunk in chunks:
        assert len(chunk.metadata["pages"]) == 1  # a page's end ends a chunk: each cites its one page
        number = chunk.metadata["pages"][0]
        assert chunk.heading_path == f"book > {CHAPTERS[number - 1]}"


def test_aligned_rows_are_a_table_whose_header_each_chunk_repeats(tmp_path):
    runs = [Run(72, 720, "Harbour Traffic", 16, True), Run(72, 690, "Ships counted at each port in one spring.")]
    header = ["Port", "Ships", "Cranes", "Berths"]
    rows = [[f"Port{n:02d}", str(10 + n), str(n % 7), str(3 + n % 4)] for n in range(40)]
    for r, row in enumerate([header, *rows]):
        runs += [Run(72 + 120 * c, 660 - 14 * r, cell, 10, r == 0) for c, cell in enumerate(row)]
    doc = load(write_pdf(tmp_path / "traffic.pdf", [content(runs)]))
    lines = doc.text.splitlines()
    assert "| Port | Ships | Cranes | Berths |" in lines and "| Port07 | 17 | 0 | 6 |" in lines
    assert "# Harbour Traffic" in lines
    chunks = chunk_document(doc, ChunkerConfig("structure", 120, 0, 256))
    later = [c for c in chunks if "| Port3" in c.text]
    assert later and all(c.text.startswith("| Port | Ships | Cranes | Berths |") for c in later)


def test_running_heads_need_pages_to_repeat_on(tmp_path):
    """One page's top line is text, not a running head: nothing is dropped from a short PDF."""
    runs = [Run(72, HEIGHT - 50, "Quarterly report of the harbour board"), Run(72, 600, "The harbour opened.")]
    doc = load(write_pdf(tmp_path / "one.pdf", [content(runs)]))
    assert "Quarterly report of the harbour board" in doc.text and "running_lines" not in doc.metadata


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="needs Debian's tesseract-ocr")
def test_a_figure_on_a_text_page_is_read_only_with_ocr_figures(tmp_path):
    from pypdf import PdfReader, PdfWriter

    figure = tmp_path / "figure.pdf"
    page_image("The whaling boats of Quillon return at dusk with their catch.").save(figure, "PDF", resolution=200.0)  # type: ignore[attr-defined]
    text = write_pdf(tmp_path / "text.pdf", [content([Run(72, 60, "Figure 1 shows the whaling fleet of Quillon.")])])
    writer = PdfWriter(clone_from=figure)
    writer.pages[0].merge_page(PdfReader(text).pages[0])
    writer.write(tmp_path / "mixed.pdf")
    plain = OcrOptions()
    doc = load(tmp_path / "mixed.pdf", plain)
    assert "whaling fleet" in doc.text and "dusk" not in doc.text and plain.stats.pages == 0
    figures = OcrOptions(figures=True)
    doc = load(tmp_path / "mixed.pdf", figures)
    assert "whaling fleet" in doc.text and "dusk" in doc.text.lower() and figures.stats.pages == 1
    assert [p[1] for p in doc.metadata["pages"]] == [1]  # type: ignore[union-attr]


def test_the_pdf_settings_reach_the_reader(cli, tmp_path):
    """pdf_max_pages refuses a longer PDF by name in `ragvps chunk`, as in ingest; the other files are chunked."""
    folder = tmp_path / "docs"
    folder.mkdir()
    chapters = [(title, paragraphs(n)) for n, title in enumerate(CHAPTERS)]
    Book("The Harbour Book").write(folder / "book.pdf", chapters)
    (folder / "note.md").write_text("# Note\n\nThe harbour crane lifts crates.\n")
    cli.env["RAGVPS_PDF_MAX_PAGES"] = "2"
    result = cli("chunk", str(folder), "--json")
    assert json.loads(result.stdout)["skipped"] == {"too many pages": 1}
    assert "book.pdf: 3 pages, more than pdf_max_pages=2; skipped" in " ".join(result.stderr.split())
    cli.env["RAGVPS_PDF_MAX_PAGES"] = "3"
    assert json.loads(cli("chunk", str(folder), "--json").stdout)["skipped"] == {}


def test_a_running_head_naming_each_chapter_is_dropped_too(tmp_path):
    """`Chapter 1: Cranes` on two pages, `Chapter 2: Ships` on two more: no text repeats three times, but the head
    stands apart at the same height on every page; the chapters' own headings (larger) stay."""
    pages = []
    for n, (chapter, head) in enumerate([("Cranes", 1), ("Cranes", 1), ("Ships", 2), ("Ships", 2)]):
        runs = [Run(72, HEIGHT - 40, f"Chapter {head}: {chapter}", 9), Run(72, 40, str(n + 1), 9)]
        runs += [Run(72, HEIGHT - 100, f"About {chapter.lower()} {n}", 16, True)]
        runs += [Run(72, HEIGHT - 130 - 12 * k, f"line {k} of the text about {chapter.lower()}") for k in range(8)]
        pages.append(content(runs))
    doc = load(write_pdf(tmp_path / "chapters.pdf", pages))
    assert "Chapter 1" not in doc.text and "Chapter 2" not in doc.text
    assert doc.metadata["running_lines"] == 8
    assert [line for line in doc.text.splitlines() if line.startswith("#")] == [
        "# About cranes 0",
        "# About cranes 1",
        "# About ships 2",
        "# About ships 3",
    ]


def test_a_character_outside_the_bmp_is_read_with_its_page(tmp_path):
    """PDFium counts a mathematical italic epsilon (U+1D700) as two characters, its UTF-16 surrogates: the page is
    read with the epsilon in place (a LaTeX manual with one was skipped whole as `not a readable PDF`)."""
    cmap = (
        b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CMapName /Eps def 1 begincodespacerange <00> "
        b"<FF> endcodespacerange 2 beginbfrange <20> <7D> <0020> <7E> <7E> <D835DF00> endbfrange endcmap CMapName "
        b"currentdict /CMap defineresource pop end end"
    )
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 5 0 R >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 6 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> >>",
        stream_object(cmap),
        stream_object(content([Run(72, 700, "Let ~ be small, and the harbour ~-close."), Run(72, 680, "Ships ~.")])),
    ]
    doc = load(write_objects(tmp_path / "epsilon.pdf", objects))
    assert "Let \U0001d700 be small, and the harbour \U0001d700-close." in doc.text
    assert [p[1] for p in doc.metadata["pages"]] == [1]  # type: ignore[union-attr]


def test_the_reader_starts_with_the_command_only_for_a_path_with_a_pdf(tmp_path):
    """`ragvps chunk` and `ingest` start the PDF reader's process as the use case loads (app/reading.py), for a
    folder with a PDF only; the first PDF is then read by that process, not a new one."""
    from ragvps.app.reading import start_readers
    from ragvps.ingest import pdfproc

    for child in pdfproc._CHILDREN:
        child.kill()
    pdfproc._CHILDREN.clear()
    (tmp_path / "notes.md").write_text("# Notes\n")
    start_readers(str(tmp_path))
    assert pdfproc._CHILDREN == []
    runs = [Run(72, 700, "The harbour opened in spring.")]
    (tmp_path / "sub").mkdir()
    write_pdf(tmp_path / "sub" / "one.pdf", [content(runs)])
    start_readers(str(tmp_path))
    started = list(pdfproc._CHILDREN)  # two forked where this process has one thread, else one spawned
    assert started
    assert "The harbour opened in spring." in load(tmp_path / "sub" / "one.pdf").text
    assert started == pdfproc._CHILDREN and all(child.alive() for child in started)
