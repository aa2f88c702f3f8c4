-- Outbox, lanes and relay workers. Times are INTEGER unix microseconds (UTC); NULL means unset.

CREATE TABLE {{outbox}} (
    -- AUTOINCREMENT: a seq is never reused, even after every row was deleted (DeleteOnPublish),
    -- so seq order is insertion order for the life of the table.
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,
    id                TEXT    NOT NULL,
    aggregate_type    TEXT    NOT NULL,
    aggregate_id      TEXT    NOT NULL,
    aggregate_version INTEGER NOT NULL DEFAULT 0,
    type              TEXT    NOT NULL,
    schema_id         TEXT    NOT NULL DEFAULT '',
    partition_key     TEXT    NOT NULL,
    destination       TEXT    NOT NULL DEFAULT '',
    payload           BLOB,
    headers           TEXT,
    tenant            TEXT    NOT NULL DEFAULT '',
    causation_id      TEXT    NOT NULL DEFAULT '',
    correlation_id    TEXT    NOT NULL DEFAULT '',
    lane              INTEGER NOT NULL,
    created_at        INTEGER NOT NULL,
    published_at      INTEGER,
    attempts          INTEGER NOT NULL DEFAULT 0,
    next_attempt_at   INTEGER,
    last_error        TEXT    NOT NULL DEFAULT '',
    parked_at         INTEGER
);

CREATE UNIQUE INDEX {{outbox_id}} ON {{outbox}} (id);

-- The relay's read path: unpublished rows in seq order, lane available without a table lookup.
-- It also gives the lowest unpublished seq (the cleanup watermark) at once.
CREATE INDEX {{outbox_pending}} ON {{outbox}} (seq, lane) WHERE published_at IS NULL;

-- The few unpublished rows that failed (waiting for a retry) or were parked: per-key blocking.
-- It covers the blocking test, so the probe never reads the table.
CREATE INDEX {{outbox_blocked}} ON {{outbox}} (partition_key, seq, parked_at, next_attempt_at, published_at)
    WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL);

-- Cleanup of published rows (mark mode "set").
CREATE INDEX {{outbox_published}} ON {{outbox}} (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE {{lanes}} (
    lane        INTEGER PRIMARY KEY,
    owner       TEXT    NOT NULL DEFAULT '',
    generation  INTEGER NOT NULL DEFAULT 0,
    lease_until INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE {{workers}} (
    owner      TEXT    PRIMARY KEY,
    expires_at INTEGER NOT NULL
);
