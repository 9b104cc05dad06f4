-- 0008_opaque_statistics: no planner statistics for payload columns that no query filters,
-- joins or sorts on (documents and encoded envelopes the services only store and read back).
--
-- ANALYZE sorts every sampled value of a column with a btree opclass to build its
-- histogram; for jsonb that means detoasting and comparing whole documents. Autovacuum
-- re-analyzes the hot tables every 10% of changed rows, and on this schema the jsonb and
-- bytea columns were most of that work: ANALYZE of runtime_states, instances, history and
-- outbox (77,000 to 317,000 rows) took 1.6 s with their statistics and 0.6 s without.
-- A statistics target of 0 skips the column; the planner then uses default estimates
-- for it, which no query here consults.
ALTER TABLE strand.runtime_states ALTER COLUMN snapshot SET STATISTICS 0,
                                  ALTER COLUMN last_error SET STATISTICS 0;
ALTER TABLE strand.instances ALTER COLUMN input SET STATISTICS 0,
                             ALTER COLUMN output SET STATISTICS 0,
                             ALTER COLUMN error SET STATISTICS 0;
ALTER TABLE strand.history ALTER COLUMN detail SET STATISTICS 0;
ALTER TABLE strand.outbox ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE strand.calls ALTER COLUMN request SET STATISTICS 0,
                         ALTER COLUMN result SET STATISTICS 0;
ALTER TABLE strand.dead_letters ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE strand.signal_buffer ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE strand.tasks ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE strand.task_events ALTER COLUMN detail SET STATISTICS 0;
ALTER TABLE strand.timers ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE strand.work_events ALTER COLUMN envelope SET STATISTICS 0;
