-- 0006_housekeeping: indexes for the dispatcher's recovery of calls left 'sent' by a
-- crashed dispatcher, and for purging the signal dedup window.
CREATE INDEX calls_sent ON strand.calls (updated_at) WHERE status = 'sent';
