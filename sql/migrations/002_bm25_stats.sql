-- BM25 statistics for the keyword leg: how many chunks hold each lexeme (df), and corpus totals
-- (chunk count, summed tsvector lengths for the average length). Statement triggers on chunks keep
-- them exact for every write path: COPY, cascading deletes from documents, updates, truncation.
CREATE TABLE term_stats (
    lexeme text PRIMARY KEY,
    df     integer NOT NULL
);

CREATE TABLE corpus_stats (
    id      boolean PRIMARY KEY DEFAULT true CHECK (id),
    chunks  bigint NOT NULL,
    lengths bigint NOT NULL          -- sum of length(tsv): distinct lexemes per chunk
);

INSERT INTO corpus_stats (chunks, lengths) SELECT count(*), coalesce(sum(length(tsv)), 0) FROM chunks;
INSERT INTO term_stats (lexeme, df) SELECT word, ndoc FROM ts_stat('SELECT tsv FROM chunks');

CREATE FUNCTION ragvps_chunks_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM term_stats;
        UPDATE corpus_stats SET chunks = 0, lengths = 0;
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
        UPDATE corpus_stats SET chunks = chunks - s.n, lengths = lengths - s.l
        FROM (SELECT count(*) AS n, coalesce(sum(length(tsv)), 0) AS l FROM old_rows) s;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO term_stats (lexeme, df)
        SELECT lexeme, count(*) FROM new_rows, unnest(tsvector_to_array(new_rows.tsv)) AS lexeme GROUP BY lexeme
        ON CONFLICT (lexeme) DO UPDATE SET df = term_stats.df + excluded.df;
        UPDATE corpus_stats SET chunks = chunks + s.n, lengths = lengths + s.l
        FROM (SELECT count(*) AS n, coalesce(sum(length(tsv)), 0) AS l FROM new_rows) s;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER chunks_stats_insert AFTER INSERT ON chunks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ragvps_chunks_stats();
CREATE TRIGGER chunks_stats_delete AFTER DELETE ON chunks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ragvps_chunks_stats();
CREATE TRIGGER chunks_stats_update AFTER UPDATE ON chunks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ragvps_chunks_stats();
CREATE TRIGGER chunks_stats_truncate AFTER TRUNCATE ON chunks
    FOR EACH STATEMENT EXECUTE FUNCTION ragvps_chunks_stats();
