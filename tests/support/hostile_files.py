"""A corpus of hostile files (issue 42), made on the spot and small: bombs by reuse (a part read many times),
symbolic links that leave the folder, hostile names, and tampered bundles. Each maker writes its case and
returns its path; `corpus` writes them all into one folder, with what each should end as."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import zipfile
from pathlib import Path

from support.pdf_files import Run, content, stream_object, write_objects

CHAPTER = " ".join(f"The harbour crane lifts crate {n} onto the quay at dawn." for n in range(120))


def zip_of(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return path


def epub_spine_bomb(path: Path, times: int = 3000) -> Path:
    """An EPUB whose spine names its one chapter `times` times (a few KB; baseline: millions of characters)."""
    container = (
        b'<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
        b'container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/'
        b'oebps-package+xml"/></rootfiles></container>'
    )
    spine = "".join('<itemref idref="c"/>' for _ in range(times))
    opf = (
        f'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0"><metadata '
        f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Bomb</dc:title></metadata><manifest>'
        f'<item id="c" href="c.xhtml" media-type="application/xhtml+xml"/></manifest><spine>{spine}</spine>'
        f"</package>"
    ).encode()
    page = f"<html><body><h1>Crane</h1><p>{CHAPTER}</p></body></html>".encode()
    return zip_of(
        path,
        {
            "mimetype": b"application/epub+zip",
            "META-INF/container.xml": container,
            "OEBPS/content.opf": opf,
            "OEBPS/c.xhtml": page,
        },
    )


def padded(path: Path, members: int = 20, size: int = 1_000_000) -> Path:
    """`path`'s zip with `members` padding members of `size` zero bytes each (each under 1 MiB, about 1 KB packed,
    never read): they lift the file's unpacked size, never its packed one."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as z:
        for n in range(members):
            z.writestr(f"padding/{n}.bin", bytes(size))
    return path


def epub_padded_spine_bomb(path: Path) -> Path:
    """The spine bomb with padding members: bounded by its unpacked size it gives 21 M characters; 36 KB packed."""
    return padded(epub_spine_bomb(path))


def xlsx_padded_shared_bomb(path: Path) -> Path:
    """The shared-string bomb with padding members: 30 M characters by its unpacked size; about 40 KB packed."""
    return padded(xlsx_shared_string_bomb(path))


def markdown_chunk_bomb(path: Path, sections: int = 40_000) -> Path:
    """A Markdown file of `sections` one-word sections (about 400 KB): a chunk each, unless chunks are bounded."""
    path.write_text("".join(f"# S{n}\n\nw{n}\n\n" for n in range(sections)))
    return path


def odt_repeat_bomb(path: Path) -> Path:
    """An OpenDocument text whose one table row of one cell is repeated a thousand times, a thousand wide."""
    t, x = "urn:oasis:names:tc:opendocument:xmlns:table:1.0", "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    content = (
        f'<?xml version="1.0"?><office:document-content xmlns:office="urn:oasis:names:tc:opendocument:'
        f'xmlns:office:1.0" xmlns:table="{t}" xmlns:text="{x}"><office:body><office:text><table:table>'
        f'<table:table-row table:number-rows-repeated="100000"><table:table-cell '
        f'table:number-columns-repeated="100000"><text:p>a cell repeated twenty</text:p></table:table-cell>'
        f"</table:table-row></table:table></office:text></office:body></office:document-content>"
    ).encode()
    return zip_of(path, {"mimetype": b"application/vnd.oasis.opendocument.text", "content.xml": content})


