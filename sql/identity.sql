-- The users and the audit log (ragvps/db/identity.py); schema-qualified, whatever the search_path.

-- name: user_seen
INSERT INTO ragvps.users (subject, email, name, groups, via) VALUES (%(subject)s, %(email)s, %(name)s, %(groups)s, %(via)s)
ON CONFLICT (subject) DO UPDATE SET email = EXCLUDED.email, name = EXCLUDED.name, groups = EXCLUDED.groups,
                                    via = EXCLUDED.via, seen_at = now();

-- name: user_by_email
-- The record of the user who signed in with this address (through the provider or a trusted proxy): two at
-- most, so that the caller sees when two subjects share it (then neither's groups are anyone's).
SELECT subject, email, name, groups FROM ragvps.users
WHERE lower(email) = lower(%(email)s) AND via IN ('oidc', 'proxy')
ORDER BY seen_at DESC LIMIT 2;

-- name: user_list
SELECT subject, email, name, groups, via, seen_at FROM ragvps.users ORDER BY seen_at DESC;

-- name: audit_insert
INSERT INTO ragvps.audit (who, action, kb, status, route, request, question)
VALUES (%(who)s, %(action)s, %(kb)s, %(status)s, %(route)s, %(request)s, %(question)s);

-- name: audit_prune
DELETE FROM ragvps.audit WHERE at < now() - make_interval(days => %(days)s);

-- name: audit_query
SELECT at, who, action, kb, status, route, request, question FROM ragvps.audit
WHERE at >= %(since)s
  AND (%(who)s::text IS NULL OR who ILIKE '%%' || %(who)s || '%%')
  AND (%(kb)s::text IS NULL OR kb = %(kb)s)
  AND (%(action)s::text IS NULL OR action = %(action)s)
ORDER BY at DESC, id DESC LIMIT %(limit)s;

-- name: session_revoke
INSERT INTO ragvps.revoked_sessions (sid, until) VALUES (%(sid)s, to_timestamp(%(until)s)) ON CONFLICT (sid) DO NOTHING;

-- name: session_revoked_prune
DELETE FROM ragvps.revoked_sessions WHERE until < now();

-- name: session_revoked
SELECT 1 FROM ragvps.revoked_sessions WHERE sid = %(sid)s;

-- name: shared_secret_keep
-- The first server to ask makes it; the others read that one.
INSERT INTO ragvps.shared_secrets (name, value) VALUES (%(name)s, %(value)s) ON CONFLICT (name) DO NOTHING;

-- name: shared_secret
SELECT value FROM ragvps.shared_secrets WHERE name = %(name)s;
