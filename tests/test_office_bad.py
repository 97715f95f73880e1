"""Hostile Office files: each is skipped with one warning naming it and why, nothing it holds is resolved,
run or inflated past a bound, and the good files beside it are stored."""

from __future__ import annotations

import json
import struct
import tracemalloc
import zipfile
from pathlib import Path

import psycopg
import pytest
from support.office_files import docx_file, encrypted_docx, with_entity, xlsx_file, zip_bomb, zip_of

from ragvps.ingest.formats import zipguard
from ragvps.ingest.sources import KINDS, SkipFile, SourceFile, load

SECRET = "the-launch-code-is-4242"


def _load(path: Path, warnings: list[str] | None = None):
    warn = (warnings if warnings is not None else []).append
    return load(SourceFile(path, path.name, KINDS[path.suffix.lower()]), warn)


def _skip(path: Path) -> SkipFile:
    with pytest.raises(SkipFile) as exc:
        _load(path)
    assert str(exc.value).startswith(f"{path.name}: ")
    return exc.value


def test_password_protected_office_file(tmp_path):
    err = _skip(encrypted_docx(tmp_path / "locked.docx"))
    assert err.reason == "encrypted" and "password-protected" in str(err)


def test_corrupt_zip_and_a_pdf_named_docx(tmp_path):
    good = docx_file(tmp_path / "good.docx").read_bytes()
    (tmp_path / "cut.docx").write_bytes(good[: len(good) // 2])
    err = _skip(tmp_path / "cut.docx")
    assert err.reason == "corrupt file" and "damaged zip archive" in str(err)
    (tmp_path / "report.docx").write_bytes(b"%PDF-1.7\n1 0 obj << >> endobj\n%%EOF\n")
    err = _skip(tmp_path / "report.docx")
    assert err.reason == "not the format its name says" and "named .docx but it is a PDF" in str(err)
    (tmp_path / "legacy.xlsx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 2000)
    assert _skip(tmp_path / "legacy.xlsx").reason == "legacy Office format"


@pytest.mark.parametrize("name", ["bomb.docx", "bomb.xlsx"])
def test_zip_bomb_is_refused_from_its_directory_with_bounded_memory(tmp_path, name):
    inner = "word/document.xml" if name.endswith(".docx") else "xl/worksheets/sheet1.xml"
    path = zip_bomb(tmp_path / name, inner, 64 << 20)
    assert path.stat().st_size < 200_000  # ~1000 times smaller than what it expands to
    _skip(path)  # once untraced: the readers' modules, imported on first use (8 MB for openpyxl), are not the bomb's
    tracemalloc.start()
    try:
        err = _skip(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert err.reason == "too large when unpacked" and inner in str(err) and "zip bomb" in str(err)
    assert peak < 4 << 20


def test_a_zip_that_declares_gigabytes_is_refused_before_inflating(tmp_path):
    path = zip_of(tmp_path / "huge.docx", {"[Content_Types].xml": b"<Types/>", "word/document.xml": b"<w/>" * 100})
    data = bytearray(path.read_bytes())
    at = data.rfind(b"PK\x01\x02")  # the last member's central directory entry: claim 4 GB uncompressed
    struct.pack_into("<I", data, at + 24, 0xFFFF0000)
    path.write_bytes(bytes(data))
    err = _skip(path)
    assert err.reason == "too large when unpacked" and "4,294,901,760 bytes" in str(err)


@pytest.mark.parametrize("kind", ["docx", "xlsx", "epub"])
def test_external_entities_are_never_resolved(tmp_path, kind):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    if kind == "docx":
        path = with_entity(tmp_path / "xxe.docx", secret)
    else:
        src = xlsx_file(tmp_path / "plain.xlsx") if kind == "xlsx" else None
        decl = f'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file://{secret}">]>'.encode()
        if src is not None:
            with zipfile.ZipFile(src) as z:
                members = {n: z.read(n) for n in z.namelist()}
            members["xl/sharedStrings.xml"] = decl + b"<sst><si><t>&xxe;</t></si></sst>"
        else:
            members = {"META-INF/container.xml": decl + b"<container>&xxe;</container>"}
        path = zip_of(tmp_path / f"xxe.{kind}", members)
    warnings: list[str] = []
    with pytest.raises(SkipFile) as exc:
        _load(path, warnings)
    assert exc.value.reason == "unsafe XML" and "declares entities or a DOCTYPE" in str(exc.value)
    assert SECRET not in str(exc.value) + " ".join(warnings)


def test_the_parsers_refuse_entities_even_past_the_guard(tmp_path, monkeypatch):
    """Defence in depth: with the guard's scan switched off, the readers still never resolve an entity."""
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    monkeypatch.setattr(zipguard, "_declares_entities", lambda *a: False)
    path = with_entity(tmp_path / "xxe.docx", secret)
    try:
        docs = _load(path)
    except SkipFile as exc:
        assert SECRET not in str(exc)
    else:
        assert all(SECRET not in d.text for d in docs)


def test_macros_are_data_only(tmp_path):
    src = docx_file(tmp_path / "src.docx")
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members["word/vbaProject.bin"] = b'Attribute VB_Name = "AutoOpen"\nShell "rm -rf /"'
    path = zip_of(tmp_path / "macro.docm", members)
    warnings: list[str] = []
    [doc] = _load(path, warnings)
    assert "The harbour has three cranes." in doc.text and "AutoOpen" not in doc.text
    assert warnings == ["macro.docm: has macros; read as data only (ragvps never runs them)"]


@pytest.mark.parametrize("rows", [200_000, pytest.param(1_000_000, marks=pytest.mark.slow)])
def test_a_large_csv_is_streamed(tmp_path, rows):
    path = tmp_path / "big.csv"
    with path.open("w") as f:
        f.write("id,city,amount\n")
        for n in range(rows):
            f.write(f"{n},c{n % 97},{n % 1000}\n")
    tracemalloc.start()
    try:
        [doc] = _load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    last = rows - 1
    assert doc.text.count("\n") == rows + 1 and doc.text.endswith(f"| {last} | c{last % 97} | {last % 1000} |")
    # the text written, plus one growing copy of it: never a row object per row
    assert peak < 3 * len(doc.text) + (16 << 20), (peak, len(doc.text))


def test_bad_office_files_beside_good_ones(cli, tmp_path, db_url):
    folder = tmp_path / "docs"
    folder.mkdir()
    docx_file(folder / "manual.docx")
    xlsx_file(folder / "fleet.xlsx")
    (folder / "notes.md").write_text("# Notes\n\nThe crane was serviced in May.\n")
    encrypted_docx(folder / "locked.docx")
    (folder / "report.docx").write_bytes(b"%PDF-1.4\n%%EOF\n")
    (folder / "cut.pptx").write_bytes((folder / "manual.docx").read_bytes()[:3000])
    zip_bomb(folder / "bomb.xlsx", "xl/worksheets/sheet1.xml", 32 << 20)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    with_entity(folder / "xxe.docx", secret)
    import docx

    docx.Document().save(folder / "empty.docx")
    result = cli("ingest", str(folder), "--json")
    report = json.loads(result.stdout)
    err = " ".join(result.stderr.split())
    assert "Traceback" not in err and SECRET not in err + result.stdout
    for name in ["locked.docx", "report.docx", "cut.pptx", "bomb.xlsx", "xxe.docx", "empty.docx"]:
        assert f"{name}: " in err, name
    assert report["skipped"] == {
        "encrypted": 1,
        "not the format its name says": 1,
        "corrupt file": 1,
        "too large when unpacked": 1,
        "unsafe XML": 1,
        "no text": 1,
    }
    with psycopg.connect(db_url) as conn:
        docs = dict(conn.execute("SELECT doc_id, title FROM documents").fetchall())
        texts = " ".join(r[0] for r in conn.execute("SELECT text FROM chunks"))
    assert docs == {"manual.docx": "Harbour manual", "fleet.xlsx": "fleet", "notes.md": "Notes"}
    assert "| Crane | Capacity | Operator |" in texts and "| Ship 3 | Port 3 | 13 |" in texts
    assert SECRET not in texts
