-- Lane count changes (Store.ResizeLanes, `outboxkit lanes resize`): the immutability trigger of
-- 005_immutable allows one more change, the lane alone, while the meta row 'lanes_resize'
-- exists. A resize or a replay inserts that row and deletes it again in its own transaction, so
-- no other transaction ever sees it (InnoDB's reads see only committed rows of others). The
-- meta table is read only for a row whose lane changed (OR stops at the first true operand), so
-- a relay's mark costs what it did.
-- Migrate runs this file only when the trigger lacks the exemption (an outbox migrated by an
-- earlier version, or one 005 has just created), then records the meta row
-- 'migration:008_lanes_resize' (which ResizeLanes requires and later Migrate calls find);
-- MigrationSQL includes the file, after 005, and the row. MySQL has no CREATE OR REPLACE
-- TRIGGER: between the two statements the outbox has no guard.
-- splitSQL ends a statement only at a ';' that ends a line: the body's inner ';' stays on the
-- line of END IF.
DROP TRIGGER IF EXISTS {{outbox_immutable}};
CREATE TRIGGER {{outbox_immutable}} AFTER UPDATE ON {{outbox}} FOR EACH ROW
	IF NOT (NEW.seq <=> OLD.seq AND NEW.id <=> OLD.id AND NEW.aggregate_type <=> OLD.aggregate_type
		AND NEW.aggregate_id <=> OLD.aggregate_id AND NEW.aggregate_version <=> OLD.aggregate_version
		AND NEW.type <=> OLD.type AND NEW.schema_id <=> OLD.schema_id
		AND NEW.partition_key <=> OLD.partition_key AND NEW.destination <=> OLD.destination
		AND NEW.payload <=> OLD.payload AND NEW.headers <=> OLD.headers AND NEW.tenant <=> OLD.tenant
		AND NEW.causation_id <=> OLD.causation_id AND NEW.correlation_id <=> OLD.correlation_id
		AND NEW.created_at <=> OLD.created_at
		AND (NEW.lane <=> OLD.lane OR EXISTS (SELECT 1 FROM {{meta}} WHERE name = 'lanes_resize')))
	THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'outbox: only published_at, attempts, next_attempt_at, last_error and parked_at may change'; END IF;
