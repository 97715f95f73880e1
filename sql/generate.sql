-- Named queries of the answer stage (ragvps/generate/cache.py).

-- name: cache_get
UPDATE answer_cache
SET hits = hits + 1, tokens_saved = tokens_saved + prompt_tokens + completion_tokens, last_hit_at = now()
WHERE key = %(key)s
RETURNING answer;

-- name: cache_put
INSERT INTO answer_cache (key, question, generator, model, prompt_version, chunk_ids, sent_hashes, answer,
                          prompt_tokens, completion_tokens)
VALUES (%(key)s, %(question)s, %(generator)s, %(model)s, %(prompt_version)s, %(chunk_ids)s, %(sent_hashes)s,
        %(answer)s, %(prompt_tokens)s, %(completion_tokens)s)
ON CONFLICT (key) DO UPDATE SET answer = EXCLUDED.answer, prompt_tokens = EXCLUDED.prompt_tokens,
                                completion_tokens = EXCLUDED.completion_tokens, created_at = now();

-- name: cache_prune
-- An entry goes when any chunk it was built from is gone or holds other text now. The hash is the one
-- ragvps.generate.cache.sent_hash computes; only chunks some entry names are hashed.
WITH sent AS (
    SELECT a.key, s.chunk_id, s.sent_hash
    FROM answer_cache a, unnest(a.chunk_ids, a.sent_hashes) AS s (chunk_id, sent_hash)
),
live AS (
    SELECT d.doc_id || '#' || c.seq AS chunk_id,
           encode(sha256(convert_to(c.heading_path || E'\n' || c.text, 'UTF8')), 'hex') AS sent_hash
    FROM chunks c JOIN documents d ON d.id = c.document_id
    WHERE d.doc_id || '#' || c.seq IN (SELECT chunk_id FROM sent)
),
stale AS (
    SELECT DISTINCT sent.key FROM sent LEFT JOIN live USING (chunk_id, sent_hash) WHERE live.chunk_id IS NULL
)
DELETE FROM answer_cache WHERE key IN (SELECT key FROM stale);

-- name: memo_get
-- The remembered answer of this exact question and request, if nothing changed since it was retrieved
-- (migration 007), counting the hit on its answer_cache entry; and the generation now, for a memo_put.
WITH now_at AS (SELECT generation FROM corpus_stats),
memo AS (
    SELECT m.answer_key, m.retrieval FROM answer_memo m, now_at
    WHERE m.key = %(key)s AND m.generation = now_at.generation
),
hit AS (
    UPDATE answer_cache a
    SET hits = hits + 1, tokens_saved = tokens_saved + prompt_tokens + completion_tokens, last_hit_at = now()
    FROM memo WHERE a.key = memo.answer_key
    RETURNING a.answer, memo.retrieval
)
SELECT now_at.generation, hit.answer, hit.retrieval FROM now_at LEFT JOIN hit ON true;

-- name: memo_put
-- Only while its answer is still cached (a prune may have taken it a moment ago).
INSERT INTO answer_memo (key, generation, answer_key, retrieval)
SELECT %(key)s, %(generation)s, %(answer_key)s, %(retrieval)s
WHERE EXISTS (SELECT FROM answer_cache WHERE key = %(answer_key)s)
ON CONFLICT (key) DO UPDATE SET generation = EXCLUDED.generation, answer_key = EXCLUDED.answer_key,
                                retrieval = EXCLUDED.retrieval, created_at = now();

-- name: memo_prune
-- Memos of an older generation can never hit again.
DELETE FROM answer_memo WHERE generation <> (SELECT generation FROM corpus_stats);

-- name: cache_stats
SELECT count(*), coalesce(sum(hits), 0), coalesce(sum(tokens_saved), 0) FROM answer_cache;

-- name: cache_clear
DELETE FROM answer_cache;

-- name: cache_peek
-- cache_get on a read replica (read-only): the hit is counted on the primary afterwards (cache_count).
SELECT answer FROM answer_cache WHERE key = %(key)s;

-- name: cache_count
UPDATE answer_cache
SET hits = hits + 1, tokens_saved = tokens_saved + prompt_tokens + completion_tokens, last_hit_at = now()
WHERE key = %(key)s;

-- name: memo_peek
-- memo_get on a read replica (read-only): the remembered answer, and its key for cache_count on the primary.
WITH now_at AS (SELECT generation FROM corpus_stats),
memo AS (
    SELECT m.answer_key, m.retrieval FROM answer_memo m, now_at
    WHERE m.key = %(key)s AND m.generation = now_at.generation
)
SELECT now_at.generation, a.answer, memo.retrieval, memo.answer_key
FROM now_at LEFT JOIN memo ON true LEFT JOIN answer_cache a ON a.key = memo.answer_key;
