-- Statements of the schema checks (migrate.go). Identifiers in
-- double braces are substituted and quoted as in queries.sql.

-- name: CheckInbox
-- Fails when one of the inbox's tables is missing (error 1146) or the inbox's records lack
-- source and tenant (error 1054, migration 011); reads no row.
SELECT count(*) FROM (
    SELECT 1 AS x FROM {{inbox}} WHERE source = '' AND tenant = '' AND 1 = 0
    UNION ALL SELECT 1 FROM {{horizons}} WHERE 1 = 0
    UNION ALL SELECT 1 FROM {{versions}} WHERE 1 = 0
) t
