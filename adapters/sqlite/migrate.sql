-- Statements of MigrateInbox and of the schema checks (migrate.go). Identifiers in
-- double braces are substituted and quoted as in queries.sql.

-- name: CheckInbox
-- Fails when one of the inbox's tables is missing; reads no row.
SELECT count(*) FROM (
    SELECT 1 AS x FROM {{inbox}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{inbox_horizons}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{inbox_versions}} WHERE 1 = 0
) t

-- name: BootstrapInbox
-- The inbox's own bookkeeping table (Bootstrap creates it with the outbox's): MigrateInbox
-- records the inbox's migrations in it and takes the write lock on it (InboxWriteLock).
CREATE TABLE IF NOT EXISTS {{inbox_migrations}} (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
);
