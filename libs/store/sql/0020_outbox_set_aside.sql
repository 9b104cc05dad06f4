-- 0020: outbox rows Kafka will never take (too large, invalid) are set aside by the
-- relay instead of stopping it: failed_at/publish_error say when and why (the row's
-- payload goes to the dead-letter store, published_at is set so the relay moves on).
-- Dead letters record the signal id where known, so the recovery sweep does not
-- publish a dead-lettered signal again when its payload was too large to keep.
ALTER TABLE strand.outbox ADD COLUMN IF NOT EXISTS failed_at timestamptz;
ALTER TABLE strand.outbox ADD COLUMN IF NOT EXISTS publish_error text;
ALTER TABLE strand.dead_letters ADD COLUMN IF NOT EXISTS signal_id text;
CREATE INDEX IF NOT EXISTS dead_letters_signal_id ON strand.dead_letters (signal_id)
    WHERE signal_id IS NOT NULL;
