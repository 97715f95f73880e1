"""Stopping a job between its steps: the upload jobs' batches (ingest/jobs.py) and a sync's items
(ingest/sync_job.py) are stopped by a progress callback that raises Cancelled where `stops_at` allows it."""

from __future__ import annotations


class Cancelled(Exception):
    """The job was cancelled (or its worker is stopping) while its batch was read or embedded: not stored."""


def stops_at(stage: str) -> bool:
    """Whether a cancel read at this stage of a batch stops it there: while it is read, chunked or embedded (its
    vectors kept in the vector cache for a re-upload), and between the parts of a file read in parts (each part
    stored whole), but not while it is stored: its store transaction commits, and its files must then be marked
    done, or they would be stored and marked cancelled."""
    return stage != "store"
