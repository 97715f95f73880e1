"""Windows over a continuous token stream: how many chunks a size and an overlap make, and what they repeat."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from ragvps.errors import UsageError

COMPARE_OVERLAPS = ("0", "10%", "25%", "50%")


@dataclass(frozen=True)
class WindowPlan:
    """A stream of `tokens` cut into windows of `size` starting every `size - overlap` tokens until
    the stream is covered; the last window may be shorter."""

    tokens: int
    size: int
    overlap: int = 0

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise UsageError(f"tokens {self.tokens} must be zero or more", settings=("tokens",))
        if self.size < 1:
            raise UsageError(f"chunk_size {self.size} must be at least 1 token", settings=("chunk_size",))
        if self.overlap < 0:
            raise UsageError(f"overlap {self.overlap} must be zero or more", settings=("overlap",))
        if self.overlap >= self.size:
            raise UsageError(
                f"overlap {self.overlap} must be smaller than chunk_size {self.size}; "
                "a third of the size or less is usual",
                settings=("overlap", "chunk_size"),
            )

    @property
    def step(self) -> int:
        return self.size - self.overlap

    @property
    def chunks(self) -> int:
        if self.tokens == 0:
            return 0
        return 1 + max(0, math.ceil((self.tokens - self.size) / self.step))

    @property
    def last_length(self) -> int:
        """Length of the last window (the only one that can be shorter than `size`)."""
        return self.tokens - (self.chunks - 1) * self.step if self.chunks else 0

    @property
    def processed_tokens(self) -> int:
        """Tokens the embedder reads: the sum of the window lengths."""
        return (self.chunks - 1) * self.size + self.last_length if self.chunks else 0

    @property
    def repeated_tokens(self) -> int:
        return self.processed_tokens - self.tokens

    @property
    def overhead_pct(self) -> float:
        return 100 * self.repeated_tokens / self.tokens if self.tokens else 0.0

    def windows(self) -> Iterator[tuple[int, int]]:
        """The windows as [start, end) token offsets, lazily (a large stream has many)."""
        for i in range(self.chunks):
            start = i * self.step
            yield start, min(start + self.size, self.tokens)

    def lengths(self, limit: int = 20) -> list[int] | dict[str, list[int]]:
        """Every window length, or the first and last three when there are more than `limit`."""
        if self.chunks <= limit:
            return [end - start for start, end in self.windows()]
        return {"first": [self.size] * 3, "last": [self.size, self.size, self.last_length]}

    def warnings(self) -> list[str]:
        if 3 * self.overlap > self.size:
            return [
                f"overlap {self.overlap} is above a third of the chunk size {self.size}: that needs a reason "
                f"(it repeats {self.overhead_pct:.0f}% of the tokens); 10-20% is usual"
            ]
        return []


def parse_overlap(text: str, size: int) -> int:
    """An overlap as tokens ("200") or as a percentage of the chunk size ("12%", rounded half up)."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            pct = Decimal(raw[:-1].strip())
            if not 0 <= pct < 100:
                raise UsageError(f"overlap {text} must be a percentage from 0% to below 100%", settings=("overlap",))
            return int((pct * size / 100).to_integral_value(rounding=ROUND_HALF_UP))
        return int(raw)
    except (InvalidOperation, ValueError):
        hint = "a token count (200) or a percentage of the chunk size (12%)"
        raise UsageError(f"overlap {text!r} is not {hint}", settings=("overlap",)) from None


def check_input_limit(size: int, limit: int, model: str) -> None:
    """A window longer than the embedder reads would be cut off silently; refuse it."""
    if size > limit:
        raise UsageError(
            f"chunk_size {size} is above what {model} reads ({limit} tokens once [CLS]/[SEP] and its "
            f"document prefix are counted): use chunk_size {limit} or less",
            settings=("chunk_size",),
        )


def compare_overlaps(tokens: int, size: int, overlaps: Sequence[str] = COMPARE_OVERLAPS) -> list[WindowPlan]:
    """One plan per overlap (tokens or percentages of the size), in the order given, without repeats."""
    plans: list[WindowPlan] = []
    for text in overlaps:
        plan = WindowPlan(tokens, size, parse_overlap(text, size))
        if plan not in plans:
            plans.append(plan)
    return plans
