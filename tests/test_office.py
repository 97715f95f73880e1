"""Office formats keep their structure: heading paths, slides, tables whose rows keep their header."""

from __future__ import annotations

import codecs
import zipfile
from pathlib import Path

import pytest
from support.office_files import docx_file, pptx_file, xlsx_file, zip_of

from ragvps.ingest.chunk import ChunkerConfig, chunk_document
from ragvps.ingest.sources import KINDS, SkipFile, SourceFile, load
from ragvps.records import Document

CONFIG = ChunkerConfig("structure", 200, 30, 256)
SMALL = ChunkerConfig("structure", 60, 10, 256)


def _load(path: Path, warnings: list[str] | None = None) -> list[Document]:
    warn = (warnings if warnings is not None else []).append
    return load(SourceFile(path, path.name, KINDS[path.suffix.lower()]), warn)


def _header_kept(doc: Document, config: ChunkerConfig) -> list:
    """The chunks, checked: a chunk repeating a header is that header, a newline, then its own span."""
    chunks = chunk_document(doc, config)
    for c in chunks:
        spans = [c.metadata[k] for k in ("table_header", "table_section") if k in c.metadata]
        assert c.text == "".join(doc.text[a:b] + "\n" for a, b in spans) + doc.text[c.start : c.end]
    return chunks


def test_docx_headings_tables_lists_links(tmp_path):
    [doc] = _load(docx_file(tmp_path / "manual.docx"))
    assert doc.kind == "docx" and doc.title == "Harbour manual"
    text = doc.text
    assert "# Cranes" in text and "## Loading rules" in text
    assert "- Inspect the hook first." in text and "  - Then lift slowly." in text
    assert "See the crane manual online" in text  # hyperlink text kept
    assert "| Crane | Capacity | Operator |" in text and "| North | 40 t | Ana |" in text
    assert "| Spare | out of service | out of service |" in text  # a merged cell in each cell it spans
    assert "CONFIDENTIAL" not in text and "page footer" not in text  # page furniture left out
    assert "\\# not a heading" in text
    paths = {c.heading_path for c in chunk_document(doc, SMALL)}
    assert "Harbour manual > Cranes > Loading rules" in paths and "Harbour manual > Cranes > Crane table" in paths
    assert not any("not a heading" in p for p in paths)


def test_pptx_one_section_per_slide_with_notes_and_tables(tmp_path):
    [doc] = _load(pptx_file(tmp_path / "deck.pptx"))
    assert doc.kind == "pptx" and doc.title == "deck"
    assert "## Slide 1: Quarterly results" in doc.text and "## Slide 2: Regions" in doc.text
    assert "Slide 3" not in doc.text  # a blank slide adds nothing
    assert "Revenue grew\n  - mostly in the north" in doc.text
    assert "Notes: Say the growth figure slowly." in doc.text
    assert "| Region | Sales |\n| --- | --- |\n| North | 120 |" in doc.text
    assert doc.text.count("Quarterly results") == 1  # the title is the heading, not repeated as body text
    paths = [c.heading_path for c in chunk_document(doc, SMALL)]
    assert "deck > Slide 1: Quarterly results" in paths and "deck > Slide 2: Regions" in paths


def test_xlsx_every_chunk_repeats_the_header(tmp_path):
    [doc] = _load(xlsx_file(tmp_path / "ships.xlsx", rows=300))
    assert doc.text.startswith("## Fleet\n\nFleet register\n\n| Ship | Port | Crew |\n| --- | --- | --- |\n")
    assert "Empty" not in doc.text  # an empty sheet adds no section
    chunks = _header_kept(doc, SMALL)
    rows = [c for c in chunks if "| Ship " in c.text]
    assert len(rows) > 10
    for c in rows:
        assert c.text.startswith("| Ship | Port | Crew |\n| --- | --- | --- |\n") or "table_header" not in c.metadata
        assert c.heading_path == "ships > Fleet"
        assert c.tokens <= SMALL.max_tokens - 2
    found = {line for c in rows for line in c.text.splitlines()}
    assert all(f"| Ship {n} | Port {n % 7} | {10 + n} |" in found for n in range(300))  # no row lost


