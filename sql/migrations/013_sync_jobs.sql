-- Syncs of connected sources as jobs (issue 46): a sync runs on the same lease queue as uploads (migration 009),
-- so `GET /jobs/{id}` and `DELETE /jobs/{id}` serve both, and `ragvps worker --jobs` (or the server's runner)
-- takes either. A sync job has no staged files: its progress is the items read, its failed items are rows of
-- ingest_job_files (state failed, name the item's URL or path), and its report is kept when it ends.
ALTER TABLE ingest_jobs
    ADD COLUMN kind        text NOT NULL DEFAULT 'upload' CHECK (kind IN ('upload', 'sync')),
    ADD COLUMN source      text REFERENCES sources (name) ON DELETE CASCADE,  -- a sync job's source
    ADD COLUMN items_read  integer NOT NULL DEFAULT 0,  -- a sync job's items read so far ...
    ADD COLUMN items_total integer,                     -- ... of those it found changed
    ADD COLUMN report      jsonb,                       -- a sync job's outcome, when it ended
    ADD CONSTRAINT ingest_jobs_sync_source CHECK ((kind = 'sync') = (source IS NOT NULL));

-- One open sync a source: a second request while one waits or runs is answered with the same job, so two
-- syncs of one source never run at once (each job is held by one lease at a time).
CREATE UNIQUE INDEX ingest_jobs_one_sync_idx ON ingest_jobs (source)
    WHERE kind = 'sync' AND state IN ('queued', 'running');

-- A sync cancelled between its items keeps the items of the last complete sync; the next one ingests the
-- mirror again whatever it reads, so it reaches the same state as an uninterrupted sync.
ALTER TABLE sources DROP CONSTRAINT sources_state_check,
    ADD CONSTRAINT sources_state_check CHECK (state IN ('new', 'ok', 'partial', 'failed', 'cancelled'));
