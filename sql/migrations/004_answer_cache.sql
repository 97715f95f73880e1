-- The answer cache (ragvps/generate/cache.py). The key hashes the normalised question, the generator,
-- its model and settings, the prompt version and the ordered (chunk id, sent-text hash) list actually
-- sent, so a changed chunk misses by construction; ingest and reindex prune entries whose chunks are gone.
CREATE TABLE answer_cache (
    key               text PRIMARY KEY,
    question          text NOT NULL,          -- normalised, for people reading the table
    generator         text NOT NULL,
    model             text NOT NULL,
    prompt_version    text NOT NULL,
    chunk_ids         text[] NOT NULL,        -- "<doc_id>#<seq>", in the order sent
    sent_hashes       text[] NOT NULL,        -- sha256 of heading_path || E'\n' || text, as sent
    answer            jsonb NOT NULL,         -- text, citations, usage: never the API key
    prompt_tokens     integer NOT NULL,
    completion_tokens integer NOT NULL,
    hits              bigint NOT NULL DEFAULT 0,
    tokens_saved      bigint NOT NULL DEFAULT 0,
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_hit_at       timestamptz
);
