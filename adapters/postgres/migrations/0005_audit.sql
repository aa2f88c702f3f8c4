-- The operator audit log (core.Operator): one row per audited operator change (replay, unpark,
-- cleanup with a non-default retention), written in the change's transaction. arguments is the
-- command's arguments as a JSON object (text, as written). grants.sql lets only the operator
-- role insert, and update nothing but rows_affected (inbox prune fills it in; 0006_audit_guard
-- allows no other change); nobody but the owner deletes.
CREATE TABLE IF NOT EXISTS {{audit}} (
    id            bigserial   PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    actor         text        NOT NULL,
    command       text        NOT NULL,
    arguments     text        NOT NULL DEFAULT '{}',
    rows_affected bigint      NOT NULL
);
