-- Export and import of a knowledge base as a bundle (ragvps/db/bundle_export.py, bundle_import.py; the format is
-- docs/bundle.md). Rows travel as JSON objects named by column; {placeholders} are identifiers only.

-- name: snapshot
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY;

-- name: counts
SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks);

-- name: vector_sets
SELECT s.id, s.model, s.identity, s.dims, s.vector_type, s.table_name, s.active, s.chunker
FROM embedding_sets s ORDER BY s.id;

-- name: count_vectors
SELECT count(*) FROM {table};

-- name: export_documents
SELECT json_build_object('id', id, 'root', root, 'doc_id', doc_id, 'source', source, 'title', title, 'kind', kind,
                         'content_hash', content_hash, 'chunker', chunker, 'metadata', metadata,
                         'updated_at', updated_at, 'language', language)::text
FROM documents ORDER BY id;

-- name: export_chunks
SELECT json_build_object('id', id, 'document_id', document_id, 'seq', seq, 'heading_path', heading_path, 'text', text,
                         'content_hash', content_hash, 'tokens', tokens, 'llm_tokens', llm_tokens,
                         'start_offset', start_offset, 'end_offset', end_offset, 'metadata', metadata,
                         'language', language::text, 'terms', terms)::text
FROM chunks ORDER BY id;

-- name: export_chunker_settings
SELECT json_build_object('key', key, 'config', config)::text FROM chunker_settings ORDER BY key;

-- name: export_gold_questions
SELECT json_build_object('id', id, 'question', question, 'relevant', relevant, 'answer', answer)::text
FROM gold_questions ORDER BY id;

-- name: export_eval_scores
SELECT json_build_object('mode', mode, 'k', k, 'depth', depth, 'recall', recall, 'mrr', mrr, 'ndcg', ndcg,
                         'questions', questions, 'measured_at', measured_at)::text
FROM eval_scores ORDER BY mode;

-- name: export_answer_cache
SELECT (to_jsonb(a) - 'hits' - 'tokens_saved' - 'last_hit_at')::text FROM answer_cache a ORDER BY key;

-- name: export_vector_ids
SELECT chunk_id FROM {table} ORDER BY chunk_id;

-- name: export_vectors
-- pgvector's binary form: int16 dimensions, int16 unused, then the values as big-endian float32.
SELECT vector_send(embedding::vector) FROM {table} ORDER BY chunk_id;

-- name: import_documents
INSERT INTO documents (id, root, doc_id, source, title, kind, content_hash, chunker, metadata, updated_at, language)
SELECT id, root, doc_id, source, title, kind, content_hash, chunker, metadata, updated_at, language
FROM jsonb_populate_recordset(NULL::documents, %(rows)s::jsonb);

