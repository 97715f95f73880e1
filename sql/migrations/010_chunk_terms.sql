-- The keyword leg's own narrow table (issue 34): what BM25 scoring reads of a chunk (its tsvector and its
-- length) moves out of the wide chunks table, whose text made the leg's candidate reads miss the page cache
-- of a 4 GB box at 1M chunks. docs/search.md says why this layout and not a postings table.
-- The existing tsvectors are moved, not recomputed; the vectors are untouched (no re-embedding).
-- No foreign key to chunks: a cascade would delete row by row and fire the statistics per row; the chunks
-- statement triggers keep this table and the BM25 statistics exact for every write path instead.
CREATE TABLE chunk_terms (
    id   bigint PRIMARY KEY,         -- chunks.id
    len  integer NOT NULL,           -- length(tsv): distinct lexemes, BM25's document length
    tsv  tsvector NOT NULL
);

INSERT INTO chunk_terms (id, len, tsv) SELECT id, length(tsv), tsv FROM chunks ORDER BY id;
CREATE INDEX chunk_terms_tsv_idx ON chunk_terms USING gin (tsv);
DROP INDEX chunks_tsv_idx;
ALTER TABLE chunks DROP COLUMN tsv;

CREATE OR REPLACE FUNCTION ragvps_chunks_stats() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    emptied text[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE chunk_terms;
        DELETE FROM term_stats;
        UPDATE corpus_stats SET chunks = 0, lengths = 0, generation = generation + 1;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        WITH gone AS (
            DELETE FROM chunk_terms k USING old_rows o WHERE k.id = o.id RETURNING k.len, k.tsv
        ),
        lexemes AS (
            SELECT lexeme, count(*) AS n FROM gone, unnest(tsvector_to_array(gone.tsv)) AS lexeme GROUP BY lexeme
        ),
        lowered AS (
            UPDATE term_stats t SET df = t.df - l.n FROM lexemes l WHERE t.lexeme = l.lexeme RETURNING t.lexeme, t.df
        ),
        totals AS (
            UPDATE corpus_stats SET chunks = chunks - s.n, lengths = lengths - s.l, generation = generation + 1
            FROM (SELECT count(*) AS n, coalesce(sum(len), 0) AS l FROM gone) s
        )
        SELECT array_agg(lexeme) INTO emptied FROM lowered WHERE df <= 0;
        IF emptied IS NOT NULL THEN
            DELETE FROM term_stats WHERE lexeme = ANY (emptied) AND df <= 0;
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        WITH added AS (
            INSERT INTO chunk_terms (id, len, tsv)
            SELECT id, length(v), v FROM new_rows, to_tsvector(new_rows.language, new_rows.heading_path || ' ' || new_rows.text) AS v
            RETURNING len, tsv
        ),
        raised AS (
            INSERT INTO term_stats (lexeme, df)
            SELECT lexeme, count(*) FROM added, unnest(tsvector_to_array(added.tsv)) AS lexeme GROUP BY lexeme
            ON CONFLICT (lexeme) DO UPDATE SET df = term_stats.df + excluded.df
        )
        UPDATE corpus_stats SET chunks = chunks + s.n, lengths = lengths + s.l, generation = generation + 1
        FROM (SELECT count(*) AS n, coalesce(sum(len), 0) AS l FROM added) s;
    END IF;
    RETURN NULL;
END
$$;
