"""Every format a VPS user has, read from small real files, and bad input through `ragvps chunk`."""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

import pytest

from ragvps.ingest.chunk import ChunkerConfig, chunk_document
from ragvps.ingest.sources import SkipFile, SourceFile, load

PDFS = Path(__file__).resolve().parents[2] / "shared" / "data" / "pdf_sample"
CONFIG = ChunkerConfig("structure", 200, 30, 256)


def _load(path: Path, warnings: list[str] | None = None):
    kind = {".pdf": "pdf", ".html": "html", ".htm": "html", ".md": "markdown", ".txt": "text"}[path.suffix]
    return load(SourceFile(path, path.name, kind), (warnings if warnings is not None else []).append)


@pytest.mark.skipif(not PDFS.exists(), reason="needs ../shared/data/pdf_sample")
@pytest.mark.parametrize("name", sorted(p.name for p in PDFS.glob("*.pdf")) if PDFS.exists() else [])
def test_pdf_text_matches_the_publishers_extraction(name):
    [doc] = _load(PDFS / name)
    reference = (PDFS / "txt" / name.replace(".pdf", ".txt")).read_bytes().decode("cp1252").split()
    words = doc.text.split()
    assert not set(reference) - set(words)
    assert difflib.SequenceMatcher(None, words, reference, autojunk=False).ratio() > 0.95
    assert doc.kind == "pdf" and doc.metadata["pages"] == [[0, 1]]
    chunks = chunk_document(doc, CONFIG)
    assert chunks and all(c.metadata["pages"] == [1] for c in chunks)


def _pdf(tmp_path: Path, name: str, pages: list[str], password: str | None = None, blank: bool = False) -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in pages:
        writer.add_page(PdfReader(PDFS / page).pages[0])
    if blank:
        writer.add_blank_page(612, 792)
    if password:
        writer.encrypt(password)
    path = tmp_path / name
    with path.open("wb") as f:
        writer.write(f)
    return path


@pytest.mark.skipif(not PDFS.exists(), reason="needs ../shared/data/pdf_sample")
def test_multi_page_pdf_keeps_page_numbers(tmp_path):
    path = _pdf(tmp_path, "two.pdf", ["page-11.pdf", "page-13.pdf"], blank=True)
    [doc] = _load(path)
    assert [p[1] for p in doc.metadata["pages"]] == [1, 2] and doc.metadata["page_count"] == 3
    second = doc.metadata["pages"][1][0]
    assert doc.text[second:].startswith(_load(PDFS / "page-13.pdf")[0].text[:40])
    chunks = chunk_document(doc, CONFIG)
    assert chunks[0].metadata["pages"] == [1] and chunks[-1].metadata["pages"] == [2]


@pytest.mark.skipif(not PDFS.exists(), reason="needs ../shared/data/pdf_sample")
def test_encrypted_and_image_only_pdfs_are_skipped(tmp_path):
    with pytest.raises(SkipFile, match=r"locked.pdf: encrypted PDF \(needs a password\), skipped") as exc:
        _load(_pdf(tmp_path, "locked.pdf", ["page-11.pdf"], password="secret"))
    assert exc.value.reason == "encrypted PDF"
    with pytest.raises(SkipFile, match="scan.pdf: no text layer") as exc:
        _load(_pdf(tmp_path, "scan.pdf", [], blank=True))
    assert exc.value.reason == "PDF without text"
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    with pytest.raises(SkipFile, match="broken.pdf: not a readable PDF"):
        _load(tmp_path / "broken.pdf")
    (tmp_path / "cut.pdf").write_bytes((PDFS / "page-11.pdf").read_bytes()[:2000])  # a download cut short
    with pytest.raises(SkipFile, match=r"^cut.pdf: not a readable PDF \(.+\), skipped$") as exc:
        _load(tmp_path / "cut.pdf")
    assert exc.value.reason == "unreadable PDF"


