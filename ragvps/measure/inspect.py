"""Index check (HNSW top-k against exact top-k) and sizes (tables, indexes, RAM) of the database."""

from __future__ import annotations

import logging
import random
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import psutil
import psycopg
from psycopg import sql

from ragvps.config import Settings
from ragvps.db import queue
from ragvps.db.sql import compose, queries
from ragvps.db.store import EmbeddingSet, as_param
from ragvps.generate import cache as answer_cache
from ragvps.measure import sizing
from ragvps.measure.vectors import raw_vector_bytes

log = logging.getLogger(__name__)
T = TypeVar("T")

EF_LADDER = (40, 64, 100, 200, 400, 800, 1000)  # pgvector accepts hnsw.ef_search up to 1000
REBUILD_FACTOR = 2  # a rebuild writes the new table and index beside the old ones


def _q(name: str, **parts: sql.Composable) -> sql.Composed:
    return sql.SQL(queries("inspect.sql")[name]).format(**parts)


def nearest(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    vector: np.ndarray,
    k: int,
    *,
    exact: bool,
    ef_search: int = 40,
    explain: bool = False,
) -> list[Any]:
    """Top-k chunk ids by cosine distance, through the HNSW index or by an exact scan (or the plan).

    The exact pass turns index scans off and is never prepared: psycopg prepares a statement after
    5 executions and a prepared plan would ignore the setting, silently comparing HNSW with itself.
    """
    if exact or eset.vector_type != "bit":
        query = _q("nearest", table=eset.table)
    else:  # a bit index: its ef_search is also the re-rank depth, as in the search's vector leg
        ef_search = max(ef_search, k)
        query = compose(
            "vector_search_bit",
            table=eset.table,
            dims=sql.Literal(eset.dims),
            candidates=sql.Literal(k),
            depth=sql.Literal(ef_search),
        )
    if explain:
        query = sql.SQL("EXPLAIN ") + query
    with conn.transaction():
        if exact:
            conn.execute("SET LOCAL enable_indexscan = off; SET LOCAL enable_seqscan = on")
        else:  # small tables would otherwise skip the index
            conn.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = on")
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef_search),))
        rows = conn.execute(query, {"embedding": as_param(eset, vector), "k": k}, prepare=False).fetchall()
        # Inside a caller's open transaction this block is a savepoint, whose release keeps SET LOCAL: undo it.
        conn.execute("RESET enable_indexscan; RESET enable_seqscan")
    return [r[0] for r in rows]


@dataclass
class IndexCheck:
    index: str | None  # None: no HNSW index, every search is exact
    rows: int
    sample: int
    source: str  # "chunks" or the question file
    k: int
    current_ef_search: int
    target: float
    overlap: dict[int, float]  # ef_search -> mean |HNSW top-k ∩ exact top-k| / k
    ef_search_for_target: int | None
    warnings: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def at_current(self) -> float:
        return self.overlap[self.current_ef_search]


def exact_only(eset: EmbeddingSet, rows: int, min_rows: int, k: int, current: int, target: float) -> IndexCheck:
    """The answer when no HNSW index exists: every search is exact, so the overlap is 1.0 by construction."""
    return IndexCheck(
        None,
        rows,
        0,
        "none",
        k,
        current,
        target,
        {current: 1.0},
        None,
        note=(
            f"no HNSW index: {rows:,} chunks is below index_min_rows={min_rows:,}, so every search is exact "
            f"(overlap 1.0 by construction; no ef_search to tune). Lower index_min_rows and ingest again to build one."
        ),
    )


def overlap(found: Sequence[Any], truth: Sequence[Any]) -> float:
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


def ladder(current: int) -> list[int]:
    return sorted(set(EF_LADDER) | {current})


def check_index(
    conn: psycopg.Connection,
    eset: EmbeddingSet,
    vectors: np.ndarray,
    exclude: Sequence[Any | None],
    k: int,
    current: int,
    target: float,
    source: str,
) -> IndexCheck:
    """Overlap of HNSW and exact top-k at the current ef_search, and the smallest tried ef_search reaching target.

    `exclude[i]` is the chunk that vector i was taken from (left out of both lists), or None.
    """

    def top(vec: np.ndarray, skip: Any | None, **how: Any) -> list[Any]:
        ids = nearest(conn, eset, vec, k + (skip is not None), **how)
        return [i for i in ids if i != skip][:k]

    exact = [top(v, s, exact=True) for v, s in zip(vectors, exclude, strict=True)]
    results: dict[int, float] = {}
    reached = None
    for ef in ladder(current):
        if reached is not None and ef > current:
            break
        found = [top(v, s, exact=False, ef_search=ef) for v, s in zip(vectors, exclude, strict=True)]
        results[ef] = sum(overlap(f, e) for f, e in zip(found, exact, strict=True)) / len(vectors)
        if reached is None and results[ef] >= target:
            reached = ef
    rows = int(conn.execute(_q("counts", table=eset.table)).fetchone()[3])  # type: ignore[index]
    return IndexCheck(eset.index_name, rows, len(vectors), source, k, current, target, results, reached)


