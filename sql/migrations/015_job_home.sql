-- Several servers on one database (issue 54): an upload's files are staged on the disk of the server that took
-- it (KB_DIR/incoming/JOB), so its job is taken only by a worker of the same data directory, named by the id in
-- data_dir/home.id. NULL: a job queued before this migration, or a sync (its mirror is fetched again where it
-- runs), taken by any worker as before.
ALTER TABLE ingest_jobs ADD COLUMN home text;
