-- A key may hold a role on every knowledge base, present and future (`ragvps key create --all-kbs`), besides
-- its grants on named ones. NULL: the grants alone.
ALTER TABLE ragvps.api_keys ADD COLUMN every_kb text CHECK (every_kb IN ('read', 'write', 'admin'));
