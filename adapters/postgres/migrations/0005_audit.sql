-- The operator audit log (core.Operator): one row per audited operator change (replay, unpark,
-- cleanup with a non-default retention), written in the change's transaction. arguments is the
-- command's arguments as a JSON object (text, as written). grants.sql lets only the operator
-- role insert (append only: nobody but the owner updates or deletes).
CREATE TABLE IF NOT EXISTS {{audit}} (
    id            bigserial   PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL,
    command       text        NOT NULL,
    arguments     text        NOT NULL DEFAULT '{}',
    rows_affected bigint      NOT NULL
);
