-- 0005_timers_due: the scheduler finds the earliest pending timer across all shards.
CREATE INDEX timers_due ON strand.timers (due_at) WHERE fired_at IS NULL;
CREATE INDEX timers_fired ON strand.timers (fired_at) WHERE fired_at IS NOT NULL;