PAGE = """<!doctype html><html><head><title>Billing guide</title><style>p { color: red }</style>
<script>var secret = "do not index";</script></head><body>
<nav><a href="/">Home</a> | <a href="/docs">Docs</a></nav>
<h1>Billing guide</h1><p>How invoices work &amp; when they are sent.</p>
<h2>Cancelling</h2><p>Write to   support
before the 5th.</p><ul><li>By mail</li><li>By phone</li></ul>
<h3>Refunds</h3><p>Within <b>14</b> days.</p><pre>  keep   this
  spacing</pre></body></html>"""


def test_html_drops_scripts_styles_and_navigation_and_keeps_headings(tmp_path):
    (tmp_path / "billing.html").write_text(PAGE)
    [doc] = _load(tmp_path / "billing.html")
    assert doc.title == "Billing guide" and doc.kind == "html"
    for gone in ("secret", "color", "Home", "Docs"):
        assert gone not in doc.text
    assert "How invoices work & when they are sent." in doc.text and "Write to support before the 5th." in doc.text
    assert "By mail\nBy phone" in doc.text and "  keep   this\n  spacing" in doc.text
    chunks = chunk_document(doc, ChunkerConfig("structure", 12, 2, 256))
    paths = {c.heading_path for c in chunks}
    assert paths == {"Billing guide", "Billing guide > Cancelling", "Billing guide > Cancelling > Refunds"}
    refunds = [c for c in chunks if c.heading_path.endswith("Refunds")]
    assert refunds[0].text.startswith("Refunds\n\nWithin 14 days.")


def test_markdown_title_ignores_hash_lines_in_code(tmp_path):
    (tmp_path / "notes.md").write_text("```\n# not the title\n```\n\nReal title\n==========\n\nText.\n")
    assert _load(tmp_path / "notes.md")[0].title == "Real title"
    (tmp_path / "plain.md").write_text("no heading here\n")
    assert _load(tmp_path / "plain.md")[0].title == "plain"


# --- `ragvps chunk`: the stage alone, its summary, its files, and bad input ---------------------------------


def _chunk(cli, *args: str) -> dict:
    return json.loads(cli("chunk", *args, "--json").stdout)


