-- Text the adapter compares, keys or indexes, and the text the immutability and audit triggers
-- compare, becomes VARBINARY/MEDIUMBLOB: byte-exact, with no padding. The tables' utf8mb4_bin
-- (like every MySQL/MariaDB collation not named NO PAD, and ascii_bin) is PAD SPACE: it ignores
-- trailing spaces, so inbox consumer 'c ' got Duplicate for an event only 'c' had processed (its
-- handler never ran), entity 'x ' was gated by entity 'x''s version, partition keys 'k' and
-- 'k ' blocked and unparked each other, aggregates 'a' and 'a ' collided under
-- UniqueAggregateVersion, owners 'w' and 'w ' shared leases, and the triggers let a change of
-- trailing spaces through. The text rule of the API allows trailing spaces; the other adapters
-- compare bytes.
-- Why binary types and not a NO PAD collation: the NO PAD binary collation is utf8mb4_nopad_bin
-- on MariaDB but utf8mb4_0900_bin on MySQL (8.0.17+ only), so one file could not serve both,
-- and MigrationSQL, which has no server, could not choose. VARBINARY compares bytes the same way
-- on both. The adapter validates text (UTF-8, no control characters) before it writes; Go reads
-- binary columns into strings unchanged, and the CDC decoder takes string or []byte alike.
-- Lengths are the byte capacity of the old columns (VARCHAR(n) utf8mb4: 4n bytes), so the
-- conversion never truncates or refuses a stored value and index key lengths stay as they were.
-- Identifiers (id, event_id, aggregate_type, type, schema_id, destination, meta names) stay
-- ascii_bin: PAD SPACE too, but the API refuses spaces in them (IDs: printable ASCII without
-- spaces; names: A-Z a-z 0-9 . _ -).
-- Each ALTER REBUILDS its table (a copy of every row, the outbox's payloads included; MariaDB
-- and MySQL block writes to the table meanwhile): on a large outbox or inbox, run Migrate
-- off-peak. Migrate runs this file only while one of these columns still has a character set
-- (information_schema.COLUMNS); an ALTER of a table already converted changes no row (MariaDB
-- 10.11: no copy), so a Migrate interrupted between two ALTERs completes the rest.
-- MigrationSQL includes it, after the CREATEs (on empty tables it costs nothing).
-- The inbox's tables are converted by 009_binary_text_inbox.sql, so that MigrateInbox, which
-- creates no outbox table, can run that one alone.
ALTER TABLE {{outbox}}
	MODIFY aggregate_id   VARBINARY(1020) NOT NULL,
	MODIFY partition_key  VARBINARY(1020) NOT NULL,
	MODIFY headers        MEDIUMBLOB NOT NULL,
	MODIFY tenant         VARBINARY(1020) NOT NULL DEFAULT '',
	MODIFY causation_id   VARBINARY(1020) NOT NULL DEFAULT '',
	MODIFY correlation_id VARBINARY(1020) NOT NULL DEFAULT '';

ALTER TABLE {{lanes}} MODIFY owner VARBINARY(1020) NOT NULL DEFAULT '';

ALTER TABLE {{workers}} MODIFY owner VARBINARY(1020) NOT NULL;

ALTER TABLE {{audit}}
	MODIFY actor     VARBINARY(1020) NOT NULL,
	MODIFY command   VARBINARY(256) NOT NULL,
	MODIFY arguments MEDIUMBLOB NOT NULL;
