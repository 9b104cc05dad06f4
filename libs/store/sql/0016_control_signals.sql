-- 0016_control_signals: Strand's own record of each signal that ends an instance
-- (CANCEL, TERMINATE), written in the transaction that enqueues the signal
-- (st_signal_enqueue_tx). The executor applies such a signal only if its row is here
-- and deletes the row as it applies it, so a message produced straight onto the
-- signals topic by anyone but Strand's services ends nothing (issue 21, item 5;
-- docs/operations.md "Kafka security"). The owning module is libs/common/src/signal.c.
-- A signal naming an instance that does not exist gets no row (it is dropped as
-- unknown anyway); a row whose signal was dropped as stale goes with its instance.

CREATE TABLE strand.control_signals (
    signal_id   text        PRIMARY KEY,
    instance_id uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    type        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX control_signals_by_instance ON strand.control_signals (instance_id);
