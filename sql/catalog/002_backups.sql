-- The backups `ragvps backup` wrote and `ragvps restore-check` proved, for the line in `ragvps stats`.
CREATE TABLE ragvps.backups (
    id         serial PRIMARY KEY,
    kb_name    text NOT NULL,
    file       text NOT NULL,
    bytes      bigint NOT NULL,
    chunks     bigint NOT NULL,
    made_at    timestamptz NOT NULL DEFAULT now(),
    checked_at timestamptz,              -- when restore-check passed on it; NULL: not checked or failed
    check_note text
);
CREATE INDEX backups_kb ON ragvps.backups (kb_name, made_at DESC);
