-- The catalog (schema ragvps): the knowledge bases of this database, each in a schema of its own, and the API
-- keys with the roles they grant. A knowledge base's rows live only in its schema, which the App binds its
-- connections to (search_path); no query of ragvps names a knowledge base's schema.
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;  -- every knowledge base's schema uses public's types

CREATE TABLE ragvps.knowledge_bases (
    id          serial PRIMARY KEY,
    name        text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    schema_name text NOT NULL UNIQUE,
    settings    jsonb NOT NULL DEFAULT '{}'::jsonb,  -- flat setting name -> value: its model contract, its tuning
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE ragvps.api_keys (
    id           serial PRIMARY KEY,
    name         text NOT NULL UNIQUE,
    key_hash     text NOT NULL UNIQUE,  -- sha256 of the key; the key itself is shown once and never stored
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

CREATE TABLE ragvps.key_grants (
    key_id int  NOT NULL REFERENCES ragvps.api_keys (id) ON DELETE CASCADE,
    kb_id  int  NOT NULL REFERENCES ragvps.knowledge_bases (id) ON DELETE CASCADE,
    role   text NOT NULL CHECK (role IN ('read', 'write', 'admin')),
    PRIMARY KEY (key_id, kb_id)
);
