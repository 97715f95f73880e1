"""Between HTTP/MCP values and the app's: requests in, JSON-ready results out."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, cast

from ragvps.errors import UsageError
from ragvps.retrieve.filters import Filters
from ragvps.retrieve.search import MODES, Mode, check_query
from ragvps.serve.limits import check_k, check_strings


def jsonable(obj: Any) -> Any:
    """Dataclasses, tuples, paths and numpy scalars as plain JSON values (the same fields `--json` prints)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return jsonable(obj.item())
    if hasattr(obj, "tolist"):  # numpy arrays
        return jsonable(obj.tolist())
    return str(obj)


def filters_of(path_prefix: str, meta: dict[str, Any]) -> Filters:
    return Filters(check_strings(path_prefix, "path_prefix"), check_strings(meta, "meta"))


def search_request(query: str, k: int | None, mode: str, path_prefix: str, meta: dict[str, Any],
                   max_k: int) -> Any:
    from ragvps.app import SearchRequest

    return SearchRequest(check_query(query), check_k(k, max_k), mode_of(mode), filters_of(path_prefix, meta))


def ask_request(question: str, k: int | None, mode: str, path_prefix: str, meta: dict[str, Any], max_k: int,
                use_cache: bool = True) -> Any:
    from ragvps.app import AskRequest

    return AskRequest(check_query(question), k=check_k(k, max_k), mode=mode_of(mode),
                      filters=filters_of(path_prefix, meta), use_cache=use_cache)


def mode_of(mode: str) -> Mode:
    if mode not in MODES:
        raise UsageError(f"mode {mode!r} is not one of: {', '.join(MODES)}")
    return cast(Mode, mode)


def hits_out(hits: Any) -> list[dict[str, Any]]:
    return [jsonable(h) for h in hits]
