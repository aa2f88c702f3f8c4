-- The inbox of processed messages, the per-consumer retention horizons and entity versions.

CREATE TABLE IF NOT EXISTS {{inbox}} (
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    digest          bytea       NOT NULL,
    source_position text        NOT NULL DEFAULT '',
    outcome         smallint    NOT NULL,
    -- The zero time (0001-01-01) when the message carried none: older than any horizon.
    occurred_at     timestamptz NOT NULL,
    processed_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

CREATE INDEX IF NOT EXISTS {{inbox_idx}} ON {{inbox}} (consumer, occurred_at);

CREATE TABLE IF NOT EXISTS {{horizons}} (
    consumer text PRIMARY KEY,
    horizon  timestamptz
);

CREATE TABLE IF NOT EXISTS {{versions}} (
    consumer text   NOT NULL,
    entity   text   NOT NULL,
    version  bigint,
    PRIMARY KEY (consumer, entity)
);
