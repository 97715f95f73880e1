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
SELECT id, model, identity, dims, vector_type, table_name, active, to_regclass(table_name || '_hnsw') IS NOT NULL
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
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {table}
USING hnsw (embedding {opclass}) WITH (m = {m}, ef_construction = {ef_construction});

-- name: create_hnsw_bit_index
-- Binary quantization: one bit per dimension, searched by Hamming distance, re-ranked on the stored vector.
CREATE INDEX {concurrently} IF NOT EXISTS {index} ON {table}
USING hnsw ((binary_quantize(embedding)::bit({dims})) bit_hamming_ops)
WITH (m = {m}, ef_construction = {ef_construction});

-- name: drop_index_concurrently
DROP INDEX CONCURRENTLY IF EXISTS {index};

-- name: rename_index
ALTER INDEX {index} RENAME TO {new_name};

-- name: index_progress
-- HNSW reports blocks while loading tuples; other phases (waiting, validating) report tuples or nothing.
SELECT CASE WHEN blocks_total > 0 THEN blocks_done ELSE tuples_done END,
       CASE WHEN blocks_total > 0 THEN blocks_total ELSE tuples_total END,
       phase
FROM pg_stat_progress_create_index WHERE pid = %(pid)s;

-- name: stored_documents
SELECT doc_id, id, source, content_hash, chunker FROM documents WHERE root = %(root)s;

-- name: source_chunks
SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.root = %(root)s AND d.source = %(source)s;

-- name: delete_documents
-- Chunks first, in one statement, so the term-statistics trigger runs once rather than per document.
WITH chunks_gone AS (
    DELETE FROM chunks c USING documents d
    WHERE d.id = c.document_id AND d.root = %(root)s AND d.doc_id = ANY(%(doc_ids)s)
)
DELETE FROM documents WHERE root = %(root)s AND doc_id = ANY(%(doc_ids)s);

-- name: insert_document
INSERT INTO documents (root, doc_id, source, title, kind, content_hash, chunker, metadata, language)
VALUES (%(root)s, %(doc_id)s, %(source)s, %(title)s, %(kind)s, %(content_hash)s, %(chunker)s, %(metadata)s,
        %(language)s)
RETURNING id;

-- name: reserve_chunk_ids
SELECT nextval(pg_get_serial_sequence('chunks', 'id')) FROM generate_series(1, %(n)s);

-- name: copy_chunks
COPY chunks (id, document_id, seq, heading_path, text, content_hash, tokens, llm_tokens,
             start_offset, end_offset, metadata, language, terms)
FROM STDIN WITH (FORMAT BINARY);

-- name: copy_vectors
COPY {table} (chunk_id, embedding) FROM STDIN WITH (FORMAT BINARY);

-- name: count_chunks
SELECT count(*) FROM chunks;

-- name: vector_search
-- Each query's nearest chunks and their cosine (the convex fusion weighs it; RRF reads the order only).
-- The LIMITs are literals (settings, composed in), not parameters: with a parameter the generic plan assumes
-- a tenth of the rows, so PostgreSQL planned the statement again on every search (a custom plan, ~0.5 ms of its CPU).
-- The filtered variants keep them as parameters: their filter's values still choose their plan.
SELECT e.chunk_id, 1 - (e.embedding <=> %(embedding)s) AS cosine
FROM {table} e
ORDER BY e.embedding <=> %(embedding)s
LIMIT {candidates};

-- name: vector_search_filtered
-- With hnsw.iterative_scan = relaxed_order the index keeps scanning until enough rows pass the filter;
-- relaxed order means the rows are sorted again here.
WITH relaxed AS MATERIALIZED (
    SELECT e.chunk_id, e.embedding <=> %(embedding)s AS distance
    FROM {table} e
    JOIN chunks c ON c.id = e.chunk_id
    JOIN documents d ON d.id = c.document_id
    WHERE {filter}
    ORDER BY distance
    LIMIT %(candidates)s
)
SELECT chunk_id, 1 - distance AS cosine FROM relaxed ORDER BY distance, chunk_id;

