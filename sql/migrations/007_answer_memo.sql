-- The answer memo: a question's answer found again without retrieving, while nothing it was retrieved from
-- can have changed. corpus_stats.generation counts every change that can change a search's result: each
-- write to chunks (the statement trigger below, in the writer's own transaction), and, from
-- ragvps.db.store.bump_generation, each batch of vectors a worker stores, an embedding set made active
-- and an index swapped. A memo row names the generation it was retrieved at; any other generation misses.
-- The row points at its answer_cache entry, so pruning or clearing the cache takes the memo with it.
ALTER TABLE corpus_stats ADD COLUMN generation bigint NOT NULL DEFAULT 0;

CREATE TABLE answer_memo (
    key         text PRIMARY KEY,        -- the question, the request and the settings that shape the answer
    generation  bigint NOT NULL,         -- corpus_stats.generation when it was retrieved
    answer_key  text NOT NULL REFERENCES answer_cache (key) ON DELETE CASCADE,
    retrieval   jsonb NOT NULL,          -- the sources shown, those left out, the evidence
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX answer_memo_answer_key ON answer_memo (answer_key);

CREATE OR REPLACE FUNCTION ragvps_chunks_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM term_stats;
        UPDATE corpus_stats SET chunks = 0, lengths = 0, generation = generation + 1;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH gone AS (
            SELECT lexeme, count(*) AS n
            FROM old_rows, unnest(tsvector_to_array(old_rows.tsv)) AS lexeme GROUP BY lexeme
        )
        UPDATE term_stats t SET df = t.df - gone.n FROM gone WHERE t.lexeme = gone.lexeme;
        DELETE FROM term_stats t
        WHERE t.df <= 0 AND t.lexeme IN (SELECT unnest(tsvector_to_array(tsv)) FROM old_rows);
        UPDATE corpus_stats SET chunks = chunks - s.n, lengths = lengths - s.l, generation = generation + 1
        FROM (SELECT count(*) AS n, coalesce(sum(length(tsv)), 0) AS l FROM old_rows) s;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO term_stats (lexeme, df)
        SELECT lexeme, count(*) FROM new_rows, unnest(tsvector_to_array(new_rows.tsv)) AS lexeme GROUP BY lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = term_stats.df + excluded.df;
        UPDATE corpus_stats SET chunks = chunks + s.n, lengths = lengths + s.l, generation = generation + 1
        FROM (SELECT count(*) AS n, coalesce(sum(length(tsv)), 0) AS l FROM new_rows) s;
    END IF;
    RETURN NULL;
END
$$;
