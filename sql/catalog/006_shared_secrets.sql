-- Several servers on one database (issue 54): the key that signs session cookies, when the setting
-- session_secret is empty, is kept here, so that a session made on one server is valid on every other. Made once
-- by the first server that needs it (from data_dir/session.key where an earlier release made one, so those
-- sessions stay valid). Anyone who can read this table can sign sessions: it is the database's own secret.
CREATE TABLE ragvps.shared_secrets (
    name    text PRIMARY KEY,
    value   bytea NOT NULL CHECK (length(value) >= 32),
    made_at timestamptz NOT NULL DEFAULT now()
);