-- name: vector_search_bit
-- The binary index's nearest `depth` by Hamming distance, re-ranked by exact cosine on the stored vector.
WITH near AS MATERIALIZED (
    SELECT e.chunk_id, e.embedding
    FROM {table} e
    ORDER BY binary_quantize(e.embedding)::bit({dims}) <~> binary_quantize(%(embedding)s)
    LIMIT {depth}
)
SELECT chunk_id, 1 - distance AS cosine
FROM (SELECT chunk_id, embedding <=> %(embedding)s AS distance FROM near) n
ORDER BY distance, chunk_id LIMIT {candidates};

-- name: vector_search_bit_filtered
WITH near AS MATERIALIZED (
    SELECT e.chunk_id, e.embedding
    FROM {table} e
    JOIN chunks c ON c.id = e.chunk_id
    JOIN documents d ON d.id = c.document_id
    WHERE {filter}
    ORDER BY binary_quantize(e.embedding)::bit({dims}) <~> binary_quantize(%(embedding)s)
    LIMIT %(depth)s
)
SELECT chunk_id, 1 - distance AS cosine
FROM (SELECT chunk_id, embedding <=> %(embedding)s AS distance FROM near) n
ORDER BY distance, chunk_id LIMIT %(candidates)s;

-- name: keyword_search
-- BM25 over the tsvector's lexemes: idf from term_stats (df, kept by triggers), tf from the lexeme's
-- positions, document length = chunk_terms.len. It reads only the narrow chunk_terms table (migration 010),
-- and chunks only when a filter needs a chunk's document or metadata ({source}). Candidates come from the GIN index through the query's
-- rarest lexemes (the rarest always, more while their chunk counts stay within a budget), so common
-- words do not make every chunk a candidate; when even the rarest is in more chunks than the budget
-- (a query of common words, a large corpus), the chunks holding the rarest few of them together are the
-- candidates (bench/scale_bm25.py: at 1M chunks 12x faster). Every query lexeme still counts in the score.
-- setweight + ts_filter cut each candidate's tsvector down to the query's lexemes before unnest.
WITH stats AS (
    SELECT chunks, lengths::float8 / greatest(chunks, 1) AS avgdl FROM corpus_stats
),
terms AS (
    SELECT t.lexeme, coalesce(s.df, 0) AS df,
           ln(1 + (stats.chunks - coalesce(s.df, 0) + 0.5)::float8 / (coalesce(s.df, 0) + 0.5)) AS idf
    FROM ({lexemes}) AS t (lexeme)
    CROSS JOIN stats
    LEFT JOIN term_stats s ON s.lexeme = t.lexeme
),
ranked AS (  -- query lexemes by df; `together`: the chunks expected to hold all of the rarest i of them
    SELECT lexeme, df, row_number() OVER w AS i, sum(df) OVER w AS running,
           stats.chunks * exp(sum(ln(df::float8 / greatest(stats.chunks, 1))) OVER w) AS together
    FROM terms, stats WHERE df > 0
    WINDOW w AS (ORDER BY df, lexeme)
),
picked AS (
    -- The rarest lexeme, and the next rarest while their chunk counts add up to the budget (OR); when
    -- even the rarest is in more chunks than the budget, the rarest few together (AND), as few as bring
    -- the expected count within the budget: a query of common words no longer scores tens of thousands.
    SELECT '''' || replace(replace(lexeme, '\', '\\'), '''', '\''') || '''' AS quoted,
           (SELECT min(df) FROM ranked) > %(budget)s::bigint AS conj
    FROM ranked
    WHERE running <= %(budget)s::bigint OR running = df
       OR ((SELECT min(df) FROM ranked) > %(budget)s::bigint
           AND i <= coalesce((SELECT min(i) FROM ranked WHERE together <= %(budget)s::bigint),
                             (SELECT max(i) FROM ranked)))
),
query AS (
    SELECT (CASE WHEN bool_or(conj) THEN string_agg(quoted, ' & ') ELSE string_agg(quoted, ' | ') END)::tsquery AS q,
           (SELECT array_agg(lexeme) FROM terms) AS lexemes
    FROM picked
),
-- At most `cap` candidates: a query whose only known words are common (one word in 41,000 of a million chunks)
-- would otherwise score every chunk holding them (300 ms of CPU at 1M, for a leg that can tell them
-- apart only by length and word counts). Past the cap the first ones in table order are scored.
candidates AS MATERIALIZED (
    SELECT k.id, k.len, k.tsv FROM query, {source}
    WHERE k.tsv @@ query.q AND {filter}
    LIMIT %(cap)s
)
SELECT k.id,
       sum(t.idf * cardinality(u.positions) * (%(k1)s::float8 + 1)
           / (cardinality(u.positions) + %(k1)s::float8 * (1 - %(b)s::float8 + %(b)s::float8 * k.len / stats.avgdl)))
       AS score
