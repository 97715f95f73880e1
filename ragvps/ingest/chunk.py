"""Chunk stage: cut documents at their structure into pieces that fit the embedder, counted in its own tokens.

Each document is tokenized once (in bounded segments); pieces are cut at token offsets, and their counts are
summed, which is exact because every cut falls on a WordPiece word boundary. Chunks that may not be exact
(a cut inside a word) or that come near the limit are re-counted from their final text.
"""

from __future__ import annotations

import hashlib
import json
import operator
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from ragvps import tokens
from ragvps.ingest import blocks as block_rules
from ragvps.ingest.blocks import (
    Block,
    Piece,
    _bounded,
    _lines,
    _markdown_blocks,
    _Paths,
    _plain_blocks,
    _sheet_blocks,
)
from ragvps.ingest.formats import MARKDOWN_KINDS, SHEET_KINDS
from ragvps.ingest.spans import Segment, refit, shorten, windows
from ragvps.records import Chunk, Document, input_room
from ragvps.text import sentences, strip_span

if TYPE_CHECKING:
    from tokenizers import Encoding

PATH_SHARE = 4  # a heading path takes at most this fraction (1/n) of the input; longer ones are shortened
MARGIN = 8  # chunks this close to the limit are re-counted from their final text
MAX_CHUNK_CHARS = 1 << 16  # only text the tokenizer sees as a few [UNK]s (no spaces) is longer: it is cut
BATCH_CHARS = 1 << 22  # documents tokenized together (in parallel) per call

_START = operator.itemgetter(0)


