-- The outbox's publisher generation (core.RelayStore.AcquireGeneration): one row. ClaimLanes and
-- RenewLanes of any other generation are fenced. A fresh or upgraded outbox starts at
-- generation 0, kind '' and no holder, so callers that pass generation 0 keep working.
-- since is unix microseconds (UTC); NULL until a generation is taken.

CREATE TABLE {{publisher}} (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    since      INTEGER
);

INSERT INTO {{publisher}} (id, generation, kind, holder, since) VALUES (1, 0, '', '', NULL);
