-- The operator audit log (core.Operator): one row per audited operator change (replay, unpark,
-- cleanup with a non-default retention), written in the change's transaction. at is unix
-- microseconds (UTC); arguments the command's arguments as a JSON object (text, as written).
CREATE TABLE {{audit}} (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    actor         TEXT    NOT NULL,
    command       TEXT    NOT NULL,
    arguments     TEXT    NOT NULL DEFAULT '{}',
    rows_affected INTEGER NOT NULL
);
