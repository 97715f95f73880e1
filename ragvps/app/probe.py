"""The probe a backup carries when its knowledge base has no gold questions: the first sentence of a sample of its
own chunks, each with its exact top-10 at backup time. `restore-check` asks the same of the restored copy."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ragvps.db import eval_record, store
from ragvps.db.bundle_export import exact_top, probe_chunks
from ragvps.errors import RagvpsError
from ragvps.text import sentences

if TYPE_CHECKING:
    from ragvps.app.core import App

PROBE_SAMPLE = 20
PROBE_K = 10


def first_sentence(text: str) -> str:
    spans = sentences(text, 0, len(text))
    a, b = spans[0] if spans else (0, len(text))
    return text[a:b][:500]


def make_probe(app: App, warn: Callable[[str], None]) -> dict[str, object] | None:
    """The probe for a knowledge base without gold questions; None when it has gold, is empty, or its model
    cannot embed here (a warning says so: the restore-check then compares counts only)."""
    with app.connection() as conn:
        gold, _ = eval_record.recorded(conn)
        eset = store.active_set(conn)
        sample = probe_chunks(conn, PROBE_SAMPLE) if eset is not None and not gold else []
    if not sample or eset is None:
        return None
    texts = [first_sentence(text) for _, text in sample]
    try:
        vectors = app.embed_queries(texts)
    except RagvpsError as exc:
        warn(f"no probe in this backup ({exc}); restore-check will compare counts only")
        return None
    with app.connection() as conn:
        tops = [exact_top(conn, eset, vector, PROBE_K) for vector in vectors]
    return {
        "model": eset.model,
        "k": PROBE_K,
        "queries": [
            {"chunk": chunk_id, "text": text, "top": [i for i, _ in top], "distances": [d for _, d in top]}
            for (chunk_id, _), text, top in zip(sample, texts, tops, strict=True)
        ],
    }


def run_probe(app: App, probe: dict[str, object]) -> list[tuple[str, list[int], list[int], float]]:
    """Each probe query's (text, recorded top, top now, largest distance difference)."""
    queries = probe.get("queries")
    k = probe.get("k")
    if not isinstance(queries, list) or not isinstance(k, int):
        return []
    texts = [str(q["text"]) for q in queries]
    vectors = app.embed_queries(texts)
    out = []
    with app.connection() as conn:
        eset = store.active_set(conn)
        for q, vector in zip(queries, vectors, strict=True):
            now = exact_top(conn, eset, vector, k) if eset is not None else []
            diff = max((abs(a - b) for a, (_, b) in zip(q["distances"], now, strict=False)), default=0.0)
            out.append((str(q["text"]), list(q["top"]), [i for i, _ in now], float(diff)))
    return out
