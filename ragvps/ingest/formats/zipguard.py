"""Checks an Office or EPUB file (a zip) before any parser sees it: what it really is, its declared sizes,
encryption, and XML that declares entities. Everything is read from the central directory or streamed, so a
zip bomb costs no memory; a member's declared size also bounds what zipfile will ever inflate from it."""

from __future__ import annotations

import codecs
import zipfile
from pathlib import Path

from ragvps.ingest.bounds import SkipFile
from ragvps.ingest.sources import SourceFile

MAX_TOTAL = 512 << 20  # bytes a file may expand to, all members together
MAX_MEMBER = 256 << 20
MAX_RATIO = 100  # a member over RATIO_FLOOR may expand at most this many times (real Office XML: 3-40x)
RATIO_FLOOR = 1 << 20
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_WHAT = (
    (b"%PDF-", "a PDF"),
    (b"{\\rtf", "an RTF document"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"<", "an XML or HTML text"),
)
# What an XML declaration of entities starts with, in the encodings an XML part may use.
_DECLARATIONS = tuple(
    word.encode(codec) for word in ("<!DOCTYPE", "<!ENTITY") for codec in ("utf-8", "utf-16-le", "utf-16-be")
)
_BLOCK = 1 << 16
_XML = (".xml", ".rels", ".opf", ".ncx", ".xhtml", ".htm", ".html")


def open_zip(source: SourceFile, label: str, doctypes: bool = False) -> zipfile.ZipFile:
    """The file as a checked zip archive; SkipFile naming the file and the reason otherwise. `label` says
    what the file should be ("a Word document"). `doctypes`: a DOCTYPE naming a public DTD, without an internal
    subset, is allowed (EPUB's XHTML and NCX carry one; nothing here ever loads it)."""
    rel, ext = source.rel, source.path.suffix.lower()
    with source.path.open("rb") as f:
        head = f.read(8)
    if head.startswith(_OLE):
        raise _ole(source, label)
    if not head.startswith(b"PK"):
        what = next((name for magic, name in _WHAT if head.lstrip().startswith(magic)), "not a zip archive")
        raise SkipFile(
            "not the format its name says",
            f"{rel}: named {ext} but it is {what}, not {label}; skipped (rename it to its real type)",
        )
    try:
        archive = zipfile.ZipFile(source.path)
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise SkipFile(
            "corrupt file",
            f"{rel}: a damaged zip archive ({exc}), not a readable {label}; skipped "
            "(open and save it again in its application)",
        ) from exc
    try:
        _check_members(archive, members, rel, doctypes)
    except BaseException:
        archive.close()
        raise
    return archive


def _check_members(archive: zipfile.ZipFile, members: list[zipfile.ZipInfo], rel: str, doctypes: bool) -> None:
    total = 0
    for info in members:
        if info.flag_bits & 0x1:
            raise SkipFile(
                "encrypted",
                f"{rel}: its parts are encrypted (a password-protected archive); skipped "
                "(remove the password and save it again)",
            )
        total += info.file_size
        ratio = info.file_size / max(info.compress_size, 1)
        if info.file_size > MAX_MEMBER or total > MAX_TOTAL or (info.file_size > RATIO_FLOOR and ratio > MAX_RATIO):
            raise SkipFile(
                "too large when unpacked",
                f"{rel}: {info.filename} expands to {info.file_size:,} bytes ({ratio:,.0f} times its "
                f"packed size; limits {MAX_MEMBER:,} per part, {MAX_TOTAL:,} in all, {MAX_RATIO}x): "
                "a zip bomb or a file too large to read; skipped",
            )
    for info in members:
        if info.filename.lower().endswith(_XML) and _declares_entities(archive, info, doctypes):
            raise SkipFile(
                "unsafe XML",
                f"{rel}: {info.filename} declares entities or a DOCTYPE, which these "
                "files never need (an XXE attempt?); skipped, nothing resolved",
            )


def _declares_entities(archive: zipfile.ZipFile, info: zipfile.ZipInfo, doctypes: bool) -> bool:
    """Whether the member's XML holds an ENTITY declaration or a DOCTYPE (with `doctypes`, only one with an
    internal subset), streamed in blocks."""
    tail = b""
    keep = max(len(d) for d in _DECLARATIONS) + 512
    try:
        with archive.open(info) as f:
            while block := f.read(_BLOCK):
                window = tail + block
                for d in _DECLARATIONS:
                    at = window.find(d)
                    while at >= 0:
                        if not (doctypes and _harmless_doctype(window[at : at + 512], d)):
                            return True
                        at = window.find(d, at + 1)
                tail = window[-keep:]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as exc:
        raise SkipFile(
            "corrupt file", f"{archive.filename}: {info.filename} cannot be unpacked ({exc}); skipped"
        ) from exc
    return False


def _harmless_doctype(text: bytes, found: bytes) -> bool:
    """A DOCTYPE that declares nothing itself: no `[` internal subset (where entities are declared)."""
    codec = "utf-8" if found.isascii() else ("utf-16-le" if found[1:2] == b"\x00" else "utf-16-be")
    decl = codecs.decode(text, codec, errors="ignore")
    end = decl.find(">")
    return decl.startswith("<!DOCTYPE") and end >= 0 and "[" not in decl[:end]


def _ole(source: SourceFile, label: str) -> SkipFile:
    """An OLE compound file: an encrypted (password-protected) Office file, or a legacy binary one."""
    marker = "EncryptedPackage".encode("utf-16-le")
    with source.path.open("rb") as f:
        found = False
        tail = b""
        while block := f.read(_BLOCK):
            if marker in tail + block:
                found = True
                break
            tail = block[-len(marker) :]
    if found:
        return SkipFile(
            "encrypted",
            f"{source.rel}: a password-protected (encrypted) Office file; skipped "
            "(save a copy without the password to ingest it)",
        )
    return SkipFile(
        "legacy Office format",
        f"{source.rel}: a legacy binary Office file (.doc/.xls/.ppt) named "
        f"{Path(source.rel).suffix}, not {label}; skipped (save it as "
        ".docx/.xlsx/.pptx)",
    )


def has_macros(archive: zipfile.ZipFile) -> bool:
    return any(name.lower().endswith("vbaproject.bin") for name in archive.namelist())
