"""The chunker's memory is bounded by input size whatever the line structure: nothing longer than a segment
is tokenized at once, a huge Markdown text is parsed in windows, and no chunk is a megabyte of one "word".
Peak RSS for 50 MB files of every shape is measured in bench/memory_bench.py."""

from __future__ import annotations

import random

import pytest

from ragvps import tokens
from ragvps.ingest import blocks, chunk
from ragvps.ingest.blocks import _markdown_starts, _Paths
from ragvps.ingest.chunk import ChunkerConfig, chunk_documents
from ragvps.records import Document

WORDS = ("alpha", "beta", "gamma", "delta", "harbour", "crane.", "ship!", "tide?", "quay", "berth")
CONFIG = ChunkerConfig("structure", 200, 20, 256)


def _doc(text: str) -> Document:
    return Document("big.md", "big.md", "Big", text, "markdown")


@pytest.fixture
def small_segments(monkeypatch):
    """Segments of 8 KB and parse windows of 32 KB, so that small texts take the large-input paths; every
    text handed to the tokenizer is recorded."""
    monkeypatch.setattr(blocks, "SEGMENT_CHARS", 1 << 13)
    monkeypatch.setattr(blocks, "PARSE_CHARS", 1 << 15)
    monkeypatch.setattr(chunk, "MAX_CHUNK_CHARS", 1 << 12)
    seen: list[int] = []
    real = tokens.encode

    def encode(text: str):
        seen.append(len(text))
        return real(text)

    monkeypatch.setattr(tokens, "encode", encode)
    return seen


@pytest.mark.parametrize("shape", ["one_line", "lines", "no_spaces", "table_row"])
def test_no_shape_is_tokenized_whole(small_segments, shape):
    r = random.Random(1)
    if shape == "one_line":
        text = " ".join(r.choice(WORDS) for _ in range(40_000))
    elif shape == "lines":
        text = "\n".join(r.choice(WORDS) for _ in range(40_000))
    elif shape == "no_spaces":
        text = "".join(r.choice("abcdefghij") for _ in range(200_000))
    else:
        text = "| a | b |\n| --- | --- |\n|" + "".join(f" {r.choice(WORDS)} |" for _ in range(30_000))
    chunks = chunk_documents([_doc(text)], CONFIG)[0]
    assert max(small_segments) <= blocks.SEGMENT_CHARS + 64  # a chunk's heading path is counted with it
    assert max(c.tokens for c in chunks) <= 254
    assert max(len(c.text) for c in chunks) <= chunk.MAX_CHUNK_CHARS
    assert chunks[-1].end == len(text.rstrip())  # the whole text is covered, in order
    assert all(a.start < b.start for a, b in zip(chunks, chunks[1:], strict=False))
    if shape != "no_spaces":  # every word survives the cuts
        joined = " ".join(c.text for c in chunks)
        assert sum(joined.count(w) for w in ("harbour", "crane")) >= sum(text.count(w) for w in ("harbour", "crane"))


def test_windowed_parse_finds_the_same_blocks(monkeypatch):
    """A text parsed in windows has the same top-level blocks as parsed whole: fences with blank lines,
    loose lists, tables, lazy block quotes and link references across windows."""
    r = random.Random(5)
    parts = ["# Big\n"]
    for s in range(150):
        parts.append(f"## Section *{s}* [ref]\n")
        parts.append(" ".join(r.choice(WORDS) for _ in range(r.randint(50, 300))) + "\n")
        if s % 7 == 0:
            parts.append("| a | b |\n|---|---|\n" + "".join(f"| {r.choice(WORDS)} | x |\n" for _ in range(30)))
        if s % 11 == 0:
            parts.append("```\n" + "\n\n".join(f"x = {i}" for i in range(80)) + "\n```\n")
        if s % 5 == 0:
            parts.append("\n".join(f"- item {i}\n\n  more {i}" for i in range(10)))
        parts.append("> quote\nlazy line\n")
    parts.append("[ref]: http://example.org\n")
    text = "\n".join(parts)
    whole = _markdown_starts(text, _Paths("Big"))
    for size in (3000, 20000):
        monkeypatch.setattr(blocks, "PARSE_CHARS", size)
        assert _markdown_starts(text, _Paths("Big")) == whole
    assert len(whole) > 500


def test_headings_keep_their_inline_text():
    text = "# Big\n\n## The *emphasised* `code` [link][ref] heading\n\nbody text\n\n[ref]: http://example.org\n"
    chunks = chunk_documents([_doc(text)], CONFIG)[0]
    assert chunks[-1].heading_path == "Big > The emphasised code link heading"
