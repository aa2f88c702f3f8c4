-- Liveness (core.Liveness): live_pid is the server process of the session that held the lane
-- owner's sign of life when the lease was taken, a session-level advisory lock of this outbox's
-- liveness class keyed by that process id. A lane whose lock is gone (the session ended) may be
-- claimed before its lease expires. NULL: the lease was taken without a sign of life.
ALTER TABLE {{lanes}} ADD COLUMN IF NOT EXISTS live_pid integer;