def xlsx_shared_string_bomb(path: Path, cells: int = 3000, length: int = 10_000) -> Path:
    """An Excel workbook whose `cells` cells all point at one long shared string (a few KB packed)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.active["A1"] = "x"
    plain = io.BytesIO()
    book.save(plain)
    with zipfile.ZipFile(plain) as z:
        members = {n: z.read(n) for n in z.namelist()}
    rows = "".join(f'<row r="{n}"><c r="A{n}" t="s"><v>0</v></c></row>' for n in range(1, cells + 1))
    sheet = re.sub(r"<dimension [^>]*/>", "", members["xl/worksheets/sheet1.xml"].decode())
    start, end = sheet.index("<sheetData>") + len("<sheetData>"), sheet.index("</sheetData>")
    members["xl/worksheets/sheet1.xml"] = (sheet[:start] + rows + sheet[end:]).encode()
    text = ("shared " * (length // 7 + 1))[:length]
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    members["xl/sharedStrings.xml"] = (
        f'<?xml version="1.0"?><sst xmlns="{main}" count="{cells}" uniqueCount="1"><si><t>{text}</t></si></sst>'
    ).encode()
    types = members["[Content_Types].xml"].decode()
    members["[Content_Types].xml"] = types.replace(
        "</Types>",
        (
            '<Override PartName="/xl/sharedStrings.xml" ContentType="application/vnd.openxmlformats-officedocument.'
            'spreadsheetml.sharedStrings+xml"/></Types>'
        ),
    ).encode()
    rels = members["xl/_rels/workbook.xml.rels"].decode()
    members["xl/_rels/workbook.xml.rels"] = rels.replace(
        "</Relationships>",
        (
            '<Relationship Id="rIdS" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
            'sharedStrings" Target="sharedStrings.xml"/></Relationships>'
        ),
    ).encode()
    return zip_of(path, members)


def links(folder: Path, outside: Path) -> list[Path]:
    """Symbolic links in `folder` that leave it: to a file outside, to a folder outside, and one inside
    (which is followed)."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "secret.md").write_text("# Secret\n\nThe outside vault code is plover.\n")
    (folder / "inner.md").write_text("# Inner\n\nThe lantern is inside the folder.\n")
    made = [folder / "to_secret.md", folder / "to_outside", folder / "to_inner.md"]
    os.symlink(outside / "secret.md", made[0])
    os.symlink(outside, made[1], target_is_directory=True)
    os.symlink(folder / "inner.md", made[2])
    return made


# Names a client may send: (as sent, what the stored name must keep).
HOSTILE_NAMES = [
    ("é" * 150 + ".md", ".md"),  # under 200 characters, over 255 bytes
    ("n" * 300 + ".md", ".md"),  # 300 characters: cut, keeping the extension
    ("coll.md", "coll.md"),
    ("coll.md/inner.md", ".md"),  # a folder where a file of the same name is
]


def bundle_members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        out = {}
        for m in tar.getmembers():
            f = tar.extractfile(m)
            assert f is not None
            out[m.name] = f.read()
        return out


def rewrite_bundle(path: Path, members: dict[str, bytes], manifest_edit: dict[str, object] | None = None) -> Path:
    """The bundle written again with `members` (the manifest last, its members' sizes and checksums made to
    match, as a forger would), `manifest_edit` merged into the manifest."""
    manifest = json.loads(members.pop("manifest.json")) | (manifest_edit or {})
    manifest["members"] = {
        name: {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in members.items()
    }
    if "manifest_sha256" in manifest:  # the manifest's own checksum recomputed too
        from ragvps.db.bundle_file import manifest_sum

        manifest["manifest_sha256"] = manifest_sum(manifest)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in [*members.items(), ("manifest.json", json.dumps(manifest).encode())]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def foreign_root(path: Path, members: dict[str, bytes], root: str) -> Path:
    """The bundle with every document's `root` pointing at `root` (a folder the importing user never gave)."""
    name = next(n for n in members if n.startswith("documents"))
    rows = [json.loads(line) for line in members[name].splitlines() if line.strip()]
    members[name] = b"".join(json.dumps(r | {"root": root}).encode() + b"\n" for r in rows)
    return rewrite_bundle(path, members)


def extra_chunk(path: Path, members: dict[str, bytes]) -> Path:
    """The bundle with one chunk more than its manifest counts (a copy of its first with a new id)."""
    name = next(n for n in members if n.startswith("chunks"))
    rows = [json.loads(line) for line in members[name].splitlines() if line.strip()]
    top = max(r["id"] for r in rows)
    extra = rows[0] | {
        "id": top + 1,
        "seq": max(r["seq"] for r in rows if r["document_id"] == rows[0]["document_id"]) + 1,
    }
    members[name] = b"".join(json.dumps(r).encode() + b"\n" for r in [*rows, extra])
    return rewrite_bundle(path, members)


_PDF_HEAD = [
    b"<< /Type /Catalog /Pages 2 0 R >>",
    b"",
    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold >>",
]


def pdf_million_pages(path: Path, fanout: int = 1000) -> Path:
    """A PDF of fanout x fanout empty pages (a million) in 13 KB: the root's kids are one node named `fanout` times,
    whose kids are one page named `fanout` times."""
    objects = list(_PDF_HEAD)
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join([b"5 0 R"] * fanout), fanout * fanout)
    objects[4:] = [
        b"<< /Type /Pages /Parent 2 0 R /Kids [%s] /Count %d >>" % (b" ".join([b"6 0 R"] * fanout), fanout),
        b"<< /Type /Page /Parent 5 0 R /MediaBox [0 0 612 792] >>",
    ]
    return write_objects(path, objects)