-- name: mark_foreign_roots
-- An imported document's folder is another machine's (or a forger's) path: marked, so no reindex reads it.
UPDATE documents SET root = %(foreign)s || root WHERE left(root, length(%(foreign)s)) <> %(foreign)s;

-- name: import_chunks
INSERT INTO chunks (id, document_id, seq, heading_path, text, content_hash, tokens, llm_tokens, start_offset,
                    end_offset, metadata, language, terms)
SELECT id, document_id, seq, heading_path, text, content_hash, tokens, llm_tokens, start_offset, end_offset,
       metadata, language, terms
FROM jsonb_populate_recordset(NULL::chunks, %(rows)s::jsonb);

-- name: import_chunker_settings
INSERT INTO chunker_settings (key, config)
SELECT key, config FROM jsonb_populate_recordset(NULL::chunker_settings, %(rows)s::jsonb);

-- name: import_gold_questions
INSERT INTO gold_questions (id, question, relevant, answer)
SELECT id, question, relevant, answer FROM jsonb_populate_recordset(NULL::gold_questions, %(rows)s::jsonb);

-- name: import_eval_scores
INSERT INTO eval_scores (mode, k, depth, recall, mrr, ndcg, questions, measured_at)
SELECT mode, k, depth, recall, mrr, ndcg, questions, measured_at
FROM jsonb_populate_recordset(NULL::eval_scores, %(rows)s::jsonb);

-- name: import_answer_cache
INSERT INTO answer_cache (key, question, generator, model, prompt_version, chunk_ids, sent_hashes, answer,
                          prompt_tokens, completion_tokens, created_at)
SELECT key, question, generator, model, prompt_version, chunk_ids, sent_hashes, answer, prompt_tokens,
       completion_tokens, created_at
FROM jsonb_populate_recordset(NULL::answer_cache, %(rows)s::jsonb);

-- name: import_set
INSERT INTO embedding_sets (id, model, identity, dims, vector_type, table_name, active, chunker)
VALUES (%(id)s, %(model)s, %(identity)s, %(dims)s, %(vector_type)s, %(table_name)s, %(active)s, %(chunker)s);

-- name: copy_vectors_binary
COPY {table} (chunk_id, embedding) FROM STDIN WITH (FORMAT BINARY);

-- name: restart_sequences
SELECT setval(pg_get_serial_sequence('documents', 'id'), coalesce((SELECT max(id) FROM documents), 0) + 1, false),
       setval(pg_get_serial_sequence('chunks', 'id'), coalesce((SELECT max(id) FROM chunks), 0) + 1, false),
       setval(pg_get_serial_sequence('embedding_sets', 'id'),
              coalesce((SELECT max(id) FROM embedding_sets), 0) + 1, false);

-- name: schema_comment
SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = %(schema)s;

-- name: comment_schema
COMMENT ON SCHEMA {schema} IS {comment};

-- name: drop_schema
DROP SCHEMA IF EXISTS {schema} CASCADE;

-- name: rename_schema
ALTER SCHEMA {schema} RENAME TO {new_name};

-- name: kb_set_settings
UPDATE ragvps.knowledge_bases SET settings = %(settings)s WHERE id = %(id)s;

-- name: import_lock
SELECT pg_try_advisory_lock(hashtext(%(key)s));

-- name: import_unlock
SELECT pg_advisory_unlock(hashtext(%(key)s));

-- name: catalog_lock
SELECT pg_advisory_xact_lock(hashtext('ragvps:catalog'));

-- name: server_version
SELECT current_setting('server_version');

-- name: probe_search
SELECT chunk_id, (embedding <=> %(embedding)s)::float8 FROM {table} ORDER BY 2, chunk_id LIMIT %(k)s;

-- name: probe_chunks
-- Evenly spaced chunks (by id) with their text: the sample whose first sentences probe a knowledge base without gold.
SELECT id, text FROM (
    SELECT id, text, row_number() OVER (ORDER BY id) AS n, count(*) OVER () AS total FROM chunks
) c WHERE (n - 1) %% greatest(total / %(sample)s, 1) = 0 ORDER BY id LIMIT %(sample)s;

-- name: backup_insert
INSERT INTO ragvps.backups (kb_name, file, bytes, chunks) VALUES (%(kb)s, %(file)s, %(bytes)s, %(chunks)s)
RETURNING id;

-- name: backup_checked
UPDATE ragvps.backups SET checked_at = CASE WHEN %(ok)s THEN now() END, check_note = %(note)s
WHERE file = %(file)s;

-- name: last_good_backup
SELECT file, made_at, checked_at, bytes FROM ragvps.backups
WHERE kb_name = %(kb)s AND checked_at IS NOT NULL ORDER BY made_at DESC LIMIT 1;

-- name: last_backup
SELECT file, made_at, checked_at, bytes FROM ragvps.backups WHERE kb_name = %(kb)s ORDER BY made_at DESC LIMIT 1;

-- name: forget_backup
DELETE FROM ragvps.backups WHERE file = %(file)s;

-- name: gold_clear
DELETE FROM gold_questions;

-- name: gold_insert
INSERT INTO gold_questions (id, question, relevant, answer) VALUES (%(id)s, %(question)s, %(relevant)s, %(answer)s);

-- name: scores_clear
DELETE FROM eval_scores;

-- name: scores_insert
INSERT INTO eval_scores (mode, k, depth, recall, mrr, ndcg, questions)
VALUES (%(mode)s, %(k)s, %(depth)s, %(recall)s, %(mrr)s, %(ndcg)s, %(questions)s);

-- name: gold_all
SELECT id, question, relevant, answer FROM gold_questions ORDER BY id;

-- name: scores_all
SELECT mode, k, depth, recall, mrr, ndcg, questions FROM eval_scores ORDER BY mode;

-- name: chunk_secondary_indexes
-- Dropped before a bulk load into a scratch schema and made again after it: a GIN index built once is many
-- times faster than one updated row by row.
SELECT n.nspname, c.relname, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid IN ('chunks'::regclass, 'chunk_terms'::regclass) AND NOT i.indisunique AND NOT i.indisprimary;

-- name: drop_index
DROP INDEX {index};

-- name: pause_chunk_triggers
ALTER TABLE chunks DISABLE TRIGGER USER;

-- name: resume_chunk_triggers
ALTER TABLE chunks ENABLE TRIGGER USER;

-- name: rebuild_stats
-- What the statistics triggers (migrations 002, 010 and 014) would have kept, computed once over the loaded chunks.
INSERT INTO chunk_terms (id, len, tsv)
SELECT id, length(v), v
FROM chunks, to_tsvector(chunks.language, coalesce(chunks.terms, chunks.heading_path || ' ' || chunks.text)) AS v;
INSERT INTO chunk_languages (language, chunks) SELECT language, count(*) FROM chunks GROUP BY language;
INSERT INTO term_stats (lexeme, df) SELECT word, ndoc FROM ts_stat('SELECT tsv FROM chunk_terms');
UPDATE corpus_stats SET chunks = s.n, lengths = s.l, generation = generation + 1
FROM (SELECT count(*) AS n, coalesce(sum(len), 0) AS l FROM chunk_terms) s;

-- name: queue_missing
-- Chunks the source stored without a vector in the active set (an ingest with defer_embedding) wait for a worker
-- again, as they did there.
INSERT INTO embed_queue (set_id, chunk_id)
SELECT %(set_id)s, c.id FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM {table} e WHERE e.chunk_id = c.id);

-- name: kb_has_documents
-- Whether a knowledge base's schema holds a document (one never opened has no tables yet: no).
SELECT to_regclass(%(table)s) IS NOT NULL;

-- name: any_document
SELECT EXISTS (SELECT 1 FROM {documents});
