-- Upload jobs: files sent to POST /kb/{name}/documents, ingested by whoever claims the job under a lease
-- (the server's own runner, or `ragvps worker --jobs` on a machine that shares the data directory).
-- sql/jobs.sql has the queries. A job's files are ingested a batch at a time; each batch's documents are
-- stored in one transaction, and a file is marked done after its documents are stored. A worker killed
-- between the two leaves a file stored but not marked: the next claim ingests it again, which finds its
-- content hash stored and changes nothing (nothing lost, nothing stored twice).
CREATE TABLE ingest_jobs (
    id          text PRIMARY KEY,          -- j<knowledge base id>-<random>: the server finds the schema by it
    state       text NOT NULL DEFAULT 'queued'
                CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    cancel      boolean NOT NULL DEFAULT false,  -- asked to stop: the holder stops after its batch
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz,
    claimed_by  text,                      -- the worker's name
    claimed_at  timestamptz,               -- the lease starts here (the database's clock)
    claim       uuid,                      -- only the holder of this claim may write the job's progress
    attempts    integer NOT NULL DEFAULT 0,
    embedded    bigint NOT NULL DEFAULT 0, -- chunks sent to the embedder for this job
    error       text                       -- why the job failed as a whole
);
CREATE INDEX ingest_jobs_open_idx ON ingest_jobs (created_at) WHERE state IN ('queued', 'running');

CREATE TABLE ingest_job_files (
    job_id      text NOT NULL REFERENCES ingest_jobs (id) ON DELETE CASCADE,
    seq         integer NOT NULL,
    name        text NOT NULL,             -- its path under the uploads folder (neutralised)
    staged      text NOT NULL,             -- where the upload waits, relative to the knowledge base's folder
    size        bigint NOT NULL,
    state       text NOT NULL DEFAULT 'pending'
                CHECK (state IN ('pending', 'done', 'unchanged', 'failed', 'cancelled')),
    error       text,
    documents   integer NOT NULL DEFAULT 0,
    chunks      integer NOT NULL DEFAULT 0,
    finished_at timestamptz,
    PRIMARY KEY (job_id, seq)
);
