"""Keep the database in line with a folder as it changes: every batch of file events (debounced) runs the
incremental ingest again, which re-reads only changed files, deletes documents whose file is gone, and
embeds nothing whose chunk text is unchanged (a file moved to another folder finds its vectors in the cache).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import watchfiles

from ragvps.errors import UsageError

if TYPE_CHECKING:
    from ragvps.ingest.chunking import IngestReport

log = logging.getLogger(__name__)

DEBOUNCE_MS = 1600  # events within this window are one batch (an editor's save, a copied folder)


def watch(
    root: Path,
    ingest: Callable[[], IngestReport],
    on_report: Callable[[IngestReport, int], None],
    stop: threading.Event | None = None,
    debounce_ms: int = DEBOUNCE_MS,
    polling: bool | None = None,
) -> int:
    """Ingest `root` once, then again after each batch of changes under it, until `stop` is set (or Ctrl-C).
    Hidden files and folders (the data directory among them) are ignored, as ingest ignores them. Returns
    the number of ingests after the first."""
    root = root.resolve()
    if not root.is_dir():
        raise UsageError(f"{root} is not a folder: `ragvps watch` keeps a folder in sync (give its path)")

    def visible(_change: watchfiles.Change, path: str) -> bool:
        try:
            parts = Path(path).relative_to(root).parts
        except ValueError:
            return False
        return not any(part.startswith(".") for part in parts)

    on_report(ingest(), 0)
    runs = 0
    for changes in watchfiles.watch(
        root, watch_filter=visible, debounce=debounce_ms, stop_event=stop, raise_interrupt=False, force_polling=polling
    ):
        log.info("%d changes under %s", len(changes), root)
        runs += 1
        on_report(ingest(), len(changes))
    return runs
