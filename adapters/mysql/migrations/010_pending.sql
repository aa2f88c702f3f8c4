-- The narrow pending layout (issue 15, item 3), as on PostgreSQL (0008_pending): the relay no
-- longer rewrites outbox rows. Marking a ~1.1 KiB row published rewrote it and logged its row
-- image; now the relay's status lives in a narrow table with one row per unpublished record, and
-- a record is published when its pending row is gone.
--
-- {{pending}}: one row per unpublished record, written in the writer's transaction by the
-- insert trigger below (for every writer, this version's and earlier ones: one way of writing
-- it, and the writer's statements stay as they were). The relay's fetch walks it in seq order
-- and joins the outbox for the record; a settle deletes the published rows (and logs them in
-- {{settled}}), and failures, parking and unparking update only it. The lane follows the
-- outbox row's (lane changes, ResizeLanes and Replay, update the outbox row under migration
-- 008's exemption and the update trigger copies the lane), so a delete-on-publish settle may
-- keep deleting outbox rows by lane.
-- failed_lane: the lane of a row that failed at least once (retrying or parked), NULL otherwise,
-- as in the outbox (MariaDB has no partial indexes): ix_failed is the tiny index of the rows
-- that may block their partition key (the fetch's blocked keys, Unpark, parked counts).
CREATE TABLE IF NOT EXISTS {{pending}} (
	seq             BIGINT NOT NULL PRIMARY KEY,
	lane            INT NOT NULL,
	partition_key   VARBINARY(1020) NOT NULL,
	created_at      DATETIME(6) NOT NULL,
	attempts        INT NOT NULL DEFAULT 0,
	next_attempt_at DATETIME(6) NULL,
	last_error      VARCHAR(1024) NULL,
	parked_at       DATETIME(6) NULL,
	failed_lane     INT AS (IF(parked_at IS NOT NULL OR next_attempt_at IS NOT NULL, lane, NULL)) STORED,
	KEY ix_failed (failed_lane, partition_key, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- {{settled}}: the settle log, one row per record a settle (mark mode) published, written by the
-- settle's transaction under the same lease fence: the record's publication time (the latest,
-- when a replay published it again). A record published before this migration (or by a relay
-- of the earlier version) keeps its published_at instead. Cleanup deletes an outbox row with
-- its settle log row, only when that row's time is before the cut-off and its seq below the
-- lowest pending seq; a replay deletes the row (the record is pending again).
CREATE TABLE IF NOT EXISTS {{settled}} (
	seq BIGINT NOT NULL PRIMARY KEY,
	at  DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- The triggers keep {{pending}} in step with the outbox for every statement that changes it,
-- this version's and an earlier version's alike (a rolling upgrade runs both):
--   INSERT: a pending row for the new record (none when inserted as published).
--   UPDATE: published_at set (an earlier relay's mark): the pending row goes. published_at
--     cleared (a replay, of either version, of a record published before the migration or by
--     an earlier relay): the record is pending again and its settle log row goes. Otherwise the
--     lane (ResizeLanes, Replay) and the status columns (an earlier relay's failure, park or
--     unpark) are copied, each only when it changed: this version's lane changes leave the
--     outbox's status columns as the insert wrote them, which must not overwrite the pending
--     row's.
--   DELETE (a delete-on-publish settle, cleanup): the pending row goes, unless the session's
--     user variable @outboxkit_unpended is set: this version's delete-on-publish settle deletes
--     the pending rows itself first, with one statement, sets the variable for its outbox
--     DELETE only and clears it right after (also when the DELETE fails). A variable left set
--     (a session that died in between ends with it) could only spare this version's own deletes
--     of rows without pending rows (cleanup); writers and earlier relays never read it.
-- This version's relay does not update outbox rows, so the update trigger costs it nothing; its
-- cleanup's deletes pay one primary-key lookup of {{pending}} per row. Triggers run with their
-- definer's privileges (the migrating user): writers and relays need no grant on {{pending}}.
-- The update trigger FOLLOWS the immutability trigger (005/008): a refused UPDATE fails first
-- and changes nothing. A statement that deletes or updates outbox rows must not use {{pending}}
-- itself (MySQL error 1442: the trigger changes a table the statement uses).
-- splitSQL ends a statement only at a ';' that ends a line: the bodies' inner ';' stay inside
-- their lines.
CREATE TRIGGER IF NOT EXISTS {{pending_ins}} AFTER INSERT ON {{outbox}} FOR EACH ROW
	IF NEW.published_at IS NULL THEN INSERT INTO {{pending}}
		(seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at)
		VALUES (NEW.seq, NEW.lane, NEW.partition_key, NEW.created_at, NEW.attempts,
			NEW.next_attempt_at, NEW.last_error, NEW.parked_at); END IF;

CREATE TRIGGER IF NOT EXISTS {{pending_upd}} AFTER UPDATE ON {{outbox}} FOR EACH ROW FOLLOWS {{outbox_immutable}}
	IF NEW.published_at IS NOT NULL THEN
		IF OLD.published_at IS NULL THEN DELETE FROM {{pending}} WHERE seq = NEW.seq; END IF
	; ELSEIF OLD.published_at IS NOT NULL THEN
		INSERT IGNORE INTO {{pending}}
			(seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at)
			VALUES (NEW.seq, NEW.lane, NEW.partition_key, NEW.created_at, NEW.attempts,
				NEW.next_attempt_at, NEW.last_error, NEW.parked_at)
		; DELETE FROM {{settled}} WHERE seq = NEW.seq
	; ELSE
		IF NOT (NEW.lane <=> OLD.lane) THEN UPDATE {{pending}} SET lane = NEW.lane WHERE seq = NEW.seq; END IF
		; IF NOT (NEW.attempts <=> OLD.attempts AND NEW.next_attempt_at <=> OLD.next_attempt_at
			AND NEW.last_error <=> OLD.last_error AND NEW.parked_at <=> OLD.parked_at) THEN
			UPDATE {{pending}} SET attempts = NEW.attempts, next_attempt_at = NEW.next_attempt_at,
				last_error = NEW.last_error, parked_at = NEW.parked_at WHERE seq = NEW.seq; END IF
	; END IF;

CREATE TRIGGER IF NOT EXISTS {{pending_del}} AFTER DELETE ON {{outbox}} FOR EACH ROW
	IF @outboxkit_unpended IS NULL THEN DELETE FROM {{pending}} WHERE seq = OLD.seq; END IF;

-- The backfill, once (Migrate runs this file only while the meta row
-- 'migration:010_pending' is missing, and writes it in the backfill's transaction, below): the
-- status of every unpublished record. The triggers exist by now: each CREATE TRIGGER waited for
-- the transactions that had used the outbox (its metadata lock), so every insert the backfill
-- does not see fires the insert trigger, and an earlier relay's later mark or failure reaches
-- the pending row through the update trigger. In REPEATABLE READ (the server's default) the
-- INSERT ... SELECT reads the outbox rows with shared locks, so a concurrent mark of an earlier
-- relay either waits for it or is seen; in READ COMMITTED it reads a snapshot, and a record an
-- earlier relay marks meanwhile may get a pending row and be sent once more (a duplicate, never
-- a loss). INSERT IGNORE: the rows the insert trigger already wrote stay as they are.
START TRANSACTION;

INSERT IGNORE INTO {{pending}}
	(seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at)
	SELECT seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at
	FROM {{outbox}} FORCE INDEX (ix_unpublished) WHERE unpublished = 1 AND published_at IS NULL;

INSERT INTO {{meta}} (name, value) VALUES ('migration:010_pending', '1')
	ON DUPLICATE KEY UPDATE value = VALUES(value);

COMMIT;
