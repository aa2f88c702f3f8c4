-- The inbox's part of 009_binary_text.sql (read its comment): the inbox's compared text becomes
-- VARBINARY. Migrate and MigrateInbox run it only while one of these columns still has a
-- character set.
ALTER TABLE {{inbox}} MODIFY consumer VARBINARY(1020) NOT NULL;

ALTER TABLE {{horizons}} MODIFY consumer VARBINARY(1020) NOT NULL;

ALTER TABLE {{versions}}
	MODIFY consumer VARBINARY(1020) NOT NULL,
	MODIFY entity   VARBINARY(2048) NOT NULL;
