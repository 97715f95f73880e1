"""Filters on the source path and on document or chunk metadata, as one composed SQL condition."""

from __future__ import annotations

from dataclasses import dataclass, field

from psycopg import sql
from psycopg.types.json import Jsonb

from ragvps.db.sql import q


@dataclass(frozen=True)
class Filters:
    """Keep only chunks whose source path starts with a prefix and whose metadata contains these pairs."""

    path_prefix: str = ""
    metadata: dict[str, object] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.path_prefix or self.metadata)

    def params(self) -> dict[str, object]:
        return {"path_prefix": self.path_prefix, "metadata": Jsonb(self.metadata)}

    def condition(self) -> sql.Composable:
        """The SQL condition over chunks `c` and documents `d` for the filters in use."""
        parts = [
            sql.SQL(q(name))
            for name, used in (("filter_path_prefix", self.path_prefix), ("filter_metadata", self.metadata))
            if used
        ]
        return sql.SQL(" AND ").join(parts) if parts else sql.SQL("true")
