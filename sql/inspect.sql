-- Read-only queries for `ragvps eval`, `ragvps check-index` and `ragvps stats`, loaded by
-- ragvps.database.queries("inspect.sql"). {placeholders} are identifiers composed with psycopg.sql.

-- name: known_documents
SELECT doc_id, source FROM documents
WHERE doc_id = ANY(%(keys)s) OR source = ANY(%(keys)s);

-- name: counts
SELECT (SELECT count(*) FROM documents),
       (SELECT count(*) FROM chunks),
       (SELECT count(DISTINCT root) FROM documents),
       (SELECT count(*) FROM {table});

-- name: sample_vectors
-- A stable pseudo-random sample: the same chunks on every run over the same data.
SELECT chunk_id, embedding FROM {table} ORDER BY md5(chunk_id::text) LIMIT %(n)s;

-- name: nearest
SELECT chunk_id FROM {table} ORDER BY embedding <=> %(embedding)s LIMIT %(k)s;

-- name: relation_sizes
SELECT pg_total_relation_size(c.oid),
       pg_relation_size(c.oid),
       COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0),
       pg_indexes_size(c.oid)
FROM pg_class c WHERE c.oid = %(table)s::regclass;

-- name: index_sizes
SELECT ic.relname, am.amname, pg_relation_size(i.indexrelid)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_am am ON am.oid = ic.relam
WHERE i.indrelid = %(table)s::regclass
ORDER BY ic.relname;

-- name: memory_settings
SELECT current_setting('shared_buffers'), pg_size_bytes(current_setting('shared_buffers')),
       current_setting('maintenance_work_mem'), pg_size_bytes(current_setting('maintenance_work_mem'));
