-- 0022_readable: everything an operator needs can be read back (issue 18, items 3 and 4).
--
-- 1. Notices (StaleSignal, DuplicateRequest, IngressRejected, DispatchFailure...) were
--    only published on <prefix>notices. Each one is now also a row here, written in the
--    same transaction as its outbox row by st_notice_add_tx() (libs/common/src/notice.c,
--    the owner), listed by GET /v1/notices and GET /v1/instances/{id}/notices, and
--    purged by the retention run (STRAND_NOTICE_RETENTION_S). No foreign key: a notice
--    may name an instance that does not exist (UnknownInstance) and outlives the
--    instance it names until the retention run removes it.
CREATE TABLE strand.notices (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    code        text        NOT NULL,
    instance_id uuid,                         -- NULL when none, or not a UUID
    signal_id   text,
    message     text        NOT NULL,
    detail      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX notices_by_instance ON strand.notices (instance_id, id) WHERE instance_id IS NOT NULL;
CREATE INDEX notices_by_time ON strand.notices (at);

-- 2. Task events per task (GET /v1/tasks/{id}/events) and per instance (through
--    tasks_by_instance): 0001 indexed neither.
CREATE INDEX IF NOT EXISTS task_events_by_task ON strand.task_events (task_id, id);

-- 3. The audit log filtered by actor or action (GET /v1/audit?actor=&action=) reads
--    newest first by id; instance and time have their indexes since 0021.
CREATE INDEX IF NOT EXISTS audit_log_by_actor ON strand.audit_log (actor, id);
