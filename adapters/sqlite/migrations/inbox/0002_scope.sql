-- The inbox key becomes (consumer, event_id, source, tenant): a record of one event ID under
-- one source or tenant no longer suppresses a message of another source or tenant with that
-- ID. SQLite cannot change a primary key in place, so the table is rebuilt by the "other kind
-- of table schema change" of https://www.sqlite.org/lang_altertable.html (in the migration's
-- transaction; the inbox table has no foreign keys, triggers or views of the adapter's, so
-- steps 1, 9, 10 and 12 have nothing to do): create the new table, copy the rows, drop the
-- old one, rename the new one to the old name, create the index again. Every existing row
-- gets source '' and tenant '': the key it had, so a redelivery of an earlier message (no
-- source, no tenant) stays a duplicate. The event ID comes before source and tenant, as on
-- PostgreSQL and MySQL, so that reading a consumer's records by event ID (reconcile) is a seek.

CREATE TABLE {{inbox_new}} (
    consumer        TEXT    NOT NULL,
    source          TEXT    NOT NULL DEFAULT '',
    tenant          TEXT    NOT NULL DEFAULT '',
    event_id        TEXT    NOT NULL,
    digest          BLOB    NOT NULL,
    source_position TEXT    NOT NULL DEFAULT '',
    outcome         INTEGER NOT NULL,
    occurred_at     INTEGER,
    processed_at    INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id, source, tenant)
);

INSERT INTO {{inbox_new}}
    (consumer, source, tenant, event_id, digest, source_position, outcome, occurred_at, processed_at)
SELECT consumer, '', '', event_id, digest, source_position, outcome, occurred_at, processed_at
FROM {{inbox}};

DROP TABLE {{inbox}};

ALTER TABLE {{inbox_new}} RENAME TO {{inbox}};

CREATE INDEX {{inbox_occurred}} ON {{inbox}} (consumer, occurred_at);
