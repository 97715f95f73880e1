-- Upload jobs (migrations 009, 011), used by ragvps.db.jobs. Claims are short transactions; a job's files are
-- ingested with no claim transaction open; progress is written only under the caller's own claim.

-- name: insert_job
INSERT INTO ingest_jobs (id, home) VALUES (%(id)s, %(home)s);

-- name: job_queued
-- Wakes the workers waiting on `listen` (delivered when the transaction that queued the job commits).
SELECT pg_notify('ragvps_jobs', '');

-- name: listen
LISTEN ragvps_jobs;

-- name: unlisten
UNLISTEN ragvps_jobs;

-- name: insert_file
INSERT INTO ingest_job_files (job_id, seq, name, staged, size) VALUES (%(job)s, %(seq)s, %(name)s, %(staged)s, %(size)s);

-- name: claim_job
-- The oldest job nobody holds (or whose holder's lease ran out); SKIP LOCKED: two workers take two jobs. Only a
-- job whose files are in this worker's data directory (home), or one with no home.
WITH picked AS (
    SELECT id FROM ingest_jobs
    WHERE state IN ('queued', 'running') AND (home IS NULL OR home = %(home)s)
      AND (claimed_at IS NULL OR claimed_at < now() - make_interval(secs => %(lease)s::float8))
    ORDER BY created_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE ingest_jobs j
SET claimed_by = %(worker)s, claimed_at = now(), claim = %(claim)s, attempts = j.attempts + 1,
    state = 'running', started_at = coalesce(j.started_at, now())
FROM picked
WHERE j.id = picked.id
RETURNING j.id;

-- name: open_jobs
-- The open jobs a worker of this data directory may take.
SELECT count(*) FROM ingest_jobs WHERE state IN ('queued', 'running') AND (home IS NULL OR home = %(home)s);

-- name: renew_job
UPDATE ingest_jobs SET claimed_at = now() WHERE id = %(job)s AND claim = %(claim)s RETURNING cancel;

-- name: pending_files
SELECT seq, name, staged, size, tries FROM ingest_job_files WHERE job_id = %(job)s AND state = 'pending' ORDER BY seq;

-- name: hold_files
-- The files the holder is about to read: a worker that dies now leaves them marked with its claim.
UPDATE ingest_job_files f SET in_hand = %(claim)s
FROM ingest_jobs j
WHERE f.job_id = j.id AND j.id = %(job)s AND j.claim = %(claim)s AND f.seq = ANY(%(seqs)s) AND f.state = 'pending';

-- name: count_deaths
-- Files still marked by an earlier claim: that worker died (or lost its lease) reading them, one more try each.
UPDATE ingest_job_files f SET tries = f.tries + 1, in_hand = NULL
FROM ingest_jobs j
WHERE f.job_id = j.id AND j.id = %(job)s AND j.claim = %(claim)s AND f.state = 'pending'
  AND f.in_hand IS NOT NULL AND f.in_hand <> %(claim)s;

-- name: unhold_files
-- A clean give-back: the files in hand were not what stopped the worker.
UPDATE ingest_job_files SET in_hand = NULL WHERE job_id = %(job)s AND in_hand = %(claim)s;

-- name: finish_file
-- Only under the caller's claim: a worker whose lease ran out writes nothing.
UPDATE ingest_job_files f
SET state = %(state)s, error = %(error)s, documents = %(documents)s, chunks = %(chunks)s, finished_at = now(),
    in_hand = NULL
FROM ingest_jobs j
WHERE f.job_id = j.id AND j.id = %(job)s AND j.claim = %(claim)s AND f.seq = %(seq)s AND f.state = 'pending'
RETURNING f.seq;

-- name: file_rows
-- How far the reader of a file read in parts is (under the caller's claim; the last count also after the file
-- was marked, so that a file done shows all its rows read).
UPDATE ingest_job_files f SET rows_done = %(done)s, rows_total = %(total)s
FROM ingest_jobs j
WHERE f.job_id = j.id AND j.id = %(job)s AND j.claim = %(claim)s AND f.name = %(name)s;

-- name: add_embedded
UPDATE ingest_jobs SET embedded = embedded + %(n)s, claimed_at = now()
WHERE id = %(job)s AND claim = %(claim)s RETURNING cancel;

-- name: end_job
-- The holder ends its job: done, failed or cancelled. Files left pending end with it: failed with the job's
-- error when the job could not run, else cancelled.
WITH job AS (
    UPDATE ingest_jobs
    SET state = %(state)s, error = %(error)s, finished_at = now(), claim = NULL, claimed_at = NULL
    WHERE id = %(job)s AND claim = %(claim)s
    RETURNING id, state, error
)
UPDATE ingest_job_files f
SET state = CASE WHEN job.state = 'failed' THEN 'failed' ELSE 'cancelled' END,
    error = CASE WHEN job.state = 'failed' THEN job.error END, finished_at = now()
FROM job WHERE f.job_id = job.id AND f.state = 'pending';

-- name: file_outcomes
-- How the job's files ended so far: (state, how many, the first error of that state).
SELECT state, count(*), (array_agg(error ORDER BY seq) FILTER (WHERE error IS NOT NULL))[1]
FROM ingest_job_files WHERE job_id = %(job)s GROUP BY state;

-- name: release_job
-- Given back: a sync given back by a worker that stops (not struck) does not count its claim as a death.
UPDATE ingest_jobs
SET claim = NULL, claimed_at = NULL, claimed_by = NULL,
    attempts = CASE WHEN kind = 'sync' AND NOT %(strike)s THEN greatest(attempts - 1, 0) ELSE attempts END
WHERE id = %(job)s AND claim = %(claim)s;

-- name: job_attempts
SELECT attempts FROM ingest_jobs WHERE id = %(job)s;

-- name: cancel_job
-- A queued job nobody holds is cancelled at once; a running one is asked to stop (its holder ends it).
UPDATE ingest_jobs
SET cancel = true,
    state = CASE WHEN state = 'queued' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'queued' THEN now() ELSE finished_at END
WHERE id = %(job)s AND state IN ('queued', 'running')
RETURNING state;

-- name: cancel_files
UPDATE ingest_job_files f SET state = 'cancelled', finished_at = now()
FROM ingest_jobs j
WHERE f.job_id = j.id AND j.id = %(job)s AND j.state = 'cancelled' AND f.state = 'pending';

-- name: job_row
SELECT state, cancel, created_at, started_at, finished_at, claimed_by, attempts, embedded, error,
       extract(epoch FROM (coalesce(finished_at, now()) - coalesce(started_at, now())))::float8
FROM ingest_jobs WHERE id = %(job)s;

-- name: job_files
SELECT seq, name, size, state, error, documents, chunks, rows_done, rows_total
FROM ingest_job_files WHERE job_id = %(job)s ORDER BY seq;

-- name: list_documents
-- One page of documents, by id (the cursor is the last id of the page before).
SELECT d.id, d.root, d.source, d.doc_id, d.title, d.kind, d.updated_at,
       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id),
       (SELECT count(*) FROM chunks c JOIN embed_queue q ON q.chunk_id = c.id WHERE c.document_id = d.id)
FROM documents d
WHERE d.id > %(after)s
ORDER BY d.id
LIMIT %(limit)s;

-- name: document_by_id
SELECT root, source, doc_id, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id)
FROM documents d WHERE id = %(id)s;

