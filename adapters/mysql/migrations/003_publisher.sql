-- Publisher generations and the CDC checkpoint (one row each per outbox). Migrate inserts the
-- publisher row (generation 0, no kind, no holder) when missing.
-- {{publisher}} and {{checkpoint}} are replaced by the quoted table names (Table+"_pub" and
-- Table+"_cdc": MySQL identifiers are at most 64 characters and Table may have 56).

CREATE TABLE IF NOT EXISTS {{publisher}} (
	id         TINYINT NOT NULL PRIMARY KEY,
	generation BIGINT NOT NULL DEFAULT 0,
	kind       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
	holder     VARCHAR(255) NOT NULL DEFAULT '',
	since      DATETIME(6) NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS {{checkpoint}} (
	id         TINYINT NOT NULL PRIMARY KEY,
	source     VARCHAR(512) NOT NULL,
	position   TEXT NOT NULL,
	generation BIGINT NOT NULL,
	updated_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
