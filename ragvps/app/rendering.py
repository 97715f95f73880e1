"""The one JSON rendering of what the App returns (`jsonable`), shared by `--json`, HTTP and MCP; light to import, so
a command that prints JSON loads no record it does not return."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, cast


class ToJson(Protocol):
    def to_json(self) -> Mapping[str, object]: ...


def json_object(obj: object) -> dict[str, object]:
    """A record's JSON: `jsonable` of a dataclass or a mapping, which is always an object."""
    out = jsonable(obj)
    if not isinstance(out, dict):
        raise TypeError(f"{type(obj).__name__} is not rendered as a JSON object")
    return out


def jsonable(obj: object) -> object:
    """Dataclasses (through their `to_json()` where they have one), tuples, sets, paths and numpy values as
    plain JSON values; NaN and infinities as null. The one JSON rendering of what the App returns. It runs on
    the server's event loop for every response: the common types are tried first, and `to_json` is looked up
    on the type (an isinstance check against a Protocol costs several times more)."""
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if getattr(type(obj), "to_json", None) is not None:
        return jsonable(cast(ToJson, obj).to_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and getattr(obj, "ndim", 0) == 0:  # numpy scalars
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # numpy arrays
        return jsonable(obj.tolist())
    return str(obj)
