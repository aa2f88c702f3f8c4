-- The outbox, its lanes, its live relay workers and the adapter's metadata.
-- {{outbox}}, {{lanes}}, {{workers}} and {{meta}} are replaced by the quoted table names.
-- Text compared by the relay (partition keys, ids) uses binary collations: keys that differ
-- only in case are different keys, as in every other adapter.

CREATE TABLE IF NOT EXISTS {{meta}} (
	name  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
	value VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{outbox}} (
	seq               BIGINT NOT NULL AUTO_INCREMENT,
	id                VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	aggregate_type    VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	aggregate_id      VARCHAR(255) NOT NULL,
	aggregate_version BIGINT NOT NULL DEFAULT 0,
	type              VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	schema_id         VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
	partition_key     VARCHAR(255) NOT NULL,
	destination       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
	payload           LONGBLOB NOT NULL,
	headers           MEDIUMTEXT NOT NULL,
	tenant            VARCHAR(255) NOT NULL DEFAULT '',
	causation_id      VARCHAR(255) NOT NULL DEFAULT '',
	correlation_id    VARCHAR(255) NOT NULL DEFAULT '',
	lane              INT NOT NULL,
	created_at        DATETIME(6) NOT NULL,
	published_at      DATETIME(6) NULL,
	attempts          INT NOT NULL DEFAULT 0,
	next_attempt_at   DATETIME(6) NULL,
	last_error        VARCHAR(1024) NULL,
	parked_at         DATETIME(6) NULL,
	-- 1 while unpublished, NULL once published: MariaDB has no partial indexes, so the
	-- unpublished rows get their own index prefix (published rows all sit under NULL).
	unpublished       TINYINT AS (IF(published_at IS NULL, 1, NULL)) STORED,
	-- the lane of an unpublished row that failed at least once (retrying or parked), NULL
	-- otherwise: a tiny index of the rows that may block their partition key.
	failed_lane       INT AS (IF(published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL), lane, NULL)) STORED,
	-- aggregate_version when > 0, else NULL (NULLs never collide in a unique index).
	aggregate_version_key BIGINT AS (IF(aggregate_version > 0, aggregate_version, NULL)) STORED,
	-- 8 bytes while unpublished, NULL (no bytes) once published: room for published_at, so that
	-- the relay's mark does not grow the row. InnoDB must find new space in the page for a row
	-- that grows (often by reorganising the page); a row that keeps its size or shrinks reuses
	-- its own. Measured on MariaDB 10.11 (BENCHMARKS.md, MariaDB drain): a mark of 500 rows of
	-- ~1.1 KiB took less than half the server CPU with this column than without. An outbox
	-- created without it marks correctly, only slower; ALTER TABLE ... ADD COLUMN mark_room
	-- BIGINT AS (IF(published_at IS NULL, 0, NULL)) STORED adds it (a copy of the table).
	mark_room         BIGINT AS (IF(published_at IS NULL, 0, NULL)) STORED,
	PRIMARY KEY (seq),
	UNIQUE KEY ux_id (id),
	KEY ix_unpublished (unpublished, seq, lane),
	KEY ix_failed (failed_lane, partition_key, seq)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin ROW_FORMAT=DYNAMIC;

CREATE TABLE IF NOT EXISTS {{lanes}} (
	lane         INT NOT NULL PRIMARY KEY,
	owner        VARCHAR(255) NOT NULL DEFAULT '',
	generation   BIGINT NOT NULL DEFAULT 0,
	lease_until  DATETIME(6) NULL,
	-- ClaimGetLock: CONNECTION_ID() of the session holding the lane's GET_LOCK, NULL if none.
	lock_session BIGINT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{workers}} (
	owner      VARCHAR(255) NOT NULL PRIMARY KEY,
	expires_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
