-- Lane count changes (Store.ResizeLanes, `outboxkit lanes resize`): the immutability trigger
-- allows one more change, the lane alone, while the meta row 'lanes_resize' exists. A resize or
-- a replay inserts that row and deletes it again in its own write transaction, so no other
-- transaction ever sees it.
DROP TRIGGER {{outbox_immutable}};
CREATE TRIGGER {{outbox_immutable}}
BEFORE UPDATE OF seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
    partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
    created_at ON {{outbox}} FOR EACH ROW
WHEN NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.aggregate_type IS NOT OLD.aggregate_type
    OR NEW.aggregate_id IS NOT OLD.aggregate_id OR NEW.aggregate_version IS NOT OLD.aggregate_version
    OR NEW.type IS NOT OLD.type OR NEW.schema_id IS NOT OLD.schema_id
    OR NEW.partition_key IS NOT OLD.partition_key OR NEW.destination IS NOT OLD.destination
    OR NEW.payload IS NOT OLD.payload OR NEW.headers IS NOT OLD.headers OR NEW.tenant IS NOT OLD.tenant
    OR NEW.causation_id IS NOT OLD.causation_id OR NEW.correlation_id IS NOT OLD.correlation_id
    OR (NEW.lane IS NOT OLD.lane AND NOT EXISTS (SELECT 1 FROM {{meta}} WHERE name = 'lanes_resize'))
    OR NEW.created_at IS NOT OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'outbox: only published_at, attempts, next_attempt_at, last_error and parked_at may change');
END;
