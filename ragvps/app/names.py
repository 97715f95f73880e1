"""The names an option takes, from their registries, for an interface's help text ("hybrid | vector |
keyword"); light to import, so `ragvps --help` loads no driver."""

from __future__ import annotations

from typing import Literal

from ragvps import backends
from ragvps.retrieve.modes import MODES


def choices(kind: Literal["mode", "embedder", "generator", "reranker"]) -> str:
    names = {
        "mode": MODES,
        "embedder": tuple(backends.EMBEDDERS),
        "generator": tuple(backends.GENERATORS),
        "reranker": tuple(backends.RERANKERS),
    }[kind]
    return " | ".join(names)
