-- 0010_call_leases: a sent call is held by a lease its executor renews while alive.
--
-- The dispatcher claims a pending call (status 'sent') for STRAND_EXECUTOR_CALL_LEASE_MS
-- and renews the lease while the call is in flight. An executor that dies stops
-- renewing; once the lease has passed, any executor's dispatcher returns the call to
-- 'pending' and sends it again with the same Idempotency-Key (docs/processes.md).
-- A call whose instance no longer waits for it when it is claimed (cancelled, ended,
-- or moved on) is marked 'abandoned' and never sent.
ALTER TABLE strand.calls
    ADD COLUMN claimed_by  text,
    ADD COLUMN lease_until timestamptz;

-- Calls sent by an older executor keep their old recovery deadline (timeout + 60 s).
UPDATE strand.calls SET lease_until = updated_at + make_interval(secs => timeout_ms / 1000.0 + 60)
    WHERE status = 'sent';

-- The dispatcher's next deadline and its recovery sweep read only this index.
CREATE INDEX calls_leased ON strand.calls (lease_until) WHERE status = 'sent';
-- Recovery no longer reads updated_at (0006's index for the old timeout + 60 s sweep).
DROP INDEX IF EXISTS strand.calls_sent;
