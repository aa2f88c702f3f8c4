-- Least-privilege roles for the outboxkit PostgreSQL adapter, for the default table names
-- (outbox, inbox). Run after Store.Migrate, as the tables' owner, with psql:
--
--   psql -v schema=public -v app_role=orders_app -v relay_role=orders_relay \
--        -v operator_role=orders_operator -f grants.sql
--
-- The roles must exist. The application role may append to the outbox (and use its sequence)
-- and run the inbox; it can neither read nor change outbox rows, except that it reads back the
-- seq, lane, partition key and creation time of the rows it inserts (the INSERT's RETURNING) to write their
-- pending rows (outbox_pending, migration 0008) in the same statement. The relay role may read
-- the outbox, change the pending rows (delete them when published, update them on failures),
-- append to and read the settle log (outbox_settled), delete published rows and old log entries
-- (cleanup), and owns the lanes and workers tables. Outbox rows never change after insert; their
-- semantic columns are also protected by the outbox_immutable trigger, whatever the role.
--
-- Upgrading from a version before the pending layout: run Migrate, then this script again
-- before deploying writers of this version (they need the grants on outbox_pending). Writers and
-- relays of the earlier version keep working meanwhile (migration 0008's trigger writes and
-- deletes the pending rows of their inserts and deletes as the tables' owner).
--
-- The relay role also takes publisher generations (outbox_publisher: it updates the row and
-- locks it FOR SHARE, which needs UPDATE) and writes the CDC checkpoint (outbox_cdc_checkpoint).
-- A CDC relay (Store.ChangeSource) additionally needs a role with the REPLICATION attribute for
-- its replication connection (ALTER ROLE ... REPLICATION; a role attribute, not a grant), and
-- the publication, which only the outbox's owner may create. Either run the relay's first
-- ChangeSource.Start as the owner, or create it by hand (names are CDCOptions' defaults):
--
--   CREATE PUBLICATION outboxkit_<schema>_outbox FOR TABLE <schema>.outbox WITH (publish = 'insert');
--
-- (a partitioned outbox adds publish_via_partition_root = true to the WITH list).
--
-- A partitioned outbox (Options.Partitioning) also needs, for the application role,
--   GRANT INSERT (id) ON :"schema".outbox_ids TO :"app_role";
-- and its cleanup (which creates and drops partitions) runs as the tables' owner.
--
-- The operator role runs `outboxkit status|parked|unpark|replay|cleanup|cdc release|lanes
-- reset|lanes resize|inbox prune|audit`: it reads the outbox and its bookkeeping, changes the status
-- columns, deletes published rows and the CDC checkpoint, ends lane leases (lanes reset),
-- changes the lane count (lanes resize: the lanes of unpublished rows, which the
-- outbox_immutable trigger allows only inside a resize or replay, the lane rows and the
-- recorded count),
-- raises inbox horizons and deletes inbox records (inbox prune), and appends to the audit table
-- (outbox_audit), from which it can delete nothing and of which it can change only
-- rows_affected, and only from -1 (inbox prune writes its row with -1 when it raises the
-- horizon and sets the count with its last deletion; the outbox_audit_guard trigger refuses any
-- other change, whatever the role). Neither the application nor the relay role can write audit
-- rows. Dropping the replication slot (`outboxkit cdc release`) also needs the REPLICATION
-- attribute:
--   ALTER ROLE <operator_role> REPLICATION;
-- `outboxkit backfill` publishes as the CDC relay does and then appends its audit row: run it
-- as a role with both, e.g. the operator role (with REPLICATION) made a member of the relay role:
--   GRANT <relay_role> TO <operator_role>;

GRANT USAGE ON SCHEMA :"schema" TO :"app_role", :"relay_role", :"operator_role";

-- Application: INSERT only, on the columns a writer sets.
GRANT SELECT ON :"schema".outbox_meta TO :"app_role";
GRANT INSERT (id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
    destination, payload, headers, tenant, causation_id, correlation_id, lane)
    ON :"schema".outbox TO :"app_role";
-- The pending row, written by the same INSERT statement from its RETURNING (which needs SELECT
-- on the columns it returns).
GRANT SELECT (seq, lane, partition_key, created_at) ON :"schema".outbox TO :"app_role";
GRANT INSERT (seq, lane, partition_key, created_at) ON :"schema".outbox_pending TO :"app_role";
GRANT USAGE ON SEQUENCE :"schema".outbox_seq_seq TO :"app_role";
-- The lane-count check of Outbox.Write (a REPEATABLE READ or SERIALIZABLE writer reads the
-- count through this SECURITY DEFINER function; functions are executable by PUBLIC by default).
GRANT EXECUTE ON FUNCTION :"schema".outbox_lane_count() TO :"app_role", :"operator_role";
-- The inbox runs in the application's transactions.
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".inbox, :"schema".inbox_horizons,
    :"schema".inbox_versions TO :"app_role";

-- Relay: read the outbox, update the status columns, delete published rows (cleanup).
GRANT SELECT ON :"schema".outbox, :"schema".outbox_meta TO :"relay_role";
GRANT UPDATE (published_at, attempts, next_attempt_at, last_error, parked_at)
    ON :"schema".outbox TO :"relay_role";
GRANT DELETE ON :"schema".outbox TO :"relay_role";
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".outbox_lanes, :"schema".outbox_workers TO :"relay_role";
GRANT EXECUTE ON FUNCTION :"schema".outbox_fetch(integer[], timestamptz, integer) TO :"relay_role";
-- The pending layout (migration 0008): fetch, settle (delete published pending rows, log them,
-- update failed ones), cleanup (delete old log entries).
GRANT SELECT, UPDATE, DELETE ON :"schema".outbox_pending TO :"relay_role";
GRANT SELECT, INSERT, DELETE ON :"schema".outbox_settled TO :"relay_role";
GRANT EXECUTE ON FUNCTION :"schema".outbox_fetch_pending(integer[], timestamptz, integer) TO :"relay_role";
GRANT EXECUTE ON FUNCTION :"schema".outbox_walk_pending(integer[], timestamptz, integer) TO :"relay_role";
GRANT SELECT, UPDATE ON :"schema".outbox_publisher TO :"relay_role";
GRANT SELECT, INSERT, UPDATE ON :"schema".outbox_cdc_checkpoint TO :"relay_role";

-- Operator: what the relay may do to outbox rows, read the bookkeeping, append audit rows.
GRANT SELECT ON :"schema".outbox, :"schema".outbox_meta, :"schema".outbox_lanes,
    :"schema".outbox_publisher, :"schema".outbox_cdc_checkpoint, :"schema".outbox_audit
    TO :"operator_role";
-- The pending layout (migration 0008): unpark, replay (new pending rows), lanes resize (their
-- lanes), cleanup (old settle log entries).
GRANT SELECT, INSERT, UPDATE, DELETE ON :"schema".outbox_pending TO :"operator_role";
GRANT SELECT, DELETE ON :"schema".outbox_settled TO :"operator_role";
GRANT UPDATE (seqs) ON :"schema".outbox_settled TO :"operator_role"; -- replay: a seq leaves its entry
GRANT UPDATE (published_at, attempts, next_attempt_at, last_error, parked_at)
    ON :"schema".outbox TO :"operator_role";
GRANT DELETE ON :"schema".outbox TO :"operator_role";
GRANT DELETE ON :"schema".outbox_cdc_checkpoint TO :"operator_role";
GRANT INSERT (actor, command, arguments, rows_affected) ON :"schema".outbox_audit TO :"operator_role";
GRANT UPDATE (rows_affected) ON :"schema".outbox_audit TO :"operator_role";
GRANT UPDATE (owner, generation, lease_until, live_pid) ON :"schema".outbox_lanes TO :"operator_role";
-- lanes resize (and replay, which puts rows back in their key's current lane).
GRANT UPDATE (lane) ON :"schema".outbox TO :"operator_role";
GRANT INSERT (lane), DELETE ON :"schema".outbox_lanes TO :"operator_role";
GRANT UPDATE (value) ON :"schema".outbox_meta TO :"operator_role";
GRANT SELECT, INSERT, UPDATE ON :"schema".inbox_horizons TO :"operator_role";
GRANT SELECT, DELETE ON :"schema".inbox TO :"operator_role";
GRANT USAGE ON SEQUENCE :"schema".outbox_audit_id_seq TO :"operator_role";
