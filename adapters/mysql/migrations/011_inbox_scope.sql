-- The inbox key becomes (consumer, source, tenant, event ID) (core.InboxOptions.Source,
-- InboxMessage.Tenant): one tenant's or source's message can no longer pass for another's that
-- reuses its event ID. Both are text the adapter compares, binary as since 009 (byte-exact, no
-- PAD SPACE), of at most 255 bytes (driver.MaxNameLen), '' when unset. Every existing record gets
-- '' and '': exactly the key it had, so a redelivery of a message processed before this
-- migration (by an inbox without Source, of a message without tenant) stays a Duplicate.
-- The primary key's columns are in the order (consumer, event_id, source, tenant): the same key,
-- but its (consumer, event_id) prefix still serves the lookups by event ID alone, which name no
-- scope (PruneInboxIDs/PruneInbox delete by the whole key; InboxRecords, reconcile's reader,
-- finds a consumer's record by event ID): with source and tenant before event_id they would
-- scan all the consumer's records. Key length: consumer VARBINARY(1020) + event_id 128 ascii +
-- 255 + 255 = 1658 bytes, under InnoDB's 3072; ix_occurred (consumer, occurred_at) is kept.
-- Entity keys (LockVersion) may now hold the source and tenant before the entity, joined by
-- U+001F (driver.MaxEntityKeyLen, 767 bytes): {{versions}}.entity is VARBINARY(2048) since 009,
-- which takes them as they are, so that table is unchanged.
-- One ALTER (InnoDB applies it whole or not at all): it REBUILDS the inbox table, blocking
-- writes to it meanwhile, once: on a large inbox, run Migrate (or MigrateInbox) off-peak. Migrate
-- and MigrateInbox run this file only while the inbox's primary key lacks source or tenant
-- (information_schema.STATISTICS); MigrationSQL and InboxMigrationSQL include it, after 002 and
-- 009 (on an empty table it costs nothing). Stores of the earlier version keep working on the
-- migrated table during a rolling upgrade: their inserts name neither column and get '' and ''.
ALTER TABLE {{inbox}}
	ADD COLUMN source VARBINARY(255) NOT NULL DEFAULT '' AFTER consumer,
	ADD COLUMN tenant VARBINARY(255) NOT NULL DEFAULT '' AFTER source,
	DROP PRIMARY KEY,
	ADD PRIMARY KEY (consumer, event_id, source, tenant);
