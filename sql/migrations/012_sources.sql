-- Connected sources (issue 46): a git repository, a web site or an S3 bucket kept in sync with the knowledge
-- base by `ragvps sync`. sql/sources.sql has the queries. Each source's items are mirrored as files under
-- KB_DIR/sources/<name>/ and ingested as that folder; source_items remembers each item's version (git blob,
-- ETag or Last-Modified), so a sync reads only what changed and removes what is gone.
CREATE TABLE sources (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('git', 'web', 's3')),
    location    text NOT NULL,              -- the repository URL or path, the start or sitemap URL, the bucket
    config      jsonb NOT NULL DEFAULT '{}', -- branch, globs, limits, prefix, endpoint (never a secret)
    cursor      text,                       -- git: the commit last synced
    created_at  timestamptz NOT NULL DEFAULT now(),
    synced_at   timestamptz,                -- the last sync's end
    state       text NOT NULL DEFAULT 'new' CHECK (state IN ('new', 'ok', 'partial', 'failed')),
    error       text,                       -- why the last sync failed, or what it skipped
    seconds     double precision            -- how long the last sync took
);

CREATE TABLE source_items (
    source      text NOT NULL REFERENCES sources (name) ON DELETE CASCADE,
    key         text NOT NULL,              -- the file's path, the page's URL, the object's key
    rel         text NOT NULL,              -- its file in the mirror folder
    url         text NOT NULL,              -- what a citation links to
    version     text NOT NULL,              -- git blob id, ETag or Last-Modified, S3 ETag
    PRIMARY KEY (source, key)
);
