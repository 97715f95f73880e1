"""Small Office files made in the test with the libraries (and hostile ones made by hand)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path


def docx_file(path: Path) -> Path:
    import docx
    from docx.oxml.ns import qn
    from docx.oxml.parser import OxmlElement

    d = docx.Document()
    d.core_properties.title = "Harbour manual"
    d.sections[0].header.paragraphs[0].text = "CONFIDENTIAL page header"
    d.sections[0].footer.paragraphs[0].text = "page footer 7"
    d.add_heading("Cranes", level=1)
    d.add_paragraph("The harbour has three cranes.")
    d.add_heading("Loading rules", level=2)
    d.add_paragraph("Inspect the hook first.", style="List Bullet")
    d.add_paragraph("Then lift slowly.", style="List Bullet 2")
    p = d.add_paragraph("See the ")
    link = OxmlElement("w:hyperlink")
    link.set(
        qn("r:id"),
        d.part.relate_to(
            "https://example.org/manual", docx.opc.constants.RELATIONSHIP_TYPE.HYPERLINK, is_external=True
        ),
    )
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = "crane manual online"
    run.append(text)
    link.append(run)
    p._p.append(link)
    d.add_heading("Crane table", level=2)
    t = d.add_table(rows=4, cols=3)
    for r, row in enumerate(
        [["Crane", "Capacity", "Operator"], ["North", "40 t", "Ana"], ["South", "25 t", "Ben"], ["Spare", "", ""]]
    ):
        for c, value in enumerate(row):
            t.cell(r, c).text = value
    merged = t.cell(3, 1).merge(t.cell(3, 2))
    merged.text = "out of service"
    d.add_paragraph("# not a heading, only text")
    d.save(path)
    return path


def pptx_file(path: Path) -> Path:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    s = deck.slides.add_slide(deck.slide_layouts[1])
    s.shapes.title.text = "Quarterly results"
    body = s.placeholders[1].text_frame
    body.text = "Revenue grew"
    sub = body.add_paragraph()
    sub.text = "mostly in the north"
    sub.level = 1
    s.notes_slide.notes_text_frame.text = "Say the growth figure slowly."
    t = deck.slides.add_slide(deck.slide_layouts[5])
    t.shapes.title.text = "Regions"
    table = t.shapes.add_table(3, 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["Region", "Sales"], ["North", "120"], ["South", "80"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    deck.slides.add_slide(deck.slide_layouts[6])  # a blank slide: no section
    deck.save(path)
    return path


def xlsx_file(path: Path, rows: int = 5) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Fleet"
    sheet.append([None, "Fleet register"])
    sheet.append([])
    sheet.append([None, "Ship", "Port", "Crew", None])
    for n in range(rows):
        sheet.append([None, f"Ship {n}", f"Port {n % 7}", 10 + n, None])
    empty = book.create_sheet("Empty")
    empty["A1"] = None
    book.save(path)
    return path


def zip_of(path: Path, members: dict[str, bytes], compression: int = zipfile.ZIP_DEFLATED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def zip_bomb(path: Path, inner: str, size: int) -> Path:
    """A valid zip whose one member inflates to `size` bytes of spaces (written in pieces: no big buffer)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", b"<?xml version='1.0'?><Types/>")
        with z.open(inner, "w", force_zip64=True) as f:
            block = b" " * (1 << 20)
            for _ in range(size >> 20):
                f.write(block)
    return path


def with_entity(path: Path, secret: Path) -> Path:
    """A .docx whose document.xml declares an external entity pointing at `secret`."""
    import docx

    d = docx.Document()
    d.add_paragraph("before &xxe; after")
    buf = io.BytesIO()
    d.save(buf)
    src = zipfile.ZipFile(buf)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "word/document.xml":
                body = data.decode("utf-8").split("?>", 1)[1]
                data = (
                    (
                        f'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE w:document [<!ENTITY xxe SYSTEM '
                        f'"file://{secret}">]>{body}'
                    )
                    .encode()
                    .replace(b"before &amp;xxe; after", b"before &xxe; after")
                )
            out.writestr(info, data)
    return path


def encrypted_docx(path: Path) -> Path:
    import docx
    from msoffcrypto.format.ooxml import OOXMLFile

    d = docx.Document()
    d.add_paragraph("a secret paragraph")
    buf = io.BytesIO()
    d.save(buf)
    buf.seek(0)
    with path.open("wb") as out:
        OOXMLFile(buf).encrypt("password", out)
    return path
