-- Sessions signed out before they expired (issue 50): a session cookie names its `sid`, and one listed here is
-- refused until `until` (its own expiry), after which the row is of no use and is removed.
CREATE TABLE ragvps.revoked_sessions (
    sid   text PRIMARY KEY,
    until timestamptz NOT NULL
);
