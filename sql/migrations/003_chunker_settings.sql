-- The chunker settings behind each documents.chunker key, and a pin on an embedding set.
-- `ragvps reindex` switches models while keeping the chunks it already has; it pins their settings on
-- the new set, so the next `ingest` cuts new documents the same way instead of re-chunking (and
-- re-embedding) everything to the new model's default chunk size.
CREATE TABLE chunker_settings (
    key    text PRIMARY KEY,               -- ChunkerConfig.key(), as in documents.chunker
    config jsonb NOT NULL
);
ALTER TABLE embedding_sets ADD COLUMN chunker text;  -- pinned chunker key, or NULL: the model's defaults
