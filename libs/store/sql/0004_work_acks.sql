-- 0004_work_acks: actionable work events and their per-consumer ACK tracking.

CREATE TABLE strand.work_events (
    ack_guid        uuid        PRIMARY KEY,
    instance_id     uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    kind            text        NOT NULL,          -- transition hook call
    event_code      text        NOT NULL,
    waiting_token   text,                          -- calls: the wait the result answers
    envelope        bytea       NOT NULL,          -- the WorkEvent every raise publishes
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX work_events_by_instance ON strand.work_events (instance_id, created_at);

-- One row per (event, consumer). `stage` is the ACK state machine:
--   delivery -> processing -> done, or -> failed (cap reached / consumer failure);
--   a failure with retry_at goes back to delivery, due at retry_at.
-- `due_at` is the next deadline of the current stage (NULL when done or failed);
-- the monitor finds work only through the partial index on it.
CREATE TABLE strand.acks (
    ack_guid              uuid        NOT NULL REFERENCES strand.work_events ON DELETE CASCADE,
    consumer              text        NOT NULL,
    stage                 text        NOT NULL DEFAULT 'delivery',
    due_at                timestamptz,
    delivery_timeout_s    integer     NOT NULL,
    processing_timeout_s  integer     NOT NULL,
    max_raises            integer     NOT NULL,
    raises                integer     NOT NULL DEFAULT 0,
    reminders             integer     NOT NULL DEFAULT 0,
    delivered_at          timestamptz,
    processed_at          timestamptz,
    outcome               text,                    -- ok failed
    message               text,
    error                 text,
    retry_at              timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ack_guid, consumer)
);
CREATE INDEX acks_due ON strand.acks (due_at) WHERE due_at IS NOT NULL;
