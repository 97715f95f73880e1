"""The search modes, by name: a leaf, so that an interface's help text can list them without loading a driver."""

from __future__ import annotations

from typing import Literal

Mode = Literal["hybrid", "vector", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "vector", "keyword")
