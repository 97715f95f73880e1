"""Sizing from the measured scale curve (bench/scale_bench.py at 10k, 100k and 1M chunks): disk, RAM for the
index, HNSW build time and query latency at N chunks, and whether the index fits in a machine's RAM.

Pure: the curve is a JSON file shipped in ragvps/data; between measured sizes a figure is interpolated on
log-log axes, beyond them it follows the last segment's exponent (and says it is an extrapolation).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ragvps.errors import UsageError

TYPES = ("vector", "halfvec", "bit")
GIB = 1024**3
# The index should fit in PostgreSQL's shared_buffers, a quarter of RAM as deploy/postgres/ragvps.conf sets
# it: at 1M chunks on the 4 GB settings, halfvec's 1.1 GB index (over shared_buffers' 1 GB) gave a vector leg
# p95 of 62 ms with every page in the OS cache, bit's 0.33 GB index 8.9 ms (bench/RESULTS.md, scale_bench).
SHARED_BUFFERS_SHARE = 0.25
# An HNSW build keeps its graph in index_memory (maintenance_work_mem) while it fits, about the index's own
# size (the 1M run: halfvec's 1.09 GiB index built in memory with 1.5 GB; the float32 index, ~1.9 GiB,
# outgrew 1.5 GB at ~73% of its rows); past that pgvector inserts the rest one by one.
BUILD_MEMORY_FACTOR = 1.2
SPILLED_ROWS_PER_S = 174  # measured then: the float32 build at 1M on 2 cores, after its graph outgrew 1.5 GB
OVERLAP_GOAL = 0.95
DEPTH = {"vector": "ef_search", "halfvec": "ef_search", "bit": "bit_rerank_depth"}  # what sets search depth


def load_curve() -> dict[str, Any]:
    text = resources.files("ragvps.data").joinpath("scale_curve.json").read_text(encoding="utf-8")
    return dict(json.loads(text))


def column_bytes(dims: int, vector_type: str) -> int:
    """One stored vector value: float32, half, or (bit) the halfvec the re-rank reads."""
    return {"vector": 4 * dims + 8}.get(vector_type, 2 * dims + 8)


def index_vector_bytes(dims: int, vector_type: str) -> int:
    """The vector part of one HNSW index entry: the value, or one bit per dimension for a bit index."""
    return math.ceil(dims / 8) + 8 if vector_type == "bit" else column_bytes(dims, vector_type)


def at(points: list[tuple[int, float]], n: int) -> tuple[float, bool]:
    """The figure at n on log-log axes through the measured points; True if n is outside them."""
    pts = sorted((x, y) for x, y in points if x > 0 and y > 0)
    if not pts:
        raise UsageError("the scale curve has no points for this figure")
    if len(pts) == 1:
        x, y = pts[0]
        return y * n / x, n != x
    lo, hi = (pts[0], pts[1]) if n <= pts[0][0] else (pts[-2], pts[-1])
    for a, b in zip(pts, pts[1:], strict=False):
        if a[0] <= n <= b[0]:
            lo, hi = a, b
    slope = math.log(hi[1] / lo[1]) / math.log(hi[0] / lo[0])
    return lo[1] * (n / lo[0]) ** slope, not pts[0][0] <= n <= pts[-1][0]


def exponent(points: list[tuple[int, float]]) -> float:
    """The least-squares slope of log(figure) on log(rows): the figure grows as N^slope."""
    pts = [(math.log(x), math.log(y)) for x, y in points if x > 0 and y > 0]
    if len(pts) < 2:
        return float("nan")
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


@dataclass(frozen=True)
class Prediction:
    vector_type: str
    chunks: int
    dims: int
    disk_bytes: int  # chunks (text, tsvector, GIN, BM25 statistics) + vectors + HNSW index
    index_bytes: int
    table_bytes: int  # the vector table
    build_s: float  # HNSW build on a 2-core box, the default index_workers
    hybrid_p50_ms: float
    hybrid_p95_ms: float
    extrapolated: bool
    build_memory_bytes: int  # index_memory for the build to keep its graph in memory (build_s assumes it)
    depth_setting: str  # ef_search, or bit_rerank_depth for bit
    depth: int | None  # the smallest measured depth with top-10 overlap >= OVERLAP_GOAL (None: none measured)
    depth_overlap: float  # that depth's overlap, or the deepest measured one's
    depth_rows: int  # the measured size these come from: the first >= chunks, else the largest


def _series(curve: dict[str, Any], *path: str) -> list[tuple[int, float]]:
    out = []
    for p in curve["points"]:
        value: Any = p
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            out.append((int(p["rows"]), float(value)))
    return out


def predict(curve: dict[str, Any], chunks: int, dims: int, vector_type: str) -> Prediction:
    """What `chunks` chunks of `dims` dimensions take with this vector type, from the curve."""
    if chunks < 1:
        raise UsageError(f"--chunks {chunks} must be at least 1")
    if vector_type not in TYPES:
        raise UsageError(f"vector type {vector_type!r} must be one of: {', '.join(TYPES)}")
    d0 = int(curve["dims"])
    index_row, e1 = at(_series(curve, "index_bytes", vector_type), chunks)
    table_row, _ = at(_series(curve, "table_bytes", vector_type), chunks)
    text_row, _ = at(_series(curve, "text_bytes"), chunks)
    # Per row, the graph part of the index and the row overhead of the table do not depend on dims.
    index = index_row + chunks * (index_vector_bytes(dims, vector_type) - index_vector_bytes(d0, vector_type))
    table = table_row + chunks * (column_bytes(dims, vector_type) - column_bytes(d0, vector_type))
    build, e2 = _figure(curve, chunks, ("build_s",), vector_type)
    p50, e3 = _figure(curve, chunks, ("hybrid_ms",), vector_type, "p50")
    p95, _ = _figure(curve, chunks, ("hybrid_ms",), vector_type, "p95")
    scale = dims / d0 if vector_type != "bit" else 1.0  # distance cost grows with dims; Hamming barely
    depth, overlap, rows = search_depth(curve, chunks, vector_type)
    return Prediction(
        vector_type,
        chunks,
        dims,
        int(text_row + table + index),
        int(index),
        int(table),
        build * scale,
        p50,
        p95,
        e1 or e2 or e3,
        int(index * BUILD_MEMORY_FACTOR),
        DEPTH[vector_type],
        depth,
        overlap,
        rows,
    )


def _figure(curve: dict[str, Any], n: int, head: tuple[str, ...], vector_type: str, *tail: str) -> tuple[float, bool]:
    """The figure at n; beyond this type's largest measured size but within halfvec's, grown from there as
    halfvec's grew (the float32 build was not finished at 1M: its figures there follow halfvec's)."""
    own = _series(curve, *head, vector_type, *tail)
    value, outside = at(own, n)
    ref = _series(curve, *head, "halfvec", *tail)
    last = max((x for x, _ in own), default=0)
    if n > last and ref and max(x for x, _ in ref) > last:
        value = at(own, last)[0] * at(ref, n)[0] / at(ref, last)[0]
    return value, outside


def search_depth(curve: dict[str, Any], chunks: int, vector_type: str) -> tuple[int | None, float, int]:
    """The smallest measured search depth reaching OVERLAP_GOAL at the first measured size >= chunks (else
    the largest size with overlaps), with its overlap and that size; (None, the deepest's overlap, size)
    when no measured depth reaches it."""
    measured = sorted(
        (int(p["rows"]), p["overlap"])
        for p in curve["points"]
        if any(k.startswith(f"{vector_type},") for k in p.get("overlap", {}))
    )
    if not measured:
        return None, float("nan"), 0
    rows, overlaps = next(((r, o) for r, o in measured if r >= chunks), measured[-1])
    depths = sorted((int(k.rsplit(" ", 1)[1]), v) for k, v in overlaps.items() if k.startswith(f"{vector_type},"))
    reached = [(d, v) for d, v in depths if v >= OVERLAP_GOAL]
    depth, overlap = reached[0] if reached else (None, depths[-1][1])
    return depth, float(overlap), rows


def ram_verdict(index_bytes: int, ram_bytes: int, vector_type: str, others: dict[str, int]) -> tuple[bool, str]:
    """Does the index fit in the RAM left for the cache, and what the other types would take."""
    budget = cache_budget(ram_bytes)
    fits = index_bytes <= budget
    alt = "; ".join(f"{t} would take {gib(b)}" for t, b in others.items() if t != vector_type)
    if fits:
        head = f"index {gib(index_bytes)} fits in {gib(ram_bytes)}: keep it"
    else:
        smaller = [t for t, b in others.items() if b <= budget and t != vector_type]
        advice = (
            f'switch to {smaller[0]} (vector_type = "{smaller[0]}", then `ragvps reindex`)'
            if smaller
            else "add RAM or split the corpus over a second server"
        )
        head = (
            f"index {gib(index_bytes)} does not fit in {gib(ram_bytes)} (its shared_buffers, a quarter of "
            f"RAM as deploy/postgres/ragvps.conf sets it, hold {gib(budget)}; at 1M chunks an index over them "
            f"answered the vector leg 7x slower (p95) than one within, with every page in the OS cache): {advice}"
        )
    return fits, head + (f"; {alt}" if alt else "")


def cache_budget(ram_bytes: int) -> int:
    """What of a machine's RAM the index may take to stay fast: PostgreSQL's shared_buffers."""
    return int(ram_bytes * SHARED_BUFFERS_SHARE)


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GB" if n >= 0.1 * GIB else f"{n / 1024**2:.0f} MB"


def parse_ram(text: str) -> int:
    """'4GB', '512MB', '4' (GB) -> bytes."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    factor = {"K": 1024, "M": 1024**2, "G": GIB, "T": 1024 * GIB}.get(t[-1:], GIB)
    try:
        value = float(t[:-1] if t[-1:] in "KMGT" else t)
    except ValueError:
        raise UsageError(f"--ram {text!r} is not a size: use e.g. 4GB or 512MB") from None
    if value <= 0:
        raise UsageError(f"--ram {text!r} must be more than zero")
    return int(value * factor)
