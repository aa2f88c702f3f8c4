-- The inbox of processed messages, its retention horizons and entity versions.
-- {{inbox}}, {{horizons}} and {{versions}} are replaced by the quoted table names.

CREATE TABLE IF NOT EXISTS {{inbox}} (
	consumer        VARCHAR(255) NOT NULL,
	event_id        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	digest          BINARY(32) NOT NULL,
	source_position TEXT NOT NULL,
	outcome         INT NOT NULL,
	-- NULL when the message carried no time: older than any horizon.
	occurred_at     DATETIME(6) NULL,
	processed_at    DATETIME(6) NOT NULL,
	PRIMARY KEY (consumer, event_id),
	KEY ix_occurred (consumer, occurred_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{horizons}} (
	consumer VARCHAR(255) NOT NULL PRIMARY KEY,
	-- NULL: never pruned.
	horizon  DATETIME(6) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{versions}} (
	consumer VARCHAR(255) NOT NULL,
	entity   VARCHAR(512) NOT NULL,
	-- NULL: the row exists (it is the lock) but no version was applied yet.
	version  BIGINT NULL,
	PRIMARY KEY (consumer, entity)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
