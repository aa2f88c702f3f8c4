-- Publisher generations and the CDC checkpoint (one row each per outbox).
--
-- {{publisher}} holds the outbox's publisher generation: AcquireGeneration increments it, and
-- ClaimLanes, RenewLanes and SaveCheckpoint lock the row FOR SHARE and refuse (core.ErrFenced)
-- a caller whose generation is not the current one. A fresh outbox is at generation 0 with no
-- kind and no holder.
CREATE TABLE IF NOT EXISTS {{publisher}} (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    generation bigint      NOT NULL DEFAULT 0,
    kind       text        NOT NULL DEFAULT '',
    holder     text        NOT NULL DEFAULT '',
    since      timestamptz
);

INSERT INTO {{publisher}} (singleton) VALUES (true) ON CONFLICT (singleton) DO NOTHING;

-- The CDC relay's checkpoint: every outbox insert committed at or before position (in the
-- change log named source) was acknowledged by the sink.
CREATE TABLE IF NOT EXISTS {{checkpoint}} (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    source     text        NOT NULL,
    position   text        NOT NULL,
    generation bigint      NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
