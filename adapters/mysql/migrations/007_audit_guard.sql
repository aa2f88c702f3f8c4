-- Audit rows stay as written, as on PostgreSQL: an inbox prune (PruneInboxAudited) writes its
-- row with rows_affected -1 when it raises the horizon and sets the records it deleted once its
-- deletions finished; any other UPDATE of an audit row fails with SQLSTATE 45000 (error 1644)
-- and changes nothing (an AFTER trigger, as 005_immutable's: a failing one fails its statement,
-- which InnoDB rolls back). A row is thus changed at most once, from -1, and only in
-- rows_affected.
-- splitSQL ends a statement only at a ';' that ends a line: the body's inner ';' stays on the
-- line of END IF.
CREATE TRIGGER IF NOT EXISTS {{audit_guard}} AFTER UPDATE ON {{audit}} FOR EACH ROW
	IF NOT (OLD.rows_affected = -1 AND NEW.rows_affected >= 0 AND NEW.id <=> OLD.id
		AND NEW.at <=> OLD.at AND NEW.actor <=> OLD.actor AND NEW.command <=> OLD.command
		AND NEW.arguments <=> OLD.arguments)
	THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'outbox audit: rows are append-only (only a row holding rows_affected -1 gets its count, once)'; END IF;
