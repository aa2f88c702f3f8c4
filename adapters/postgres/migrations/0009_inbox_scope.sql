-- The inbox key gains the record's source and tenant (core.InboxOptions.Source and
-- InboxMessage.Tenant): (consumer, event_id, source, tenant), the event ID before them so that
-- a consumer's records of one event ID stay together in the index (reconcile reads them by
-- consumer and event ID). Records written before get '' and '': the key they had, so a
-- redelivery of an earlier message stays a duplicate. The primary key is rebuilt once; the
-- columns' default takes no table rewrite.

ALTER TABLE {{inbox}}
    ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS tenant text NOT NULL DEFAULT '';

ALTER TABLE {{inbox}} DROP CONSTRAINT IF EXISTS {{inbox_pkey}};

ALTER TABLE {{inbox}} ADD CONSTRAINT {{inbox_pkey}} PRIMARY KEY (consumer, event_id, source, tenant);