FROM query, stats, candidates k
CROSS JOIN LATERAL unnest(ts_filter(setweight(k.tsv, 'A', query.lexemes), ARRAY['a']::"char"[])) AS u
JOIN terms t ON t.lexeme = u.lexeme
GROUP BY k.id
ORDER BY score DESC, k.id
LIMIT %(candidates)s;

-- name: query_lexemes
-- A question's lexemes (ragvps/langs.py): as each of the readings given (configurations with their prepared texts),
-- or, for a question of no sure language, as each language of the knowledge base reads it (`simple` over the folded
-- text, each stemming configuration over the text itself; the readings given while it has none). Of several
-- readings, those whose lexemes the knowledge base knows best are kept (the share of them in term_stats, within
-- 0.1 of the best): a Spanish question read as English keeps `de` and `equipo`, which Spanish documents do not
-- hold, and would otherwise find the few documents taken for English by their rare words.
WITH readings AS (
    SELECT r.cfg, r.txt FROM unnest(%(languages)s::regconfig[], %(texts)s::text[]) AS r (cfg, txt)
    WHERE NOT %(every)s OR NOT EXISTS (SELECT FROM chunk_languages)
    UNION ALL
    SELECT k.language, CASE WHEN k.language = 'simple'::regconfig THEN %(folded)s ELSE %(text)s END
    FROM chunk_languages k WHERE %(every)s
),
lexemes AS (
    SELECT DISTINCT r.cfg, l FROM readings r, unnest(tsvector_to_array(to_tsvector(r.cfg, r.txt))) AS l
),
fit AS (
    SELECT x.cfg, avg((coalesce(s.df, 0) > 0)::int) AS known
    FROM lexemes x LEFT JOIN term_stats s ON s.lexeme = x.l GROUP BY x.cfg
)
SELECT DISTINCT x.l FROM lexemes x JOIN fit f ON f.cfg = x.cfg
WHERE f.known >= (SELECT max(known) FROM fit) - 0.1

-- name: keyword_source
chunk_terms k

-- name: keyword_source_filtered
chunk_terms k JOIN chunks c ON c.id = k.id

-- name: keyword_filter
EXISTS (SELECT FROM documents d WHERE d.id = c.document_id AND {filter})

-- name: filter_path_prefix
-- Only the filters in use go into a query: an always-true metadata test would still skew the planner's estimates.
starts_with(d.source, %(path_prefix)s)

-- name: filter_metadata
d.metadata || c.metadata @> %(metadata)s

-- name: chunk_details
SELECT c.id, d.doc_id, d.source, d.root, c.seq, c.heading_path, c.text, c.start_offset, c.end_offset
FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE c.id = ANY(%(ids)s);

-- name: chunk_cosine
-- chunk_evidence's cosine for one embedding set's table (a block of its own: composed into it)
(SELECT 1 - (e.embedding <=> %(embedding)s) FROM {table} e WHERE e.chunk_id = c.id)