def test_a_section_row_inside_a_table_is_repeated_under_the_header():
    rows = ["| Region | Sales | Profit | Staff |", "| --- | --- | --- | --- |"]
    for year in (2023, 2022):
        rows.append(f"| Year {year} |  |  |  |")
        rows += [f"| region {n} | {n * 10 + year} | {n} | {n % 9} |" for n in range(40)]
    doc = Document("s.md", "s.md", "Sales", "\n".join(rows), "markdown")
    chunks = _header_kept(doc, SMALL)
    later = [c for c in chunks if "| region " in c.text and "table_header" in c.metadata]
    assert later and all(
        c.text.startswith("| Region | Sales | Profit | Staff |\n| --- | --- | --- | --- |\n| Year ") for c in later
    )
    for c in chunks:  # every row is under its own year's section row
        year = 2023 if c.start < doc.text.index("| Year 2022") else 2022
        assert f"| Year {year} |" in c.text, c.text[:200]


def test_a_long_markdown_table_repeats_its_header_too(tmp_path):
    lines = ["# Prices", "", "Intro.", "", "| Item | Price |", "|:--|--:|"]
    lines += [f"| item {n} | {n}.00 |" for n in range(200)]
    doc = Document("p.md", "p.md", "Prices", "\n".join(lines) + "\n\nAfter the table.", "markdown")
    chunks = _header_kept(doc, SMALL)
    assert chunks[0].text.startswith("# Prices\n\nIntro.\n\n| Item | Price |")  # the lines above stay with it
    rows = [c for c in chunks if "| item " in c.text][1:]
    assert len(rows) > 5 and all(c.text.startswith("| Item | Price |\n|:--|--:|\n") for c in rows)
    assert chunks[-1].text.endswith("After the table.")


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("semi.csv", b"Name;City;Age\nAna;Porto;31\nBen;Oslo;42\n"),
        ("tabs.tsv", b"Name\tCity\tAge\nAna\tPorto\t31\nBen\tOslo\t42\n"),
        ("pipes.csv", b"Name|City|Age\nAna|Porto|31\nBen|Oslo|42\n"),
        ("sixteen.csv", codecs.BOM_UTF16_LE + "Name,City,Age\nAna,Porto,31\nBen,Oslo,42\n".encode("utf-16-le")),
        ("latin.csv", "Name,City,Age\nAna,Porto,31\nBen,Oslo,42\nZoë,Málaga,7\n".encode("cp1252")),
        ("quoted.csv", b'Name,City,Age\n"Ana, Jr.","Porto\nNorth",31\nBen,Oslo,42\n'),
    ],
)
def test_csv_any_delimiter_and_encoding(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    [doc] = _load(path)
    assert doc.text.startswith("| Name | City | Age |\n| --- | --- | --- |\n")
    assert "| Ben | Oslo | 42 |" in doc.text
    if name == "latin.csv":
        assert "| Zoë | Málaga | 7 |" in doc.text
    if name == "quoted.csv":
        assert "| Ana, Jr. | Porto North | 31 |" in doc.text


def test_epub_chapters_are_sections(tmp_path):
    page = (
        "<?xml version='1.0'?><!DOCTYPE html PUBLIC '-//W3C//DTD XHTML 1.1//EN' "
        "'http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd'><html><body>{}</body></html>"
    )
    path = zip_of(
        tmp_path / "book.epub",
        {
            "mimetype": b"application/epub+zip",
            "META-INF/container.xml": b"<?xml version='1.0'?><container xmlns='urn:oasis:names:tc:opendocument:xmlns:"
            b"container'><rootfiles><rootfile full-path='OPS/book.opf'/></rootfiles></container>",
            "OPS/book.opf": b"<?xml version='1.0'?><package xmlns='http://www.idpf.org/2007/opf' "
            b"xmlns:dc='http://purl.org/dc/elements/1.1/'><metadata><dc:title>Sea Stories</dc:title>"
            b"</metadata><manifest><item id='a' href='one.xhtml' media-type='application/xhtml+xml'/>"
            b"<item id='b' href='two.xhtml' media-type='application/xhtml+xml'/></manifest>"
            b"<spine><itemref idref='b'/><itemref idref='a'/></spine></package>",
            "OPS/one.xhtml": page.format("<h1>The Storm</h1><p>Waves broke the mast.</p>").encode(),
            "OPS/two.xhtml": page.format("<p>Calm water at dawn.</p>").encode(),
        },
    )
    [doc] = _load(path)
    assert doc.title == "Sea Stories" and doc.text.index("Calm water") < doc.text.index("Waves broke")
    paths = {c.heading_path: c.text for c in chunk_document(doc, SMALL)}
    assert any(p == "Sea Stories > The Storm" and "Waves broke the mast." in t for p, t in paths.items())
    assert any(p == "Sea Stories > Chapter 1" for p in paths)  # a chapter without its own heading


def test_odt_and_rtf(tmp_path):
    ns = (
        'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
        'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0"'
    )
    content = (
        f'<?xml version="1.0"?><office:document-content {ns}><office:body><office:text>'
        '<text:h text:outline-level="1">Tides</text:h><text:p>High<text:s text:c="2"/>water.</text:p>'
        "<text:list><text:list-item><text:p>spring tide</text:p></text:list-item></text:list>"
        "<table:table><table:table-row><table:table-cell><text:p>Port</text:p></table:table-cell>"
        "<table:table-cell><text:p>Range</text:p></table:table-cell></table:table-row><table:table-row>"
        '<table:table-cell table:number-columns-repeated="2"><text:p>x</text:p></table:table-cell>'
        "</table:table-row></table:table></office:text></office:body></office:document-content>"
    )
    [odt] = _load(
        zip_of(
            tmp_path / "tides.odt",
            {"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": content.encode()},
        )
    )
    assert odt.text == "# Tides\n\nHigh  water.\n\n- spring tide\n\n| Port | Range |\n| --- | --- |\n| x | x |"
    rtf = tmp_path / "note.rtf"
    rtf.write_text(
        r"{\rtf1\ansi{\b Ship log}\par The crew rested.\par"
        r"{\trowd\cellx1000\cellx2000\intbl Day\cell Miles\cell\row\intbl Mon\cell 40\cell\row}}"
    )
    [doc] = _load(rtf)
    assert "Ship log" in doc.text and "The crew rested." in doc.text
    assert "| Day | Miles |\n| --- | --- |\n| Mon | 40 |" in doc.text


def test_empty_documents_are_skipped_with_a_reason(tmp_path):
    import docx
    import openpyxl

    docx.Document().save(tmp_path / "empty.docx")
    openpyxl.Workbook().save(tmp_path / "empty.xlsx")
    (tmp_path / "empty.csv").write_text("\n\n ,, \n")
    for name, why in [
        ("empty.docx", "an empty Word document"),
        ("empty.xlsx", "every sheet is empty"),
        ("empty.csv", "an empty table"),
    ]:
        with pytest.raises(SkipFile, match=f"{name}: {why}") as exc:
            _load(tmp_path / name)
        assert exc.value.reason == "no text"


def test_a_missing_extra_names_the_install(tmp_path, monkeypatch):
    import sys

    path = docx_file(tmp_path / "manual.docx")
    monkeypatch.setitem(sys.modules, "docx", None)  # as if python-docx were not installed
    monkeypatch.delitem(sys.modules, "ragvps.ingest.formats.docx", raising=False)
    with pytest.raises(
        SkipFile,
        match=r"manual.docx: reading .docx files needs docx: install "
        r"`pip install 'ragvps\[office\]'`",
    ) as exc:
        _load(path)
    assert exc.value.reason == "needs ragvps[office]"


def test_zip_members_are_listed_not_inflated_for_the_check(tmp_path):
    path = zip_of(tmp_path / "stored.docx", {"[Content_Types].xml": b"<Types/>"}, zipfile.ZIP_STORED)
    with pytest.raises(SkipFile, match="stored.docx: not a readable Word document"):
        _load(path)  # a zip without a Word part: the library's failure, named and skipped
