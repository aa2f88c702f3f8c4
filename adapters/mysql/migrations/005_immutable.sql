-- Semantic columns are immutable after insert, as on PostgreSQL: an UPDATE that changes any of
-- them fails with SQLSTATE 45000 (error 1644) and changes nothing; the relay's status columns
-- (published_at, attempts, next_attempt_at, last_error, parked_at) may change. MySQL has no
-- UPDATE OF, so the trigger runs for every UPDATE of the outbox and compares null-safely (<=>).
-- It is an AFTER trigger: a BEFORE trigger may assign NEW, so the server puts every NEW column
-- it names into the statement's write set, and a minimal binlog row image of a relay mark would
-- then carry the whole row (payload included). A failing AFTER trigger fails its statement, and
-- InnoDB rolls the statement back, so a refused UPDATE still changes nothing.
-- splitSQL ends a statement only at a ';' that ends a line: the body's inner ';' stays on the
-- line of END IF.
CREATE TRIGGER IF NOT EXISTS {{outbox_immutable}} AFTER UPDATE ON {{outbox}} FOR EACH ROW
	IF NOT (NEW.seq <=> OLD.seq AND NEW.id <=> OLD.id AND NEW.aggregate_type <=> OLD.aggregate_type
		AND NEW.aggregate_id <=> OLD.aggregate_id AND NEW.aggregate_version <=> OLD.aggregate_version
		AND NEW.type <=> OLD.type AND NEW.schema_id <=> OLD.schema_id
		AND NEW.partition_key <=> OLD.partition_key AND NEW.destination <=> OLD.destination
		AND NEW.payload <=> OLD.payload AND NEW.headers <=> OLD.headers AND NEW.tenant <=> OLD.tenant
		AND NEW.causation_id <=> OLD.causation_id AND NEW.correlation_id <=> OLD.correlation_id
		AND NEW.lane <=> OLD.lane AND NEW.created_at <=> OLD.created_at)
	THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'outbox: only published_at, attempts, next_attempt_at, last_error and parked_at may change'; END IF;