def pdf_form_bomb(path: Path, levels: int = 40) -> Path:
    """A content-stream bomb in 8 KB: the page draws form 1, which draws form 2 twice, ... so the innermost form's
    line is drawn 2^(levels - 1) times (PDFium parses each drawing anew: memory and time without end)."""
    objects = list(_PDF_HEAD)
    objects[1] = b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>"
    objects.append(
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 6 0 R /Resources << /XObject << /X 7 0 R "
        b">> >> >>"
    )
    objects.append(stream_object(b"/X Do"))
    objects += form_chain(7, levels)
    return write_objects(path, objects)


def form_chain(first: int, levels: int) -> list[bytes]:
    """Form XObjects numbered from `first`, each drawing the next twice, the last a line of text: drawn once, the
    first draws that line 2^(levels - 1) times."""
    out = []
    for k in range(levels):
        last = k == levels - 1
        body = content([Run(72, 700, "The innermost line of the bomb.")]) if last else b"/X Do /X Do"
        resources = b"/Font << /F1 3 0 R >>" if last else b"/XObject << /X %d 0 R >>" % (first + 1 + k)
        out.append(
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << %s >> /Length %d >>\nstream\n"
            % (resources, len(body))
            + body
            + b"\nendstream"
        )
    return out


def pdf_late_bomb(path: Path, pages: int = 40, bomb: int = 20, levels: int = 40) -> Path:
    """`pages` pages of text, page `bomb` of which draws pdf_form_bomb's forms instead: a long PDF, so read by two
    readers, with its bomb in the second reader's share (an even page)."""
    objects = list(_PDF_HEAD)
    refs = []
    forms = 5 + 2 * pages  # the first form's object number, after the pages and their streams
    for number in range(1, pages + 1):
        if number == bomb:
            stream, resources = b"/X Do", b"/XObject << /X %d 0 R >>" % forms
        else:
            lines = [
                Run(72, 700 - 14 * k, f"Page {number}, line {k}: the harbour log names a ship.") for k in range(40)
            ]
            stream, resources = content(lines), b"/Font << /F1 3 0 R >>"
        objects.append(stream_object(stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << %s >> >>"
            % (len(objects), resources)
        )
        refs.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(refs), pages)
    objects += form_chain(forms, levels)
    return write_objects(path, objects)


def pdf_deep_tree(path: Path, depth: int = 20_000) -> Path:
    """A page tree `depth` nodes deep, its one page (with text) at the bottom (about 1 MB; PDFium refuses the page)."""
    objects = list(_PDF_HEAD)
    objects[1] = b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>"
    for k in range(depth):
        objects.append(b"<< /Type /Pages /Parent %d 0 R /Kids [%d 0 R] /Count 1 >>" % (4 + k if k else 2, 6 + k))
    objects.append(
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font << /F1 3 0 R >> "
        b">> >>" % (4 + depth, 6 + depth)
    )
    objects.append(stream_object(content([Run(72, 700, "The page at the bottom of a deep tree.")])))
    return write_objects(path, objects)


PDF_BOMBS = {
    "million_pages.pdf": (pdf_million_pages, "too many pages"),
    "form_bomb.pdf": (pdf_form_bomb, "PDF reader failed"),  # or "PDF too slow", whichever bound it meets first
    "deep_tree.pdf": (pdf_deep_tree, "unreadable PDF"),
}


def corpus(folder: Path) -> dict[str, str]:
    """Every file-borne hostile case in `folder`; file name -> the skipped reason it must end with."""
    folder.mkdir(parents=True, exist_ok=True)
    epub_spine_bomb(folder / "spine_bomb.epub")
    odt_repeat_bomb(folder / "repeat_bomb.odt")
    xlsx_shared_string_bomb(folder / "shared_bomb.xlsx")
    for name, (make, _) in PDF_BOMBS.items():
        make(folder / name)
    epub_padded_spine_bomb(folder / "padded_spine_bomb.epub")
    xlsx_padded_shared_bomb(folder / "padded_shared_bomb.xlsx")
    return {
        "spine_bomb.epub": "too much text",
        "repeat_bomb.odt": "too much text",
        "shared_bomb.xlsx": "too much text",
        **{name: reason for name, (_, reason) in PDF_BOMBS.items()},
        "padded_spine_bomb.epub": "too much text",
        "padded_shared_bomb.xlsx": "too much text",
    }
