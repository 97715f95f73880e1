"""`ragvps plan`'s use cases without a database or a model: the window, compare and budget arithmetic, and the
models it knows. The measurement of a folder is App.plan_measure. The CLI renders what these return."""

from __future__ import annotations

from ragvps.config import Settings
from ragvps.embed.models import KNOWN_MODELS, model_spec
from ragvps.errors import UsageError
from ragvps.measure import sizing  # `plan --chunks`: predictions from the measured scale curve
from ragvps.measure.planner import (
    BYTES_PER_DIM,
    COMPARE_OVERLAPS,
    PER_100K,
    RAW_SIZE_NOTE,
    VECTOR_TYPES,
    Budget,
    WindowPlan,
    check_input_limit,
    common_models,
    compare_overlaps,
    human_bytes,
    mib,
    millions,
    parse_overlap,
    pgvector_bytes,
    raw_vector_bytes,
    strip,
    summary,
)
from ragvps.records import ModelSpec

__all__ = [
    "BYTES_PER_DIM",
    "COMPARE_OVERLAPS",
    "PER_100K",
    "RAW_SIZE_NOTE",
    "VECTOR_TYPES",
    "Budget",
    "WindowPlan",
    "check_limit",
    "common_models",
    "compare_overlaps",
    "default_dims",
    "human_bytes",
    "known_model",
    "mib",
    "millions",
    "parse_overlap",
    "pgvector_bytes",
    "raw_vector_bytes",
    "sizing",
    "strip",
    "summary",
]


def default_dims() -> int:
    """The dimensions of the default embedder's model, what a plan without --dims or --model sizes."""
    spec = model_spec(Settings().embed.model_name)
    assert spec is not None
    return spec.dims


def known_model(name: str) -> ModelSpec:
    spec = model_spec(name)
    if spec is None:
        known = ", ".join(KNOWN_MODELS)
        raise UsageError(f"--model {name!r} is not a model ragvps knows; use one of {known}, or give --dims")
    return spec


def check_limit(size: int, spec: ModelSpec) -> None:
    """Refuse a chunk size above what the model reads."""
    check_input_limit(size, spec.input_room, spec.name)
