-- 0011_wakeups_recovery: wake-ups that do not need Redis, and the outbox's recovery sweep.
--
-- 1. Every transaction that moves an instance's state_version notifies the channel
--    strand_wake with the instance id, delivered at commit. The API LISTENs on it and
--    answers long polls and start-and-waits (services/api/wait_loop.c) with or without
--    Redis. A trigger rather than a call in each writer: the executor's wake-ups, its
--    cancels and any later writer of runtime_states are all covered, and the
--    notification commits with the change or not at all. In the executor's wake-up the
--    transaction already notifies strand_outbox, so the commit-time notify lock is
--    taken anyway.
CREATE FUNCTION strand.notify_wake() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('strand_wake', NEW.instance_id::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER runtime_states_wake AFTER UPDATE OF state_version ON strand.runtime_states
    FOR EACH ROW WHEN (NEW.state_version IS DISTINCT FROM OLD.state_version)
    EXECUTE FUNCTION strand.notify_wake();

-- 2. A signal row of the outbox names its signal and instance (NULL for other topics
--    and for rows written before this migration), so that the relay leader's recovery
--    sweep (libs/common/src/recovery.c) can find a signal that was published but never
--    applied while its instance still waits, and publish it again: Kafka may lose what
--    it was given (replication factor 1, a topic deleted, retention). `recoveries`
--    counts the re-publications of a row; while it is above 0 the row is watched until
--    its signal is applied, and the purge keeps it.
ALTER TABLE strand.outbox ADD COLUMN signal_id text,
                          ADD COLUMN instance_id uuid,
                          ADD COLUMN recoveries integer NOT NULL DEFAULT 0;
CREATE INDEX outbox_recovering ON strand.outbox (id) WHERE recoveries > 0;
-- A dead-lettered signal is not lost: the sweep looks it up by instance.
CREATE INDEX dead_letters_by_instance ON strand.dead_letters (instance_id)
    WHERE instance_id IS NOT NULL;
