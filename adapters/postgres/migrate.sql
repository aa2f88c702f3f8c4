-- Statements of the schema checks (migrate.go). Identifiers in
-- double braces are substituted and quoted as in queries.sql.

-- name: CheckInbox
-- Fails when one of the inbox's tables is missing; reads no row.
SELECT count(*) FROM (
    SELECT 1 AS x FROM {{inbox}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{horizons}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{versions}} WHERE 1 = 0
) t

-- name: InboxScoped
-- 1 when the inbox has the tenant column of migration 0009 (its key holds source and tenant),
-- 0 when it was migrated by an earlier version. $1: the inbox's qualified, quoted name.
SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = 'tenant' AND NOT attisdropped

-- name: InboxLayout
-- The inbox's kind ('r' a plain table, 'p' partitioned) and its comment (a partitioned inbox's
-- records its layout there, see inboxLayout); no row when it does not exist. $1: the inbox's
-- qualified, quoted name.
SELECT c.relkind::text, coalesce(obj_description(c.oid, 'pg_class'), '') FROM pg_class AS c WHERE c.oid = to_regclass($1)

-- name: InboxComment
-- Records a new partitioned inbox's layout: {{value}} is a literal the adapter quotes.
COMMENT ON TABLE {{inbox}} IS {{value}}
