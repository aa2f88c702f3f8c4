-- The narrow pending layout (issue 15, item 3), as on PostgreSQL (its migration 0008) with
-- SQLite's means. This version never rewrites an outbox row's status columns: the relay's status
-- lives in {{queue}}, one narrow row per unpublished record, and a record's publication time in
-- {{publications}}, one row per published record. Every outbox row has exactly one of the two
-- (while it exists). Only a lane change (ResizeLanes, Replay, under migration 0006's marker)
-- still updates an outbox row; the lane trigger below copies it into the queue.
--
-- {{queue}}: the relay's fetch walks it in seq order (its rowid) and joins the outbox for the
-- record; a settle moves the published rows' seqs to {{publications}}; failures and parking
-- update only it (never a ~1 KiB outbox row).
CREATE TABLE {{queue}} (
    seq             INTEGER PRIMARY KEY,
    lane            INTEGER NOT NULL,
    partition_key   TEXT    NOT NULL,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER,
    last_error      TEXT    NOT NULL DEFAULT '',
    parked_at       INTEGER
);

-- Failed or parked queue rows by partition key: the fetch's per-key blocking probe, Unpark and
-- the operators' parked counts. It covers the blocking test. Normally (almost) empty.
CREATE INDEX {{queue_failed}} ON {{queue}} (partition_key, seq, parked_at, next_attempt_at)
    WHERE parked_at IS NOT NULL OR next_attempt_at IS NOT NULL;

-- {{publications}}: seq -> publication time (unix microseconds), written by the settle that
-- published the record, in its fenced transaction. Cleanup walks the time index.
CREATE TABLE {{publications}} (
    seq INTEGER PRIMARY KEY,
    at  INTEGER NOT NULL
);

CREATE INDEX {{publications_at}} ON {{publications}} (at);

-- Backfill: the status of every unpublished row, the time of every published one.
INSERT INTO {{queue}} (seq, lane, partition_key, attempts, next_attempt_at, last_error, parked_at)
SELECT seq, lane, partition_key, attempts, next_attempt_at, last_error, parked_at
FROM {{outbox}} WHERE published_at IS NULL;

INSERT INTO {{publications}} (seq, at)
SELECT seq, published_at FROM {{outbox}} WHERE published_at IS NOT NULL;

-- Every INSERT into the outbox gets its queue row from this trigger, in the INSERT's statement,
-- hence in the producer's transaction: this version's writer (whose statement is unchanged) and
-- a writer of the earlier version alike. A row inserted as published (by hand) gets its
-- publication row instead.
CREATE TRIGGER {{queue_insert}} AFTER INSERT ON {{outbox}} FOR EACH ROW
WHEN NEW.published_at IS NULL
BEGIN
    INSERT OR IGNORE INTO {{queue}} (seq, lane, partition_key, attempts, next_attempt_at, last_error, parked_at)
    VALUES (NEW.seq, NEW.lane, NEW.partition_key, NEW.attempts, NEW.next_attempt_at, NEW.last_error, NEW.parked_at);
END;

CREATE TRIGGER {{queue_insert_published}} AFTER INSERT ON {{outbox}} FOR EACH ROW
WHEN NEW.published_at IS NOT NULL
BEGIN
    INSERT OR REPLACE INTO {{publications}} (seq, at) VALUES (NEW.seq, NEW.published_at);
END;

-- A lane change of an outbox row (ResizeLanes, Replay; of this version or the earlier one)
-- moves its queue row too, so that both versions' relays fence on the same lane.
CREATE TRIGGER {{queue_lane}} AFTER UPDATE OF lane ON {{outbox}} FOR EACH ROW
WHEN NEW.lane IS NOT OLD.lane
BEGIN
    UPDATE {{queue}} SET lane = NEW.lane WHERE seq = NEW.seq;
END;

-- Relays and operators of the earlier version, during a rolling upgrade (this version never
-- updates these columns, so these triggers never fire for it). A mark (published_at set) is a
-- publication; an earlier Replay (published_at cleared) puts the row back in the queue; an
-- earlier failure, park or Unpark is copied to the queue row.
CREATE TRIGGER {{queue_mark}} AFTER UPDATE OF published_at ON {{outbox}} FOR EACH ROW
WHEN NEW.published_at IS NOT NULL
BEGIN
    DELETE FROM {{queue}} WHERE seq = NEW.seq;
    INSERT OR REPLACE INTO {{publications}} (seq, at) VALUES (NEW.seq, NEW.published_at);
END;

CREATE TRIGGER {{queue_unmark}} AFTER UPDATE OF published_at ON {{outbox}} FOR EACH ROW
WHEN NEW.published_at IS NULL AND OLD.published_at IS NOT NULL
BEGIN
    DELETE FROM {{publications}} WHERE seq = NEW.seq;
    INSERT OR IGNORE INTO {{queue}} (seq, lane, partition_key, attempts, next_attempt_at, last_error, parked_at)
    VALUES (NEW.seq, NEW.lane, NEW.partition_key, NEW.attempts, NEW.next_attempt_at, NEW.last_error, NEW.parked_at);
END;

CREATE TRIGGER {{queue_status}} AFTER UPDATE OF attempts, next_attempt_at, last_error, parked_at ON {{outbox}} FOR EACH ROW
WHEN NEW.published_at IS NULL
BEGIN
    UPDATE {{queue}} SET attempts = NEW.attempts, next_attempt_at = NEW.next_attempt_at,
        last_error = NEW.last_error, parked_at = NEW.parked_at
    WHERE seq = NEW.seq;
END;

-- A deleted outbox row (this version's delete-on-publish settles and cleanup, and the earlier
-- version's) takes its queue and publication rows with it.
CREATE TRIGGER {{queue_delete}} AFTER DELETE ON {{outbox}} FOR EACH ROW
BEGIN
    DELETE FROM {{queue}} WHERE seq = OLD.seq;
    DELETE FROM {{publications}} WHERE seq = OLD.seq;
END;
