-- The embedding queue: chunks stored by `ragvps ingest --defer-embedding` that wait for a vector in an
-- embedding set, claimed by `ragvps worker` processes under a lease (sql/queue.sql has the queries).
-- A row is deleted in the transaction that writes its vector; a lease past its time is claimable again.
CREATE TABLE embed_queue (
    set_id     integer NOT NULL REFERENCES embedding_sets (id) ON DELETE CASCADE,
    chunk_id   bigint NOT NULL REFERENCES chunks (id) ON DELETE CASCADE,
    queued_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by text,                   -- the worker's name
    claimed_at timestamptz,            -- the lease starts here (the database's clock, not the worker's)
    claim      uuid,                   -- the claim this row belongs to: only its holder may finish it
    attempts   integer NOT NULL DEFAULT 0,
    PRIMARY KEY (set_id, chunk_id)
);
CREATE INDEX embed_queue_chunk_idx ON embed_queue (chunk_id);  -- for the cascade when a chunk goes
CREATE INDEX embed_queue_claim_idx ON embed_queue (claim) WHERE claim IS NOT NULL;

-- What each worker has finished, per embedding set (for `ragvps stats`).
CREATE TABLE embed_workers (
    set_id    integer NOT NULL REFERENCES embedding_sets (id) ON DELETE CASCADE,
    worker    text NOT NULL,
    done      bigint NOT NULL DEFAULT 0,
    batches   bigint NOT NULL DEFAULT 0,
    last_seen timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (set_id, worker)
);