-- name: documents_of_source
SELECT count(*) FROM documents WHERE root = %(root)s AND source = %(source)s;

-- name: insert_sync_job
-- A sync of one source, unless one is open already (then nothing: the caller reads that one). With a claim,
-- made in the caller's hand (`ragvps sync` runs it in its own process), else queued for a worker.
INSERT INTO ingest_jobs (id, kind, source, state, claimed_by, claimed_at, claim, attempts, started_at)
VALUES (%(id)s, 'sync', %(source)s, CASE WHEN %(claim)s::uuid IS NULL THEN 'queued' ELSE 'running' END,
        %(worker)s, CASE WHEN %(claim)s::uuid IS NULL THEN NULL ELSE now() END, %(claim)s::uuid,
        CASE WHEN %(claim)s::uuid IS NULL THEN 0 ELSE 1 END,
        CASE WHEN %(claim)s::uuid IS NULL THEN NULL ELSE now() END)
ON CONFLICT (source) WHERE kind = 'sync' AND state IN ('queued', 'running') DO NOTHING
RETURNING id;

-- name: open_sync_job
SELECT id FROM ingest_jobs WHERE kind = 'sync' AND source = %(source)s AND state IN ('queued', 'running');

-- name: claim_this_job
-- One job by id, if nobody holds it (or its holder's lease ran out).
UPDATE ingest_jobs j
SET claimed_by = %(worker)s, claimed_at = now(), claim = %(claim)s, attempts = j.attempts + 1,
    state = 'running', started_at = coalesce(j.started_at, now())
WHERE j.id = %(job)s AND j.state IN ('queued', 'running')
  AND (j.claimed_at IS NULL OR j.claimed_at < now() - make_interval(secs => %(lease)s::float8))
RETURNING j.id;

-- name: job_kind
SELECT kind, source FROM ingest_jobs WHERE id = %(job)s;

-- name: sync_progress
-- A sync's items read so far (and the lease renewed); whether it was asked to stop, nothing if not ours.
UPDATE ingest_jobs SET items_read = %(read)s, items_total = %(total)s, claimed_at = now()
WHERE id = %(job)s AND claim = %(claim)s RETURNING cancel;

-- name: insert_failed_item
-- An item a sync could not read, named by its URL or path (seq after the job's other rows).
INSERT INTO ingest_job_files (job_id, seq, name, staged, size, state, error, finished_at)
SELECT j.id, coalesce((SELECT max(seq) FROM ingest_job_files WHERE job_id = j.id), 0) + 1, %(name)s, '', 0,
       'failed', %(error)s, now()
FROM ingest_jobs j WHERE j.id = %(job)s AND j.claim = %(claim)s;

-- name: end_sync_job
UPDATE ingest_jobs
SET state = %(state)s, error = %(error)s, report = %(report)s, items_read = %(read)s, embedded = %(embedded)s,
    finished_at = now(),
    claim = NULL, claimed_at = NULL
WHERE id = %(job)s AND claim = %(claim)s
RETURNING id;

-- name: sync_job_row
SELECT kind, source, state, items_read, items_total, report FROM ingest_jobs WHERE id = %(job)s;
