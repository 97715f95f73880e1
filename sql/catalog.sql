-- The catalog's queries (ragvps/db/catalog.py). Every name is schema-qualified: they run whatever the
-- connection's search_path.

-- name: create_catalog
CREATE SCHEMA IF NOT EXISTS ragvps;
CREATE TABLE IF NOT EXISTS ragvps.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: catalog_migrations
SELECT version FROM ragvps.migrations ORDER BY version;

-- name: record_catalog_migration
INSERT INTO ragvps.migrations (version, name) VALUES (%(version)s, %(name)s);

-- name: kb_get
SELECT id, name, schema_name, settings, created_at FROM ragvps.knowledge_bases WHERE name = %(name)s;

-- name: kb_list
SELECT id, name, schema_name, settings, created_at FROM ragvps.knowledge_bases ORDER BY name;

-- name: kb_insert
WITH next AS (SELECT nextval(pg_get_serial_sequence('ragvps.knowledge_bases', 'id')) AS id)
INSERT INTO ragvps.knowledge_bases (id, name, schema_name, settings)
SELECT id, %(name)s, 'kb_' || id, %(settings)s FROM next
RETURNING id, name, schema_name, settings, created_at;

-- name: kb_delete
DELETE FROM ragvps.knowledge_bases WHERE name = %(name)s RETURNING schema_name;

-- name: kb_rename
UPDATE ragvps.knowledge_bases SET name = %(new)s WHERE name = %(old)s RETURNING id;

-- name: kb_settings
UPDATE ragvps.knowledge_bases SET settings = settings || %(settings)s WHERE name = %(name)s RETURNING id;

-- name: schema_exists
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = %(schema)s);

-- name: legacy_tables
-- What today's main made in public: its tables (with their indexes and sequences) and trigger functions.
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
ORDER BY c.relname;

-- name: legacy_functions
SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.proname LIKE 'ragvps\_%'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e');

-- name: key_insert
INSERT INTO ragvps.api_keys (name, key_hash, every_kb) VALUES (%(name)s, %(hash)s, %(every)s) RETURNING id;

-- name: grant_insert
INSERT INTO ragvps.key_grants (key_id, kb_id, role) VALUES (%(key_id)s, %(kb_id)s, %(role)s);

-- name: key_list
SELECT k.name, k.created_at, k.last_used_at,
       coalesce(array_agg(kb.name || ':' || g.role ORDER BY kb.name) FILTER (WHERE kb.name IS NOT NULL), '{}')
       || CASE WHEN k.every_kb IS NULL THEN '{}'::text[] ELSE ARRAY['*:' || k.every_kb] END
FROM ragvps.api_keys k
LEFT JOIN ragvps.key_grants g ON g.key_id = k.id
LEFT JOIN ragvps.knowledge_bases kb ON kb.id = g.kb_id
GROUP BY k.id ORDER BY k.name;

-- name: key_get_by_name
SELECT id FROM ragvps.api_keys WHERE name = %(name)s;

-- name: key_delete
DELETE FROM ragvps.api_keys WHERE name = %(name)s RETURNING id;

-- name: key_count
SELECT count(*) FROM ragvps.api_keys;

-- name: admin_keys_left
-- Keys that would still be admin somewhere once `name` is gone.
SELECT count(*) FROM ragvps.api_keys k
WHERE k.name <> %(name)s AND (k.every_kb = 'admin'
      OR EXISTS (SELECT 1 FROM ragvps.key_grants g WHERE g.key_id = k.id AND g.role = 'admin'));

-- name: key_is_admin
SELECT EXISTS (SELECT 1 FROM ragvps.api_keys k WHERE k.name = %(name)s AND (k.every_kb = 'admin'
               OR EXISTS (SELECT 1 FROM ragvps.key_grants g WHERE g.key_id = k.id AND g.role = 'admin')));

-- name: key_grants
-- The roles a presented key holds, by knowledge base name, and its role on every one; no row: no such key.
SELECT k.id, k.name, kb.name, g.role, k.every_kb FROM ragvps.api_keys k
LEFT JOIN ragvps.key_grants g ON g.key_id = k.id
LEFT JOIN ragvps.knowledge_bases kb ON kb.id = g.kb_id
WHERE k.key_hash = %(hash)s;

-- name: key_used
UPDATE ragvps.api_keys SET last_used_at = now()
WHERE id = %(id)s AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: kb_gauges
-- What /metrics shows of every knowledge base at a scrape: the bytes of its vector indexes (HNSW), whether its
-- embedding queue exists (a schema not migrated yet has none), and the server's shared_buffers. With
-- queue_depths, the one read that crosses schemas (sizes and counts only).
SELECT k.name, k.schema_name,
       coalesce((SELECT sum(pg_relation_size(c.oid))
                 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_am am ON am.oid = c.relam
                 WHERE n.nspname = k.schema_name AND c.relkind = 'i' AND am.amname = 'hnsw'), 0)::bigint,
       to_regclass(format('%I.embed_queue', k.schema_name)) IS NOT NULL
           AND to_regclass(format('%I.ingest_jobs', k.schema_name)) IS NOT NULL,
       pg_size_bytes(current_setting('shared_buffers'))
FROM ragvps.knowledge_bases k
ORDER BY k.name;

-- name: queue_depth
-- One knowledge base's work, a branch of a UNION ALL over them: chunks waiting in the embedding queue, upload
-- jobs open, chunks its jobs have embedded, files its jobs failed.
SELECT {name}::text, (SELECT count(*) FROM {queue}),
       (SELECT count(*) FROM {jobs} WHERE state IN ('queued', 'running')),
       (SELECT coalesce(sum(embedded), 0) FROM {jobs})::bigint,
       (SELECT count(*) FROM {files} WHERE state = 'failed')
