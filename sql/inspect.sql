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

-- name: calibration_chunks
-- `ragvps calibrate`: a stable pseudo-random sample of chunks (the same on every run over the same data), with
-- the document each belongs to, for questions made from their sentences.
SELECT c.id, d.doc_id, c.text
FROM chunks c JOIN documents d ON d.id = c.document_id
ORDER BY md5(c.id::text || %(seed)s)
LIMIT %(n)s;

-- name: fusion_chunks
-- `ragvps calibrate`'s fusion questions: a stable pseudo-random sample of the chunks of documents of two chunks or
-- more, each with its document's other chunks (the gold of a question made from it).
SELECT c.id, c.text,
       array(SELECT s.id FROM chunks s WHERE s.document_id = c.document_id AND s.id <> c.id) AS siblings
FROM chunks c
WHERE EXISTS (SELECT FROM chunks s WHERE s.document_id = c.document_id AND s.id <> c.id)
ORDER BY md5(c.id::text || %(seed)s)
LIMIT %(n)s;

-- name: word_rarity
-- Each word of a sentence with its lexeme's chunk count (BM25's df): the rarest make its question.
SELECT w.word, coalesce(s.df, 0)
FROM unnest(%(words)s::text[]) WITH ORDINALITY AS w (word, i)
LEFT JOIN LATERAL unnest(tsvector_to_array(to_tsvector(%(language)s::regconfig, w.word))) AS l (lexeme) ON true
LEFT JOIN term_stats s ON s.lexeme = l.lexeme
ORDER BY w.i;

-- name: gold_chunks
-- `ragvps calibrate` with gold questions: the chunks of the documents they name, by document id or source path.
SELECT d.doc_id, d.source, c.id
FROM documents d JOIN chunks c ON c.document_id = d.id
WHERE d.doc_id = ANY(%(docs)s) OR d.source = ANY(%(docs)s);
