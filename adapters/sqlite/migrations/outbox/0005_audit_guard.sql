-- Audit rows stay as written, as on PostgreSQL and MySQL/MariaDB: only a row holding
-- rows_affected -1 (an unfinished inbox prune there; SQLite's PruneInboxAudited writes its row
-- complete, in one transaction) may get its count, once; any other UPDATE of an audit row fails
-- (RAISE(ABORT)) and changes nothing.
CREATE TRIGGER {{audit_guard}} BEFORE UPDATE ON {{audit}} FOR EACH ROW
WHEN OLD.rows_affected <> -1 OR NEW.rows_affected < 0 OR NEW.id IS NOT OLD.id
    OR NEW.at IS NOT OLD.at OR NEW.actor IS NOT OLD.actor OR NEW.command IS NOT OLD.command
    OR NEW.arguments IS NOT OLD.arguments
BEGIN
    SELECT RAISE(ABORT, 'outbox audit: rows are append-only (only a row holding rows_affected -1 gets its count, once)');
END;
