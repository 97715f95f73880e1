"""One JSON rendering for every report: dataclasses, counters, paths and arrays become plain JSON."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any


def plain(value: Any) -> Any:
    """A report as plain data: dataclasses by their fields (recursively), dict keys as strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Counter):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "tolist"):  # numpy
        return value.tolist()
    return value


def as_json(value: Any) -> str:
    return json.dumps(plain(value), indent=2, ensure_ascii=False)
