-- 0025_batches: durable bulk operations (issue 18, item 2). A batch job applies one
-- action (cancel, terminate, signal, retry, pause, resume) to the instances its filter
-- selected when it was created: their ids are frozen in strand.batch_items in the
-- creating transaction, so instances started later are not touched. Workers
-- (strand-scheduler's batch loop) claim pending items in chunks with FOR UPDATE SKIP
-- LOCKED and, in one transaction per chunk, enqueue each item's signal, write its audit
-- row, mark it done or failed and add the chunk to the job's counters: a worker killed
-- mid-chunk leaves the chunk pending for the next claim, and no item is applied twice.
-- The owning module is libs/common/src/batch.c.

CREATE TABLE strand.batch_jobs (
    id          uuid        PRIMARY KEY,
    action      text        NOT NULL,              -- cancel terminate signal retry pause resume
    filter      jsonb       NOT NULL,              -- as the request gave it
    args        jsonb       NOT NULL DEFAULT '{}', -- {name, payload} for signal; {reason}
    status      text        NOT NULL,              -- running completed failed cancelled
    total       integer     NOT NULL DEFAULT 0,
    done        integer     NOT NULL DEFAULT 0,    -- items whose action was enqueued
    failed      integer     NOT NULL DEFAULT 0,    -- items the action did not apply to
    created_by  text        NOT NULL,              -- the principal; the audit rows' actor
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    ended_at    timestamptz
);
CREATE INDEX batch_jobs_running ON strand.batch_jobs (created_at, id) WHERE status = 'running';
CREATE INDEX batch_jobs_by_created ON strand.batch_jobs (created_at, id);

CREATE TABLE strand.batch_items (
    job_id      uuid        NOT NULL REFERENCES strand.batch_jobs ON DELETE CASCADE,
    seq         integer     NOT NULL,              -- 1..total, in the instances' created order
    instance_id uuid        NOT NULL,              -- no foreign key: retention may purge it
    state       text        NOT NULL DEFAULT 'pending',   -- pending done failed
    signal_id   text,                              -- the signal enqueued for it (done)
    error       jsonb,                             -- {code, message} (failed)
    worked_at   timestamptz,
    PRIMARY KEY (job_id, seq),
    UNIQUE (job_id, instance_id)
);
CREATE INDEX batch_items_pending ON strand.batch_items (job_id, seq) WHERE state = 'pending';
CREATE INDEX batch_items_failed ON strand.batch_items (job_id, seq) WHERE state = 'failed';
