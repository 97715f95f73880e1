"""`ragvps plan`'s figures as text and JSON: the one-plan summary, the window diagram, readable numbers."""

from __future__ import annotations

from typing import Any

from ragvps.measure.vectors import MIB, RAW_SIZE_NOTE, VECTOR_TYPES, pgvector_bytes, raw_vector_bytes
from ragvps.measure.windows import WindowPlan


def summary(plan: WindowPlan, dims: int, bytes_per_dim: int = 4) -> dict[str, Any]:
    """The single-plan figures, as `ragvps plan --json` prints them."""
    return {
        "tokens": plan.tokens,
        "chunk_size": plan.size,
        "overlap": plan.overlap,
        "step": plan.step,
        "chunks": plan.chunks,
        "chunk_lengths": plan.lengths(),
        "last_chunk_length": plan.last_length,
        "processed_tokens": plan.processed_tokens,
        "repeated_tokens": plan.repeated_tokens,
        "overhead_pct": round(plan.overhead_pct, 2),
        "dims": dims,
        "bytes_per_dim": bytes_per_dim,
        "raw_vector_bytes": raw_vector_bytes(plan.chunks, dims, bytes_per_dim),
        "pgvector_bytes_per_vector": {t: pgvector_bytes(dims, t) for t in VECTOR_TYPES},
        "pgvector_column_bytes": {t: plan.chunks * pgvector_bytes(dims, t) for t in VECTOR_TYPES},
        "warnings": plan.warnings(),
        "note": RAW_SIZE_NOTE,
    }


def strip(plan: WindowPlan, rows: int = 4, width: int = 60) -> str:
    """A text diagram of the first windows: '=' tokens of one window only, 'x' shared with a neighbour."""
    wins = [w for _, w in zip(range(rows + 1), plan.windows(), strict=False)]
    if not wins:
        return "(no tokens, no windows)"
    shown = wins[:rows]
    span = shown[-1][1]

    def col(token: int) -> int:
        return round(token * width / span)

    labels = [f"#{i + 1} {a:,}-{b:,}" for i, (a, b) in enumerate(shown)]
    pad = max(map(len, labels)) + 2
    lines = [
        f"first {len(shown)} of {plan.chunks:,} windows, 1 char = {span / width:.4g} tokens; "
        "'=' in one window, 'x' shared with a neighbour"
    ]
    for i, (a, b) in enumerate(shown):
        cells = ["="] * max(1, col(b) - col(a))
        if i > 0 and wins[i - 1][1] > a:  # shared with the previous window
            for c in range(max(1, col(wins[i - 1][1]) - col(a))):
                cells[min(c, len(cells) - 1)] = "x"
        if i + 1 < len(wins) and wins[i + 1][0] < b:  # shared with the next window
            for c in range(max(1, col(b) - col(wins[i + 1][0]))):
                cells[max(len(cells) - 1 - c, 0)] = "x"
        lines.append(labels[i].ljust(pad) + " " * col(a) + "".join(cells))
    return "\n".join(lines)


def millions(n: float) -> str:
    """40000000 -> '40 M', 200000 -> '0.2 M'."""
    return f"{n / 1e6:,.4g} M"


def human_bytes(n: int) -> str:
    """6144 -> '6,144 bytes (6 KiB)'."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n:,} bytes ({n / scale:,.4g} {unit})"
    return f"{n:,} bytes"
