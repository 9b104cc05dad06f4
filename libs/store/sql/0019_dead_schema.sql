-- 0019_dead_schema: strand.leases was created by 0001 for a lease table that was never
-- used (calls carry their own lease columns since 0010; the relay leads by a session
-- advisory lock). No statement reads or writes it, so it goes. The <prefix>timers
-- topic, likewise never produced or consumed (timers are rows in strand.timers fired
-- by the scheduler as signals), is no longer created; an existing one may be deleted.
DROP TABLE IF EXISTS strand.leases;
