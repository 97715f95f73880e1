-- Connected sources (migration 012), used by ragvps.db.sources.

-- name: insert_source
INSERT INTO sources (name, kind, location, config) VALUES (%(name)s, %(kind)s, %(location)s, %(config)s)
ON CONFLICT (name) DO NOTHING RETURNING name;

-- name: list_sources
SELECT s.name, s.kind, s.location, s.config, s.cursor, s.created_at, s.synced_at, s.state, s.error, s.seconds,
       (SELECT count(*) FROM source_items i WHERE i.source = s.name) AS items
FROM sources s ORDER BY s.name;

-- name: delete_source
DELETE FROM sources WHERE name = %(name)s RETURNING name;

-- name: items
SELECT key, rel, url, version FROM source_items WHERE source = %(source)s;

-- name: delete_items
DELETE FROM source_items WHERE source = %(source)s;

-- name: insert_item
INSERT INTO source_items (source, key, rel, url, version) VALUES (%(source)s, %(key)s, %(rel)s, %(url)s, %(version)s);

-- name: finish_sync
UPDATE sources SET cursor = %(cursor)s, synced_at = now(), state = %(state)s, error = %(error)s,
                   seconds = %(seconds)s
WHERE name = %(name)s;
