-- Inbox records, retention horizons and entity versions. Times are INTEGER unix microseconds (UTC).

CREATE TABLE {{inbox}} (
    consumer        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    digest          BLOB    NOT NULL,
    source_position TEXT    NOT NULL DEFAULT '',
    outcome         INTEGER NOT NULL,
    occurred_at     INTEGER,
    processed_at    INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX {{inbox_occurred}} ON {{inbox}} (consumer, occurred_at);

CREATE TABLE {{inbox_horizons}} (
    consumer TEXT    PRIMARY KEY,
    horizon  INTEGER NOT NULL
);

CREATE TABLE {{inbox_versions}} (
    consumer TEXT    NOT NULL,
    entity   TEXT    NOT NULL,
    version  INTEGER NOT NULL,
    PRIMARY KEY (consumer, entity)
);