@dataclass(frozen=True)
class ChunkerConfig:
    mode: str  # structure | fixed | sentences
    size: int
    overlap: int
    max_tokens: int  # the embedder's input limit
    prefix: str = ""  # the embedder's document prefix, which also takes room

    def key(self) -> str:
        """Changes whenever a setting (or the algorithm) that shapes the chunks changes."""
        # 4: a table row up to the model's input stays whole (issue 51); 5: PDFs read by PDFium (issue 53)
        raw = json.dumps(asdict(self) | {"version": 5}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


def chunk_document(doc: Document, config: ChunkerConfig) -> list[Chunk]:
    """The chunks of one document."""
    return chunk_documents([doc], config)[0]


def chunk_documents(docs: Sequence[Document], config: ChunkerConfig) -> list[list[Chunk]]:
    """The chunks of each document; short documents are tokenized together in one parallel batch."""
    if config.mode not in ("structure", "fixed", "sentences"):
        raise ValueError(f"chunk mode {config.mode!r} is not one of: structure, fixed, sentences")
    out: list[list[Chunk]] = []
    room = input_room(config.max_tokens, config.prefix)
    i = 0
    while i < len(docs):
        batch: list[Document] = []
        chars = 0
        while i < len(docs) and len(docs[i].text) <= block_rules.SEGMENT_CHARS and (not batch or chars < BATCH_CHARS):
            batch.append(docs[i])
            chars += len(docs[i].text)
            i += 1
        if batch:
            encs = tokens.encode_texts([d.text for d in batch])
            titles = tokens.count_many([" ".join(d.title.split()) for d in batch])
            out += [_Chunker(d, config, room, e, t).run() for d, e, t in zip(batch, encs, titles, strict=True)]
        else:
            out.append(_Chunker(docs[i], config, room, None, None).run())
            i += 1
    texts = [c.text for chunks in out for c in chunks]
    llm = iter(tokens.count_llm_many(texts) if texts else [])
    return [[replace(c, llm_tokens=next(llm)) for c in chunks] for chunks in out]


# --- blocks: (start, end, path index, kind), tiling the document in order --------------------------------


class _Chunker:
    def __init__(self, doc: Document, config: ChunkerConfig, room: int, enc: Encoding | None, title: int | None):
        self.doc, self.config, self.text, self.room = doc, config, doc.text, room
        self.first = Segment(0, len(doc.text), enc) if enc is not None else None
        self.paths = _Paths(doc.title)
        self.title_tokens = title
        self.info: dict[int, tuple[str, str, int, int]] = {}  # path -> display, embed, tokens, budget
        self.counted: list[int] = []  # the tokens of paths 0, 1, ... (count_paths)
        self.pieces: list[Piece] = []
        self.group: list[tuple[int, int, int]] = []
        self.group_tokens = 0  # the group's tokens, summed as it grows (a group may hold hundreds of short lines)
        self.group_path = 0
        self.group_headings = True
        self.header: tuple[int, int, int] | None = None  # the last table's header row and rule: start, end, tokens
        self.section: tuple[int, int, int] | None = None  # its last section row (a sparse row such as a period)
        # piece start -> what its chunk repeats first: the header, and the section row its rows are under
        self.headed: dict[int, tuple[tuple[int, int, int], ...]] = {}
        # a PDF's page starts: a chunk ends at a page's end where it can, so that it cites the page it is from
        self.page_starts = {int(p[0]) for p in doc.metadata.get("pages") or []} if doc.kind == "pdf" else set()  # type: ignore[attr-defined]

    def path_info(self, p: int) -> tuple[str, str, int, int]:
        if p not in self.info:
            parts = self.paths.paths[p]
            display = " > ".join(parts)
            n = self.title_tokens if p == 0 and self.title_tokens is not None else self._path_tokens(p, display)
            embed = display
            cap = max(1, self.room // PATH_SHARE)
            if n > cap:
                embed, n = shorten(parts, cap)
            budget = min(self.config.size, self.room - n)
            if budget < 1:
                raise ValueError(f"the embedder's prefix {self.config.prefix!r} leaves no room for text")
            self.info[p] = (display, embed, n, budget)
        return self.info[p]

    def _path_tokens(self, p: int, display: str) -> int:
        return self.counted[p] if p < len(self.counted) else tokens.count(display)

    def count_paths(self) -> None:
        """The heading paths met so far counted in one call into the tokenizer: a call a path costs more than its
        few tokens (0.2 s of a 200-page manual's chunking, a heading path every few lines)."""
        fresh = [" > ".join(path) for path in self.paths.paths[len(self.counted) :]]
        if fresh:
            self.counted += tokens.count_many(fresh)

    def budget(self, p: int) -> int:
        return self.path_info(p)[3]

    def overlap(self, budget: int) -> int:
        return min(self.config.overlap, budget // 2)

    def segments(self, blocks: Iterator[Block] | list[Block]) -> Iterator[tuple[Segment, list[Block]]]:
        if self.first is not None:
            run = list(blocks)
            self.count_paths()
            yield self.first, run
            return
        run = []
        for block in blocks:
            if run and block[1] - run[0][0] > block_rules.SEGMENT_CHARS:
                self.count_paths()
                yield self._encode(run), run
                run = []
            run.append(block)
        if run:
            self.count_paths()
            yield self._encode(run), run

    def _encode(self, run: list[Block]) -> Segment:
        """The run's tokens, its parts tokenized in parallel (a long document's segment is on one core otherwise)."""
        a, b = run[0][0], run[-1][1]
        return Segment(a, b, tokens.encode_texts([self.text[a:b]])[0])

    def run(self) -> list[Chunk]:
        doc = self.doc
        if doc.kind in MARKDOWN_KINDS:
            blocks: Iterator[Block] | list[Block] = _markdown_blocks(doc, self.paths)
        elif doc.kind in SHEET_KINDS:
            blocks = _sheet_blocks(doc, self.paths)
        else:
            blocks = _plain_blocks(doc, self.paths)
        if self.config.mode == "fixed":
            self._fixed(self.segments(_whole(blocks)))
        else:
            for seg, run in self.segments(blocks):
                for a, b, p, kind in run:
                    self._block(seg, a, b, p, kind)
            self._flush()
        return self._chunks()

    # structure and sentences modes

    def _block(self, seg: Segment, a: int, b: int, p: int, kind: str) -> None:
        if a in self.page_starts:
            self._flush()
        if kind in ("table", "rows"):
            kind = self._table(seg, a, b, p, kind)
            if not kind:
                return
        i, j = seg.span(a, b)
        budget = self.budget(p)
        split = self.config.mode == "sentences" and kind in ("prose", "lines")
        if j - i <= budget and not split:
            return self._add(a, b, j - i, p, kind == "heading")
        if kind == "code":
            parts = _lines(self.text, a, b)
        elif kind == "lines":
            parts = [s for la, lb in _lines(self.text, a, b) for s in sentences(self.text, la, lb)]
        else:
            parts = sentences(self.text, a, b)
        for pa, pb in parts:
            pi, pj = seg.span(pa, pb)
            if pj - pi <= budget:
                self._add(pa, pb, pj - pi, p, kind == "heading")
            else:
                self._flush()
                self.pieces += windows(seg, self.text, pa, pb, pi, pj, budget, self.overlap(budget), p)

    def _table(self, seg: Segment, a: int, b: int, p: int, kind: str) -> str:
        """A Markdown table too long for one chunk, cut into groups of whole rows, each chunk after the first
        headed by the table's header row, so that no row is apart from what its columns mean. Returns "" when
        done, or the kind to chunk the block as instead (a table too small to cut, or without a usable header)."""
        text = self.text
        rows = _lines(text, a, b)
        if kind == "table":
            found = self._header(seg, a, b, p, rows)
            if found is None:
                return "lines"
            rows = found
        budget = self.budget(p)
        if budget > 4 * MARGIN:
            budget -= MARGIN  # row counts are exact: groups that stay clear of the limit need no recount
        if self.header is None or self.header[2] > budget // 2:  # no header, or one too long to repeat
            return "lines"
        header_n = self.header[2]
        room = budget - header_n
        start, n = (a, header_n) if kind == "table" else (-1, 0)
        lead = self.group_tokens
        if kind == "table" and self.group and self.group_path == p and lead <= budget // 4:
            start, n = self.group[0][0], n + lead  # short lines just above (a unit, a period) stay with the table
            self.group, self.group_headings, self.group_tokens = [], True, 0
        self._flush()
        headed = kind == "rows"
        end = self.header[1] if kind == "table" else a  # the first piece holds the header, even with no row after it
        width = text.count("|", rows[0][0], rows[0][1]) if rows else 0
        section = self.section if headed else None
        data = False  # the group holds a row that is not a section row
        hard = self.room - self.path_info(p)[2] - MARGIN  # what the model takes: a row up to this stays whole
        for ra, rb in rows:
            ri, rj = seg.span(ra, rb)
            rn = rj - ri
            is_section = _section_row(text, ra, rb, width)
            if not is_section and rn > room - (section[2] if section else 0) and header_n + rn <= hard:
                self._whole_row((start, end, n), (ra, rb, rn), p, headed, data, section, hard)
                start, headed, data = -1, True, False
                continue
            if start >= 0:
                cap = room - (section[2] if headed and section and section[0] < start else 0) if headed else budget
                if n + rn > cap or (is_section and data):
                    self._piece(start, end, n, p, headed, section)
                    start, headed, data = -1, True, False
            if is_section:
                section = (ra, rb, rn) if rn <= room // 3 else None
            if rn > room - (section[2] if section and not is_section else 0):  # a row longer than a chunk
                for piece in windows(seg, text, ra, rb, ri, rj, room, self.overlap(room), p):
                    self.pieces.append(piece)
                    self.headed[piece[0]] = (self.header,)
                continue
            if start < 0:
                start, n = ra, 0
            end, n, data = rb, n + rn, data or not is_section
        if start >= 0:
            self._piece(start, end, n, p, headed, section)
        self.section = section
        return ""

    def _header(
        self, seg: Segment, a: int, b: int, p: int, rows: list[tuple[int, int]]
    ) -> list[tuple[int, int]] | None:
        """A table's header row and rule kept for its later chunks, and the rows under them; None when the table has
        no usable header or fits one chunk whole (it is chunked as lines)."""
        text = self.text
        if len(rows) < 3 or set(text[rows[1][0] : rows[1][1]]) - set("|:- \t"):
            self.header = None
            return None
        hi, hj = seg.span(rows[0][0], rows[1][1])
        self.header = (rows[0][0], rows[1][1], hj - hi)
        i, j = seg.span(a, b)
        return None if j - i <= self.budget(p) else rows[2:]

    def _whole_row(
        self,
        group: tuple[int, int, int],
        row: tuple[int, int, int],
        p: int,
        headed: bool,
        data: bool,
        section: tuple[int, int, int] | None,
        hard: int,
    ) -> None:
        """A row longer than a chunk but not than the model's limit: whole, under its header, in a chunk of its own
        (after the rows gathered so far); the table's header (or a section row) alone so far is its chunk's head."""
        (start, end, n), (ra, rb, rn) = group, row
        if start >= 0 and (data or n + rn > hard):
            self._piece(start, end, n, p, headed, section)
            start = -1
        if start >= 0:
            self._piece(start, rb, n + rn, p, headed, section)
        else:
            self._piece(ra, rb, rn, p, True, section)

    def _piece(self, a: int, b: int, n: int, p: int, headed: bool, section: tuple[int, int, int] | None) -> None:
        self.pieces.append((a, b, n, p, True))
        if headed and self.header is not None:
            self.headed[a] = (self.header, section) if section is not None and section[0] < a else (self.header,)

    def _add(self, a: int, b: int, n: int, p: int, heading: bool) -> None:
        if self.group:
            fits = self.group_tokens + n <= self.budget(p)
            if self.group_headings:
                if not fits:
                    self._flush()
            elif heading or p != self.group_path or self.config.mode == "sentences" or not fits:
                self._flush()
        self.group.append((a, b, n))
        self.group_tokens += n
        self.group_path = p
        self.group_headings = self.group_headings and heading

    def _flush(self) -> None:
        if self.group:
            self.pieces.append((self.group[0][0], self.group[-1][1], self.group_tokens, self.group_path, True))
        self.group, self.group_tokens = [], 0
        self.group_headings = True

    # fixed mode: the plain sliding window over the whole document's tokens

    def _fixed(self, segs: Iterator[tuple[Segment, list[Block]]]) -> None:
        budget = self.budget(0)
        size, overlap = budget, min(self.config.overlap, budget - 1)
        step = size - overlap
        buf: list[tuple[int, int, bool]] = []  # pending tokens: start, end, inside a word
        pos, covered = 0, 0  # buf[pos] starts the next window; covered: buf[:covered] is in a window already
        for seg, _ in segs:
            buf += [(a + seg.base, b + seg.base, seg.inside_word(k)) for k, (a, b) in enumerate(seg.offs)]
            while len(buf) - pos > size:  # one token of look-ahead: a window's text runs up to the next token
                self._fixed_piece(buf, pos, pos + size)
                covered, pos = pos + size, pos + step
            buf, covered, pos = buf[pos:], covered - pos, 0
        if len(buf) > covered:
            self._fixed_piece(buf, 0, len(buf))

    def _fixed_piece(self, buf: list[tuple[int, int, bool]], i: int, j: int) -> None:
        a = buf[i][0] if i or self.pieces else strip_span(self.text, 0, buf[i][0])[0]
        end = buf[j][0] if j < len(buf) else len(self.text)
        b = strip_span(self.text, buf[j - 1][1] if j < len(buf) else 0, end)[1]
        self.pieces.append((a, b, j - i, 0, not buf[i][2]))

    # chunks: path, verification, metadata

    def _chunks(self) -> list[Chunk]:
        text, doc = self.text, self.doc
        pages = cast("list[list[int]]", doc.metadata.get("pages") or []) if doc.kind == "pdf" else []
        page_starts = [int(p[0]) for p in pages]
        chunks: list[Chunk] = []
        for a, b, n, p, exact in self._capped():
            display, embed, path_n, budget = self.path_info(p)
            lead, verify, lead_n = "", embed, path_n
            if a in self.headed:  # a table's rows after the first chunk: the header row leads the chunk
                spans = self.headed[a]
                lead = "".join(text[x:y] + "\n" for x, y, _ in spans)
                verify, lead_n = f"{embed}\n\n{lead}" if embed else lead, path_n + sum(k for _, _, k in spans)
            for ca, cb, cn in self._verified(a, b, n, verify, lead_n, budget, exact):
                meta: dict[str, Any] = {}
                if lead:
                    meta["table_header"] = [spans[0][0], spans[0][1]]
                    if len(spans) > 1:
                        meta["table_section"] = [spans[1][0], spans[1][1]]
                if embed != display:
                    meta["embed_heading_path"] = embed
                if pages:
                    lo, hi = bisect_right(page_starts, ca) - 1, bisect_right(page_starts, cb - 1) - 1
                    meta["pages"] = [pages[k][1] for k in range(max(lo, 0), hi + 1)]
                chunks.append(Chunk(doc.doc_id, len(chunks), display, lead + text[ca:cb], ca, cb, lead_n + cn, 0, meta))
        return chunks

    def _capped(self) -> Iterator[Piece]:
        """The pieces, those longer than MAX_CHUNK_CHARS cut (and then counted from their text)."""
        for piece in self.pieces:
            a, b, _, p, _ = piece
            if b - a <= MAX_CHUNK_CHARS:
                yield piece
                continue
            for pa, pb in _bounded(self.text, a, b, MAX_CHUNK_CHARS):
                pa, pb = strip_span(self.text, pa, pb)
                if pa < pb:
                    yield pa, pb, 0, p, False

    def _verified(
        self, a: int, b: int, n: int, embed: str, path_n: int, budget: int, exact: bool
    ) -> list[tuple[int, int, int]]:
        limit = self.room - path_n
        if exact and n <= limit - MARGIN:
            return [(a, b, n)]
        real = tokens.count(f"{embed}\n\n{self.text[a:b]}" if embed else self.text[a:b]) - path_n
        if real <= limit:
            return [(a, b, real)]
        return refit(self.text, a, b, limit, lambda s: tokens.count(f"{embed}\n\n{s}" if embed else s) - path_n)


def _section_row(text: str, a: int, b: int, width: int) -> bool:
    """A table row with at most a third of its cells filled (a sub-heading such as a new period, or a note): a
    group of rows ends before it, and later chunks of the rows under it repeat it after the header."""
    cells = text[a:b].strip().strip("|").split("|")
    return width > 3 and sum(1 for c in cells if c.strip()) <= max(1, (width - 1) // 3)


def _whole(blocks: Iterator[Block] | list[Block]) -> Iterator[Block]:
    """Blocks regrouped as bounded spans of the document, for the token stream of fixed mode."""
    for a, b, _, _ in blocks:
        yield a, b, 0, "prose"
