"""The 25 real Office files in ../shared/data/office (Unstructured's examples): each is read with its
structure, or skipped with a reason naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from ragvps.ingest.chunk import ChunkerConfig, chunk_document
from ragvps.ingest.sources import KINDS, SkipFile, SourceFile, load

OFFICE = Path(__file__).resolve().parents[2] / "shared" / "data" / "office"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not OFFICE.exists(), reason="needs ../shared/data/office")]
NAMES = sorted(p.name for p in OFFICE.iterdir() if p.suffix.lower() in KINDS) if OFFICE.exists() else []
CONFIG = ChunkerConfig("structure", 200, 30, 256)


def _load(name: str):
    path = OFFICE / name
    return load(SourceFile(path, name, KINDS[path.suffix.lower()]), lambda m: None)


@pytest.mark.parametrize("name", NAMES)
def test_every_sample_is_read_or_skipped_with_its_name(name):
    try:
        docs = _load(name)
    except SkipFile as exc:
        assert name == "empty.xlsx" and str(exc) == "empty.xlsx: every sheet is empty; skipped"
        return
    assert docs and all(d.text.strip() for d in docs)
    for d in docs:
        for c in chunk_document(d, CONFIG):
            spans = [c.metadata[k] for k in ("table_header", "table_section") if k in c.metadata]
            assert c.text == "".join(d.text[a:b] + "\n" for a, b in spans) + d.text[c.start : c.end]


def test_structure_of_the_samples():
    [book] = _load("handbook-872p.docx")
    paths = {c.heading_path for c in chunk_document(book, CONFIG)}
    assert (
        "handbook-872p > CHAPTER 3 - ADMINISTRATION OF CHAPTER 13 CASES > A. INITIAL REVIEW OF CHAPTER 13 "
        "CASES > 1. CONFLICTS OF INTEREST"
    ) in paths
    [deck] = _load("fake-power-point-malformed.pptx")  # the malformed deck still gives its slide
    assert "## Slide 1: Test Slide" in deck.text
    [table] = _load("fake-power-point-table.pptx")
    assert "| Column 1 | Column 2 | Column 3 |\n| --- | --- | --- |\n| Red | Green | Blue |" in table.text
    for name in ("stanley-cups.csv", "stanley-cups.tsv", "stanley-cups-utf-16.csv", "stanley-cups.xlsx"):
        assert "| Team | Location | Stanley Cups |\n| --- | --- | --- |\n| Blues | STL | 1 |" in _load(name)[0].text
    assert "| Lorem, ipsum | dolor sit | amet |" in _load("semicolon-delimited.csv")[0].text
    [merged] = _load("docx-tables.docx")
    assert "| a | b | b |\n| --- | --- | --- |\n| a | c | d |\n| e | e | d |" in merged.text
    [epub] = _load("winter-sports.epub")
    assert epub.title == "Winter Sports in Switzerland"
    assert "| Header row | Mon | Wed | Fri |" in _load("fake.odt")[0].text
    assert "| Column 1 | Column 2 |" in _load("fake-doc.rtf")[0].text
    assert "🤠😅" in _load("emoji.xlsx")[0].text


def test_the_sample_folder_is_ingested(cli, tmp_path, db_url):
    folder = tmp_path / "office"
    folder.mkdir()
    for name in NAMES:
        if name != "handbook-872p.docx":  # its 1,500 chunks are the benchmark's (bench/office_bench.py)
            shutil.copy(OFFICE / name, folder / name)
    result = cli("ingest", str(folder), "--json")
    report = json.loads(result.stdout)
    assert report["skipped"] == {"no text": 1} and "empty.xlsx: every sheet is empty" in " ".join(result.stderr.split())
    with psycopg.connect(db_url) as conn:
        stored = {r[0] for r in conn.execute("SELECT doc_id FROM documents")}
    assert stored == set(NAMES) - {"handbook-872p.docx", "empty.xlsx"}
    hits = json.loads(cli("query", "How many Stanley Cups did the Maple Leafs win?", "--json").stdout)
    assert any("| Maple Leafs | TOR | 13 |" in h["text"] for h in hits[:3])
