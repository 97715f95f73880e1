-- The embedding queue (migration 005), used by ragvps.db.queue. Claims are short transactions; the
-- embedding call happens outside any transaction; a batch is finished in the transaction that writes
-- its vectors.

-- name: enqueue_missing
-- Every chunk without a vector in this set (the set's table is {table}); a chunk queued already stays as it is.
INSERT INTO embed_queue (set_id, chunk_id)
SELECT %(set_id)s, c.id
FROM chunks c
WHERE NOT EXISTS (SELECT FROM {table} e WHERE e.chunk_id = c.id)
ON CONFLICT DO NOTHING;

-- name: claim_batch
-- SKIP LOCKED: two workers claiming at once take different rows; an expired lease is claimable again.
WITH picked AS (
    SELECT chunk_id FROM embed_queue
    WHERE set_id = %(set_id)s
      AND (claimed_at IS NULL OR claimed_at < now() - make_interval(secs => %(lease)s::float8))
    ORDER BY chunk_id
    LIMIT %(n)s
    FOR UPDATE SKIP LOCKED
)
UPDATE embed_queue q
SET claimed_by = %(worker)s, claimed_at = now(), claim = %(claim)s, attempts = q.attempts + 1
FROM picked
WHERE q.set_id = %(set_id)s AND q.chunk_id = picked.chunk_id
RETURNING q.chunk_id;

-- name: claimed_chunks
SELECT c.id, d.doc_id, c.seq, c.heading_path, c.text, c.start_offset, c.end_offset, c.tokens, c.llm_tokens,
       c.metadata
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s)
ORDER BY c.id;

-- name: finish_batch
-- Only the rows still under this claim: a lease that expired and was claimed again belongs to the other worker.
DELETE FROM embed_queue
WHERE set_id = %(set_id)s AND claim = %(claim)s AND chunk_id = ANY(%(ids)s)
RETURNING chunk_id;

-- name: count_worker
INSERT INTO embed_workers (set_id, worker, done, batches, last_seen)
VALUES (%(set_id)s, %(worker)s, %(done)s, 1, now())
ON CONFLICT (set_id, worker) DO UPDATE
SET done = embed_workers.done + excluded.done, batches = embed_workers.batches + 1, last_seen = now();

-- name: release_batch
UPDATE embed_queue SET claimed_by = NULL, claimed_at = NULL, claim = NULL WHERE claim = %(claim)s;

-- name: queue_left
SELECT count(*) FROM embed_queue WHERE set_id = %(set_id)s;

-- name: queue_counts
SELECT count(*) FILTER (WHERE claimed_at IS NULL OR claimed_at < now() - make_interval(secs => %(lease)s::float8)),
       count(*) FILTER (WHERE claimed_at >= now() - make_interval(secs => %(lease)s::float8))
FROM embed_queue WHERE set_id = %(set_id)s;

-- name: queue_workers
-- Per worker: chunks finished, batches, chunks it holds under a live lease now, when it was last heard of.
SELECT w.worker, w.done, w.batches, coalesce(c.claimed, 0), w.last_seen
FROM embed_workers w
LEFT JOIN (SELECT claimed_by, count(*) AS claimed FROM embed_queue
           WHERE set_id = %(set_id)s AND claimed_at >= now() - make_interval(secs => %(lease)s::float8)
           GROUP BY claimed_by) c ON c.claimed_by = w.worker
WHERE w.set_id = %(set_id)s
UNION ALL
SELECT q.claimed_by, 0, 0, count(*), max(q.claimed_at)
FROM embed_queue q
WHERE q.set_id = %(set_id)s AND q.claimed_at >= now() - make_interval(secs => %(lease)s::float8)
  AND NOT EXISTS (SELECT FROM embed_workers w WHERE w.set_id = q.set_id AND w.worker = q.claimed_by)
GROUP BY q.claimed_by
ORDER BY 1;

-- name: renew_claim
-- A live worker keeps its lease while it embeds; a dead one stops renewing and loses it after the lease.
UPDATE embed_queue SET claimed_at = now() WHERE claim = %(claim)s;
