-- The relay's fetch functions run without PostgreSQL's JIT compilation. A SQL function with SET
-- clauses is not inlined: each call plans its statement for parameters it cannot see, so the
-- LIMIT is estimated at a tenth of the pending rows, and from a backlog of a few hundred
-- thousand events on the estimated cost passes jit_above_cost (and the inlining and
-- optimisation thresholds): every fetch then spent about 0.7 s compiling to run a scan of
-- 16 ms, and a relay behind a 5M-event backlog drained ~5k events/s instead of ~20k
-- (BENCHMARKS.md, outage accumulation). The earlier layout's function (migration 0001) serves
-- relays of versions before migration 0008 during a rollout, so it gets the same setting.

ALTER FUNCTION {{fetch_fn}}(integer[], timestamptz, integer) SET jit = off;
ALTER FUNCTION {{pending_fetch_fn}}(integer[], timestamptz, integer) SET jit = off;