def test_chunk_command_summary_and_reuse(cli, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\n## Billing\n\n" + "Invoices are sent monthly. " * 80)
    (folder / "page.html").write_text(PAGE)
    (folder / "notes.txt").write_text("Backups run nightly.\n\nRestores take an hour.\n")
    (folder / "corpus.jsonl").write_text(
        '{"_id": "a1", "title": "Alpha", "text": "First."}\n{"_id": "b2", "title": "", "text": "Second."}\n'
    )
    (folder / "image.gif").write_bytes(b"GIF89a")
    first = _chunk(cli, str(folder))
    assert first["files"] == 4 and first["documents"] == 5 and first["rechunked_files"] == 4
    assert first["skipped"] == {"unsupported type .gif": 1}
    assert first["tokens"]["over_limit"] == 0 and first["tokens"]["max"] <= 254
    assert first["model"] == "all-MiniLM-L6-v2-int8" and first["chunk_size"] == 200 and first["chunk_overlap"] == 30
    chunk_dir = Path(first["chunk_dir"])
    files = {p.name: p.read_bytes() for p in chunk_dir.glob("*.jsonl")}
    assert len(files) == 4

    again = _chunk(cli, str(folder))
    assert again["rechunked_files"] == 0 and again["chunks"] == first["chunks"]

    for p in chunk_dir.glob("*.jsonl"):  # deterministic: chunking again gives byte-identical files
        p.unlink()
    _chunk(cli, str(folder))
    assert {p.name: p.read_bytes() for p in chunk_dir.glob("*.jsonl")} == files

    records = [json.loads(line) for data in files.values() for line in data.decode().splitlines()]
    chunks = [r for r in records if r.get("type") == "chunk"]
    fields = {"id", "seq", "heading_path", "text", "tokens", "llm_tokens", "content_hash", "start", "end"}
    assert fields <= chunks[0].keys()
    assert {c["id"] for c in chunks} >= {"a1#0", "b2#0", "guide.md#0", "notes.txt#0", "page.html#0"}

    human = cli("chunk", str(folder)).stdout
    assert human.startswith(f"4 files, 5 documents, {first['chunks']} chunks (structure, 200 tokens, overlap 30")
    assert "median" in human and "skipped 1 unsupported type .gif" in human

    fixed = _chunk(cli, str(folder), "--mode", "fixed", "--chunk-size", "100", "--chunk-overlap", "20")
    assert fixed["mode"] == "fixed" and fixed["rechunked_files"] == 4 and fixed["tokens"]["max"] <= 100 + 20


def test_bad_input_is_reported_and_the_run_continues(cli, tmp_path):
    folder = tmp_path / "bad"
    (folder / "sub").mkdir(parents=True)
    (folder / "latin1.txt").write_bytes("Le café est très bon.".encode("latin-1"))
    (folder / "empty.md").write_text("")
    (folder / "sub" / "loop").symlink_to(folder, target_is_directory=True)
    (folder / "ok.md").write_text("# Fine\n\nThis one is fine.\n")
    if PDFS.exists():
        _pdf(folder, "locked.pdf", ["page-11.pdf"], password="secret")
    result = cli("chunk", str(folder), "--json")
    report = json.loads(result.stdout)
    err = " ".join(result.stderr.split())
    assert "latin1.txt: not valid UTF-8 (byte 6); undecodable bytes replaced with U+FFFD" in err
    assert "symlink loop, skipped" in err and str(folder) in err
    assert report["files"] == 2 and report["documents"] == 2
    assert report["skipped"] == {"empty": 1} | ({"encrypted PDF": 1} if PDFS.exists() else {})
    if PDFS.exists():
        assert "locked.pdf: encrypted PDF (needs a password), skipped" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read every file")
def test_unreadable_file_is_reported(cli, tmp_path):
    folder = tmp_path / "perm"
    folder.mkdir()
    (folder / "ok.txt").write_text("readable\n")
    (folder / "secret.txt").write_text("hidden\n")
    (folder / "secret.txt").chmod(0)
    result = cli("chunk", str(folder), "--json")
    assert json.loads(result.stdout)["skipped"] == {"unreadable": 1}
    assert "secret.txt: permission denied, skipped" in result.stderr


@pytest.mark.slow
def test_a_large_text_file_is_chunked_in_bounded_memory(tmp_path):
    """A 64 MB text file: peak memory stays a small multiple of the file (the guarantee is for 200 MB)."""
    import subprocess
    import sys

    path = tmp_path / "big" / "big.txt"
    path.parent.mkdir()
    para = " ".join(f"Line {i} of the log says the backup of volume {i % 13} finished." for i in range(12))
    with path.open("w") as f:
        while f.tell() < 64 << 20:
            f.write(para + "\n\n")
    size = path.stat().st_size
    script = (
        "import json, resource, sys; from pathlib import Path; from ragvps.ingest.sources import SourceFile, load;"
        "from ragvps.ingest.chunk import ChunkerConfig, chunk_documents;"
        "docs = load(SourceFile(Path(sys.argv[1]), 'big.txt', 'text'), print);"
        "chunks = chunk_documents(docs, ChunkerConfig('structure', 200, 30, 256))[0];"
        "print(json.dumps([len(chunks), max(c.tokens for c in chunks), chunks[-1].end,"
        " resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
        env=os.environ | {"PYTHONPATH": "."},
    )
    n, biggest, end, peak = json.loads(out.stdout.splitlines()[-1])
    assert n > size // 2000 and biggest <= 254 and end == len(path.read_text().rstrip())
    assert peak < 150 * 2**20 + 5 * size, f"peak {peak >> 20} MB for a {size >> 20} MB file"
