-- The operator audit log (core.Operator): one row per audited operator change (replay, unpark,
-- cleanup with a non-default retention), written in the change's transaction. arguments is the
-- command's arguments as a JSON object (text, as written).
CREATE TABLE IF NOT EXISTS {{audit}} (
	id            BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	at            DATETIME(6) NOT NULL,
	actor         VARCHAR(255) NOT NULL,
	command       VARCHAR(64) NOT NULL,
	arguments     MEDIUMTEXT NOT NULL,
	rows_affected BIGINT NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