-- name: chunk_evidence
-- chunk_details, with the rank-independent relevance of some chunks to a query: the cosine of the query vector and the chunk's
-- (chunk_cosine over the active table, or NULL without a query vector), and the share of the query's
-- IDF mass (BM25's idf, df from term_stats) whose lexemes the chunk contains. NULL share: the query has
-- no lexemes.
WITH stats AS (SELECT chunks FROM corpus_stats),
terms AS (
    SELECT DISTINCT t.lexeme,
           ln(1 + (stats.chunks - coalesce(s.df, 0) + 0.5)::float8 / (coalesce(s.df, 0) + 0.5)) AS idf
    FROM ({lexemes}) AS t (lexeme)
    CROSS JOIN stats
    LEFT JOIN term_stats s ON s.lexeme = t.lexeme
),
total AS (SELECT sum(idf) AS idf FROM terms)
SELECT c.id, d.doc_id, d.source, d.root, c.seq, c.heading_path, c.text, c.start_offset, c.end_offset,
       {cosine} AS cosine,
       (SELECT coalesce(sum(t.idf), 0) FROM chunk_terms k, unnest(tsvector_to_array(k.tsv)) AS l (lexeme)
        JOIN terms t ON t.lexeme = l.lexeme WHERE k.id = c.id) / nullif(total.idf, 0) AS share,
       c.metadata -> 'pages' AS pages
FROM chunks c JOIN documents d ON d.id = c.document_id, total
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

-- name: ingested_roots
SELECT DISTINCT root FROM documents ORDER BY root;

-- name: adopt_root
-- Documents a bundle brought under this folder's path (their root marked foreign) are this folder's from now on,
-- unless the folder has documents of its own already.
UPDATE documents SET root = %(root)s
WHERE root = %(foreign)s || %(root)s AND NOT EXISTS (SELECT 1 FROM documents WHERE root = %(root)s);

-- name: bump_generation
-- A change the chunk triggers do not see (vectors a worker stored, a set made active, an index swapped):
-- remembered answers retrieved before it miss from now on (migration 007).
UPDATE corpus_stats SET generation = generation + 1;

-- name: kb_facts
-- What `ragvps kb list` shows of the bound knowledge base.
SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks), s.model, s.vector_type,
       coalesce((SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i
                 WHERE i.indrelid = to_regclass(s.table_name)), 0),
       (SELECT max(updated_at) FROM documents)
FROM (SELECT 1) AS one LEFT JOIN embedding_sets s ON s.active;

-- name: vector_version
SELECT extversion FROM pg_extension WHERE extname = 'vector';

-- name: section_headings
-- The heading paths of one document's sections, in document order (follow-up suggestions for a chat client).
SELECT c.heading_path FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE d.source = %(path)s AND c.heading_path <> ''
GROUP BY c.heading_path ORDER BY min(c.seq);

-- name: top_headings
-- The most common top-level headings (tag suggestions for a chat client).
SELECT split_part(heading_path, ' > ', 1) FROM chunks WHERE heading_path <> ''
GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT %(n)s;

-- name: following_chunk
-- The chunk right after one (its document's next seq): what a chunk ending in a colon introduces.
SELECT c.text, c.start_offset FROM chunks c JOIN documents d ON d.id = c.document_id
WHERE d.doc_id = %(doc_id)s AND c.seq = %(seq)s
ORDER BY d.id LIMIT 1;

-- Terms re-indexed in each document's language (migration 014, store.relabel_languages): documents from before it.

-- name: unlabelled_chunks
SELECT c.document_id, c.id, c.heading_path, c.text
FROM chunks c
WHERE c.document_id IN (SELECT id FROM documents WHERE language IS NULL ORDER BY id LIMIT %(documents)s)
ORDER BY c.document_id, c.seq;

-- name: relabel_chunks
UPDATE chunks c SET language = r.cfg, terms = r.terms
FROM unnest(%(ids)s::bigint[], %(configs)s::regconfig[], %(terms)s::text[]) AS r (id, cfg, terms)
WHERE c.id = r.id;

-- name: label_documents
UPDATE documents d SET language = r.code
FROM unnest(%(ids)s::bigint[], %(codes)s::text[]) AS r (id, code)
WHERE d.id = r.id;

-- name: unlabelled_left
SELECT id FROM documents WHERE language IS NULL ORDER BY id LIMIT %(documents)s;
