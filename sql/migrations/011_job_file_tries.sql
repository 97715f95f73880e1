-- A file that kills every worker that reads it (out of memory, a crash in a reader) must not be retried
-- forever (issue 30). A worker marks the files it is about to read `in_hand` with its claim; a worker that
-- gives the job back cleanly clears the mark, one that dies cannot. The next holder counts each file still
-- marked by another claim as one more try, and fails the file once it reaches worker_max_attempts; a file
-- tried before is read alone, so that one bad file does not count against the files read beside it.
ALTER TABLE ingest_job_files ADD COLUMN tries integer NOT NULL DEFAULT 0;  -- workers that died reading it
ALTER TABLE ingest_job_files ADD COLUMN in_hand uuid;                     -- the claim reading it now
-- A large table is read in parts (ragvps.ingest.parts): how far its reader is, for GET /jobs/{id}.
ALTER TABLE ingest_job_files ADD COLUMN rows_done bigint;
ALTER TABLE ingest_job_files ADD COLUMN rows_total bigint;
