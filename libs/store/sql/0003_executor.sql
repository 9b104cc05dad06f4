-- 0003_executor: subworkflow parentage, outbound calls, and buffered signals.

ALTER TABLE strand.instances
    ADD COLUMN parent_instance_id   uuid,
    ADD COLUMN parent_waiting_token text;
CREATE INDEX instances_by_parent ON strand.instances (parent_instance_id)
    WHERE parent_instance_id IS NOT NULL;

-- A call the interpreter asked for; the dispatcher performs it after commit and
-- reports the outcome as a CALL_RESULT signal.
CREATE TABLE strand.calls (
    id               uuid        PRIMARY KEY,
    instance_id      uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    waiting_token    text        NOT NULL,
    transport        text        NOT NULL,     -- http kafka
    request          jsonb       NOT NULL,
    attempt          integer     NOT NULL DEFAULT 1,
    idempotency_key  text        NOT NULL,
    timeout_ms       integer     NOT NULL,
    status           text        NOT NULL DEFAULT 'pending',  -- pending sent succeeded failed
    result           jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX calls_pending ON strand.calls (created_at) WHERE status = 'pending';

-- External signals that arrived before the instance waited for them.
CREATE TABLE strand.signal_buffer (
    id           bigserial   PRIMARY KEY,
    instance_id  uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    name         text        NOT NULL,
    signal_id    text        NOT NULL,
    payload      jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signal_buffer_by_instance ON strand.signal_buffer (instance_id, name, id);
