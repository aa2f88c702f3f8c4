-- Audit rows stay as written (core.Operator): grants.sql lets the operator role update
-- rows_affected, for the one change the log needs, and this trigger allows no other. An inbox
-- prune (PruneInboxAudited) writes its row with rows_affected -1 when it raises the horizon and
-- sets the records it deleted once its deletions finished; a row is thus changed at most once,
-- from -1, and only in rows_affected.
CREATE OR REPLACE FUNCTION {{audit_guard_fn}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF OLD.rows_affected <> -1 OR NEW.rows_affected < 0
       OR (NEW.id, NEW.at, NEW.actor, NEW.command, NEW.arguments)
          IS DISTINCT FROM (OLD.id, OLD.at, OLD.actor, OLD.command, OLD.arguments) THEN
        RAISE EXCEPTION 'outbox audit: rows are append-only (only a row holding rows_affected -1 gets its count, once)'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$fn$;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = '{{audit}}'::regclass AND tgname = '{{audit_guard_name}}') THEN
        CREATE TRIGGER {{audit_guard}} BEFORE UPDATE ON {{audit}}
            FOR EACH ROW EXECUTE FUNCTION {{audit_guard_fn}}();
    END IF;
END
$do$;
