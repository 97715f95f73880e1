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
# What a small box needs beside the index: the OS, PostgreSQL's own working memory, the ragvps server and
# the local embedder (measured ~0.5 GB peak). The rest is the cache the index should live in.
RESERVE_BYTES = int(1.5 * GIB)


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
    build, e2 = at(_series(curve, "build_s", vector_type), chunks)
    p50, e3 = at(_series(curve, "hybrid_ms", vector_type, "p50"), chunks)
    p95, _ = at(_series(curve, "hybrid_ms", vector_type, "p95"), chunks)
    scale = dims / d0 if vector_type != "bit" else 1.0  # distance cost grows with dims; Hamming barely
    return Prediction(vector_type, chunks, dims, int(text_row + table + index), int(index), int(table),
                      build * scale, p50, p95, e1 or e2 or e3)


def ram_verdict(index_bytes: int, ram_bytes: int, vector_type: str, others: dict[str, int]) -> tuple[bool, str]:
    """Does the index fit in the RAM left for the cache, and what the other types would take."""
    budget = max(0, ram_bytes - RESERVE_BYTES)
    fits = index_bytes <= budget
    alt = "; ".join(f"{t} would take {gib(b)}" for t, b in others.items() if t != vector_type)
    if fits:
        head = f"index {gib(index_bytes)} fits in {gib(ram_bytes)}: keep it"
    else:
        smaller = [t for t, b in others.items() if b <= budget and t != vector_type]
        advice = (f"switch to {smaller[0]} (vector_type = \"{smaller[0]}\", then `ragvps reindex`)" if smaller
                  else "add RAM or split the corpus over a second server")
        head = (f"index {gib(index_bytes)} does not fit in {gib(ram_bytes)} (about {gib(budget)} is left for the "
                f"cache once the OS, PostgreSQL and the embedder have theirs): {advice}")
    return fits, head + (f"; {alt}" if alt else "")


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
