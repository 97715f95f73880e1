-- Named queries, loaded by ragvps.database.queries(). Blocks with {placeholders} are composed with
-- psycopg.sql (identifiers and literals only); values are always bound as parameters.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS ragvps_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
SELECT version FROM ragvps_migrations ORDER BY version;

-- name: record_migration
INSERT INTO ragvps_migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: active_set
SELECT id, model, identity, dims, vector_type, table_name, active
FROM embedding_sets WHERE active;

-- name: set_by_identity
SELECT id, model, identity, dims, vector_type, table_name, active
FROM embedding_sets WHERE identity = %(identity)s AND vector_type = %(vector_type)s;

-- name: insert_set
INSERT INTO embedding_sets (model, identity, dims, vector_type, table_name, active)
VALUES (%(model)s, %(identity)s, %(dims)s, %(vector_type)s, %(table_name)s, %(active)s)
RETURNING id;

-- name: create_vector_table
CREATE TABLE {table} (
    chunk_id  bigint PRIMARY KEY REFERENCES chunks (id) ON DELETE CASCADE,
    embedding {vector_type}({dims}) NOT NULL
);
ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE PLAIN;

-- name: create_hnsw_index
CREATE INDEX IF NOT EXISTS {index} ON {table}
USING hnsw (embedding {opclass}) WITH (m = {m}, ef_construction = {ef_construction});

-- name: stored_documents
SELECT doc_id, id, source, content_hash, chunker FROM documents WHERE root = %(root)s;

-- name: delete_document
DELETE FROM documents WHERE root = %(root)s AND doc_id = %(doc_id)s;

-- name: insert_document
INSERT INTO documents (root, doc_id, source, title, kind, content_hash, chunker, metadata)
VALUES (%(root)s, %(doc_id)s, %(source)s, %(title)s, %(kind)s, %(content_hash)s, %(chunker)s, %(metadata)s)
RETURNING id;

-- name: reserve_chunk_ids
SELECT nextval(pg_get_serial_sequence('chunks', 'id')) FROM generate_series(1, %(n)s);

-- name: copy_chunks
COPY chunks (id, document_id, seq, heading_path, text, content_hash, tokens, llm_tokens,
             start_offset, end_offset, metadata, language)
FROM STDIN WITH (FORMAT BINARY);

-- name: copy_vectors
COPY {table} (chunk_id, embedding) FROM STDIN WITH (FORMAT BINARY);

-- name: count_chunks
SELECT count(*) FROM chunks;

-- name: vector_search
SELECT e.chunk_id
FROM {table} e
ORDER BY e.embedding <=> %(embedding)s
LIMIT %(candidates)s;

-- name: keyword_search
-- Any of the query's lexemes (an OR query): a natural-language question must not find nothing
-- just because one of its words is missing from the document.
WITH q AS (
    SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query
    FROM unnest(to_tsvector(%(language)s::regconfig, %(text)s))
)
SELECT c.id
FROM chunks c, q
WHERE c.tsv @@ q.query
ORDER BY ts_rank_cd(c.tsv, q.query) DESC, c.id
LIMIT %(candidates)s;

-- name: chunk_details
SELECT c.id, d.doc_id, d.source, d.root, c.seq, c.heading_path, c.text
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s);

-- Embedding-model switch (pipeline.reindex) and pinned chunker settings (migration 003).

-- name: chunks_for_reembed
SELECT c.id, d.doc_id, c.seq, c.heading_path, c.text, c.start_offset, c.end_offset, c.tokens, c.llm_tokens
FROM chunks c JOIN documents d ON d.id = c.document_id
ORDER BY c.id;

-- name: record_chunker
INSERT INTO chunker_settings (key, config) VALUES (%(key)s, %(config)s) ON CONFLICT (key) DO NOTHING;

-- name: chunker_by_key
SELECT config FROM chunker_settings WHERE key = %(key)s;

-- name: chunker_pin
SELECT chunker FROM embedding_sets WHERE id = %(id)s;

-- name: set_chunker_pin
UPDATE embedding_sets SET chunker = %(key)s WHERE id = %(id)s;

-- name: document_chunkers
SELECT chunker, count(*) FROM documents GROUP BY chunker ORDER BY count(*) DESC, chunker;

-- name: other_sets
SELECT id, model, identity, dims, vector_type, table_name, active
FROM embedding_sets WHERE id <> %(id)s;

-- name: deactivate_sets
UPDATE embedding_sets SET active = false WHERE active AND id <> %(id)s;

-- name: activate_set
UPDATE embedding_sets SET active = true WHERE id = %(id)s;

-- name: delete_set
DELETE FROM embedding_sets WHERE id = %(id)s;

-- name: drop_vector_table
DROP TABLE IF EXISTS {table};

-- name: truncate_vector_table
TRUNCATE {table};
