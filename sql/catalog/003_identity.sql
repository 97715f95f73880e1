-- People besides keys (issue 44): the users who signed in (their groups as the identity provider said at their
-- last sign-in, which a chat front end's forwarded user is looked up by), and the audit log of who did what.
CREATE TABLE ragvps.users (
    subject    text PRIMARY KEY,            -- the provider's `sub`, or `proxy:NAME` for a proxy's user
    email      text,
    name       text,
    groups     text[] NOT NULL DEFAULT '{}',
    via        text NOT NULL,               -- oidc | proxy
    seen_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX users_email ON ragvps.users (lower(email));

CREATE TABLE ragvps.audit (
    id       bigserial PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    who      text NOT NULL,                 -- `key NAME`, `user EMAIL (oidc)`, `settings key`, `open`
    action   text NOT NULL,                 -- search | ask | chat | upload | delete | kb_create | kb_drop ...
    kb       text,
    status   int NOT NULL,
    route    text NOT NULL,
    request  text,                          -- the request id (X-Request-Id), to find its log line
    question text                           -- only with the setting log_questions
);
CREATE INDEX audit_at ON ragvps.audit (at);
CREATE INDEX audit_who ON ragvps.audit (who, at);