def sample_questions(questions: Sequence[T], n: int) -> list[T]:
    """Up to n of the questions, the same ones on every run."""
    return random.Random(0).sample(list(questions), min(n, len(questions)))


def sample_vectors(conn: psycopg.Connection, eset: EmbeddingSet, n: int) -> tuple[np.ndarray, list[int]]:
    rows = conn.execute(_q("sample_vectors", table=eset.table), {"n": n}).fetchall()
    vectors = np.array(
        [np.asarray(r[1].to_list() if hasattr(r[1], "to_list") else r[1], dtype=np.float32) for r in rows],
        dtype=np.float32,
    )
    return vectors, [r[0] for r in rows]


# Sizes and memory.


def meminfo(path: Path = Path("/proc/meminfo")) -> tuple[int | None, int | None, str]:
    """(total, available) RAM in bytes, and where the figures came from."""
    try:
        values = {}
        for line in path.read_text().splitlines():
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0]) * 1024
        return values.get("MemTotal"), values.get("MemAvailable"), str(path)
    except (OSError, ValueError, IndexError):
        pass
    try:
        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available), "psutil"
    except Exception:  # psutil missing or unsupported here: the figures stay unknown
        return None, None, "unknown"


def _relation(conn: psycopg.Connection, table: str) -> dict[str, Any]:
    total, heap, toast, indexes = conn.execute(queries("inspect.sql")["relation_sizes"], {"table": table}).fetchone()  # type: ignore[misc]
    each = {
        name: {"method": method, "bytes": size}
        for name, method, size in conn.execute(queries("inspect.sql")["index_sizes"], {"table": table})
    }
    return {"total_bytes": total, "heap_bytes": heap, "toast_bytes": toast, "indexes_bytes": indexes, "indexes": each}


@dataclass
class StatsReport:
    """Everything `ragvps stats` shows; `warnings` says what to act on."""

    rows: dict[str, Any]
    embedding_set: dict[str, Any]
    tables: dict[str, Any]
    vector_index: dict[str, Any]
    vectors: dict[str, Any]
    memory: dict[str, Any]
    postgres: dict[str, Any]
    disk: dict[str, Any]
    embedder: dict[str, Any]
    answer_cache: dict[str, Any]  # entries, hits, tokens_saved
    queue: dict[str, Any] = field(default_factory=dict)  # the embedding queue: pending, claimed, done, per worker
    ram: dict[str, Any] = field(default_factory=dict)  # does the index fit in RAM; the other types, predicted
    refusal: dict[str, Any] = field(default_factory=dict)  # answer_min_evidence in force, and where it came from
    fusion: dict[str, Any] = field(default_factory=dict)  # the fusion in force, and where it came from
    warnings: list[str] = field(default_factory=list)


