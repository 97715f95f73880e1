"""Job ids: each names its knowledge base by catalog id, so `GET /jobs/{id}` finds the schema without a name.

Uploads (app/documents.py) and syncs (app/sources.py) make them; a module of its own so that a command which only
lists sources (`ragvps stats`) does not load the upload and ingest machinery.
"""

from __future__ import annotations

import re
import secrets
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ragvps.app.core import App

JOB_ID = re.compile(r"j([0-9]+)-([0-9a-f]{16})")


def new_job_id(app: App) -> str:
    """A new job's id in the knowledge base `app` is open on."""
    assert app.kb is not None
    return f"j{app.kb.id}-{secrets.token_hex(8)}"


def job_kb(job: str) -> int | None:
    """The catalog id of the knowledge base a job id names, or None for an id that is not a job's."""
    match = JOB_ID.fullmatch(job)
    return int(match.group(1)) if match else None
