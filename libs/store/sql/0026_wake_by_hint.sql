-- 0026_wake_by_hint: the executor's wake-ups stop notifying strand_wake while its Redis
-- hints reach the API (issue 20). PostgreSQL's notification costs the machine 0.16-0.48
-- ms of CPU per W1 instance (docs/benchmarks.md, "What the wake notification costs"),
-- and the hint the executor publishes after each commit already tells the API.
--
-- A session that sets strand.wake_by_hint to 'on' writes state versions without the
-- notification: only the executor's worker connections do, under STRAND_WAKE_NOTIFY =
-- fallback, while the last hint they published reached a subscriber. Every such change
-- is followed by a hint, and by this notification sent after the commit when that hint
-- reached nobody (services/executor/executor_loop.c); the API rechecks its parked polls
-- every STRAND_WAIT_RECHECK_MS for what both missed (services/api/wait_loop.c). Every
-- other writer (the API, the scheduler, repairs, psql) notifies as before.
CREATE OR REPLACE FUNCTION strand.notify_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('strand.wake_by_hint', true) IS DISTINCT FROM 'on' THEN
        PERFORM pg_notify('strand_wake', NEW.instance_id::text);
    END IF;
    RETURN NULL;
END
$$;
