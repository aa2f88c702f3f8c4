-- Statements of the schema checks (migrate.go). Identifiers in
-- double braces are substituted and quoted as in queries.sql.

-- name: CheckInbox
-- Fails when one of the inbox's tables is missing; reads no row.
SELECT count(*) FROM (
    SELECT 1 AS x FROM {{inbox}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{inbox_horizons}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{inbox_versions}} WHERE 1 = 0
) t
