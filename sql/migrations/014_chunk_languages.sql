-- Every language a team writes in (issue 52): each chunk is indexed with its document's language.
-- chunks.language (a regconfig, per chunk since 001) now comes from the document's detected language (ragvps/langs.py)
-- instead of the one `language` setting; chunks.terms holds the text the keyword leg indexes when PostgreSQL cannot
-- read the chunk's own (Chinese cut into words by jieba, Japanese and Thai in character pairs, Polish and other
-- unstemmed languages with their accents folded); NULL: heading_path || ' ' || text, as before.
-- documents.language is the ISO 639-1 code detected ('' when unsure: the setting's configuration); NULL for the
-- documents ingested before this migration, whose terms the next `ragvps ingest` or `ragvps reindex` re-indexes
-- in their language (store.relabel_languages): their terms only, never their vectors.
-- chunk_languages counts the chunks of each configuration: the languages a question is read in.
ALTER TABLE chunks ADD COLUMN terms text;
ALTER TABLE documents ADD COLUMN language text;
CREATE TABLE chunk_languages (
    language regconfig PRIMARY KEY,
    chunks   bigint NOT NULL
);
INSERT INTO chunk_languages (language, chunks) SELECT language, count(*) FROM chunks GROUP BY language;

CREATE OR REPLACE FUNCTION ragvps_chunks_stats() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    emptied text[];
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        TRUNCATE chunk_terms;
        TRUNCATE chunk_languages;
        DELETE FROM term_stats;
        UPDATE corpus_stats SET chunks = 0, lengths = 0, generation = generation + 1;
        RETURN NULL;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        UPDATE chunk_languages l SET chunks = l.chunks - o.n
        FROM (SELECT language, count(*) AS n FROM old_rows GROUP BY language) o WHERE l.language = o.language;
        DELETE FROM chunk_languages WHERE chunks <= 0;
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
        INSERT INTO chunk_languages (language, chunks)
        SELECT language, count(*) FROM new_rows GROUP BY language
        ON CONFLICT (language) DO UPDATE SET chunks = chunk_languages.chunks + excluded.chunks;
        WITH added AS (
            INSERT INTO chunk_terms (id, len, tsv)
            SELECT id, length(v), v
            FROM new_rows, to_tsvector(new_rows.language, coalesce(new_rows.terms, new_rows.heading_path || ' ' || new_rows.text)) AS v
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
