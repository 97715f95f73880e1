"""A PDF chunk keeps its page numbers, and citations show them: `report.pdf p. 2`."""

from __future__ import annotations

import json
from pathlib import Path

from ragvps.generate.citations import parse
from ragvps.generate.prompt import Source
from ragvps.records import cite_label


def text_pdf(path: Path, pages: list[str]) -> Path:
    """A PDF with one line of Helvetica text per page, written by hand (no PDF writer needed)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", "", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 700 Td ({text}) Tj ET".encode()
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {len(objects)} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))
    return path


def test_cite_label():
    assert cite_label("report.pdf", (12,)) == "report.pdf p. 12"
    assert cite_label("report.pdf", [12, 13]) == "report.pdf pp. 12-13"
    assert cite_label("notes.md") == "notes.md"
    source = Source(1, "report.pdf#3", "report.pdf", "", 0, 10, 1.0, "the text", pages=(7,))
    assert source.block().startswith("[1] report.pdf p. 7\n")
    assert parse("It is so [1].", [source]).citations[0].pages == (7,)


def test_search_and_ask_show_the_page(cli, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    text_pdf(
        folder / "report.pdf",
        ["The harbour opened in spring.", "The lighthouse keeper counts forty ships.", "Winter closes the harbour."],
    )
    cli.env["RAGVPS_CHUNK_SIZE"] = "8"  # one page a chunk
    cli("ingest", str(folder))
    hits = json.loads(cli("query", "lighthouse keeper ships", "--json").stdout)
    assert hits[0]["path"] == "report.pdf" and hits[0]["pages"] == [2]
    shown = cli("query", "lighthouse keeper ships").stdout
    assert "report.pdf p. 2" in shown.splitlines()[0]
    answer = cli("ask", "how many ships does the lighthouse keeper count?")
    assert "report.pdf p. 2" in answer.stdout, answer.stdout