def stats(conn: psycopg.Connection, eset: EmbeddingSet, settings: Settings) -> StatsReport:
    """Everything `ragvps stats` shows, read in one go."""
    documents, chunks, roots, vectors = conn.execute(_q("counts", table=eset.table)).fetchone()  # type: ignore[misc]
    tables = {name: _relation(conn, name) for name in ("documents", "chunks", "chunk_terms", eset.table_name)}
    shared, shared_b, maint, maint_b = conn.execute(queries("inspect.sql")["memory_settings"]).fetchone()  # type: ignore[misc]
    vec = tables[eset.table_name]
    index = vec["indexes"].get(eset.index_name)
    total, available, ram_source = meminfo()
    rebuild = REBUILD_FACTOR * (tables["chunks"]["total_bytes"] + vec["total_bytes"])
    db = settings.database
    free = shutil.disk_usage(db.pg_dir).free if not db.url and db.pg_dir.exists() else None
    embedder = settings.embed.backend
    result: dict[str, Any] = {
        "rows": {"documents": documents, "chunks": chunks, "vectors": vectors, "roots": roots},
        "embedding_set": {
            "model": eset.model,
            "dims": eset.dims,
            "vector_type": eset.vector_type,
            "table": eset.table_name,
        },
        "tables": tables,
        "vector_index": {
            "name": eset.index_name,
            "bytes": index["bytes"] if index else None,
            "exists": index is not None,
        },
        "vectors": {
            "plan_raw_bytes": raw_vector_bytes(vectors, eset.dims, 2 if eset.vector_type == "halfvec" else 4),
            "measured_table_bytes": vec["total_bytes"],
            "measured_heap_bytes": vec["heap_bytes"],
        },
        "memory": {"ram_total_bytes": total, "ram_available_bytes": available, "source": ram_source},
        "postgres": {
            "shared_buffers": shared,
            "shared_buffers_bytes": shared_b,
            "maintenance_work_mem": maint,
            "maintenance_work_mem_bytes": maint_b,
        },
        "disk": {
            "rebuild_bytes": rebuild,
            "free_bytes": free,
            "note": f"a rebuild writes beside the old data: about {REBUILD_FACTOR}x chunks + vectors",
        },
        "embedder": {
            "kind": settings.embed.kind,
            "model": settings.embed.model_name,
            "memory_bytes": embedder.memory_bytes,
            "note": embedder.memory_note,
        },
        "answer_cache": answer_cache.stats(conn),
    }

    result["queue"] = asdict(queue.counts(conn, eset, settings.embed.worker_lease))
    result["ram"] = ram_verdict(eset, chunks, index["bytes"] if index else None, total)
    result["warnings"] = stats_warnings(result)
    return StatsReport(**result)


def ram_verdict(eset: EmbeddingSet, chunks: int, index_bytes: int | None, ram: int | None) -> dict[str, Any]:
    """The index beside the machine's RAM, and what the other vector types would take (from the scale curve)."""
    if index_bytes is None or ram is None:
        return {
            "fits": None,
            "verdict": "no HNSW index: every search is exact" if index_bytes is None else "RAM unknown",
            "others": {},
        }
    try:
        curve = sizing.load_curve()
    except OSError:  # a broken install: the measured index alone
        fits, verdict = sizing.ram_verdict(index_bytes, ram, eset.vector_type, {})
        return {"fits": fits, "verdict": verdict, "index_bytes": index_bytes, "ram_bytes": ram, "others": {}}
    others = {t: sizing.predict(curve, max(chunks, 1), eset.dims, t).index_bytes for t in sizing.TYPES}
    others[eset.vector_type] = index_bytes
    fits, verdict = sizing.ram_verdict(index_bytes, ram, eset.vector_type, others)
    return {
        "fits": fits,
        "verdict": verdict,
        "index_bytes": index_bytes,
        "ram_bytes": ram,
        "others": {t: b for t, b in others.items() if t != eset.vector_type},
        "measured": curve["measured"],
    }


def stats_warnings(s: dict[str, Any]) -> list[str]:
    """What a person should act on, from the figures alone (pure)."""
    out = []
    index, available = s["vector_index"]["bytes"], s["memory"]["ram_available_bytes"]
    if index is not None and available is not None and index > available:
        out.append(
            f"the vector index ({mib(index)}) does not fit in available RAM ({mib(available)}): "
            'queries become disk seeks; use halfvec (vector_type = "halfvec"), fewer chunks, or more RAM'
        )
    if index is not None and index > s["postgres"]["maintenance_work_mem_bytes"]:
        out.append(
            f"the vector index ({mib(index)}) is larger than maintenance_work_mem "
            f"({s['postgres']['maintenance_work_mem']}): a rebuild spills out of memory and is much slower; "
            "raise maintenance_work_mem for `ragvps reindex`"
        )
    free, need = s["disk"]["free_bytes"], s["disk"]["rebuild_bytes"]
    if free is not None and free < need:
        out.append(f"only {mib(free)} of disk is free but a rebuild needs about {mib(need)}")
    return out


def mib(n: int) -> str:
    """A size for people: bytes, KiB, MiB or GiB."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} bytes"


def as_dict(check: IndexCheck) -> dict[str, Any]:
    d = asdict(check)
    d["overlap"] = {str(ef): v for ef, v in check.overlap.items()}
    d["overlap_at_current"] = check.at_current
    return d
