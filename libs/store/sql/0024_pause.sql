-- 0024_pause: pause, resume and rewind (issue 18, helper pause).
--
-- A paused instance (status 'paused') or any instance of a paused definition version
-- keeps every wake-up that arrives (except cancel and terminate) in strand.signal_buffer
-- with its whole envelope, and they are sent again in arrival order on resume. A
-- rewind needs the snapshot the instance had at an earlier state_version: each
-- wake-up also keeps the snapshot it produced in strand.snapshot_log (the latest
-- ST_SNAPSHOT_LOG_KEEP versions per instance).

-- Owner: services/executor/wakeup.c (as for the rest of the table). `envelope` is the
-- encoded strand.v1.Signal held because the instance (or its definition version) was
-- paused; NULL for a named signal kept until the instance waits for it.
ALTER TABLE strand.signal_buffer ADD COLUMN envelope bytea;
CREATE INDEX signal_buffer_held ON strand.signal_buffer (instance_id, id) WHERE envelope IS NOT NULL;

-- Owner: libs/common/src/definition_pause.c. One row per paused definition version.
CREATE TABLE strand.definition_pauses (
    definition_name     text        NOT NULL,
    definition_version  integer     NOT NULL,
    paused_by           text        NOT NULL,
    reason              text,
    paused_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (definition_name, definition_version),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);

-- Owner: libs/common/src/snapshot_log.c. The snapshot each applied wake-up (or rewind)
-- produced, by the state_version it produced.
CREATE TABLE strand.snapshot_log (
    instance_id     uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    state_version   bigint      NOT NULL,
    snapshot        jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (instance_id, state_version)
);
-- As in 0008: no planner statistics for a column no query filters on.
ALTER TABLE strand.snapshot_log ALTER COLUMN snapshot SET STATISTICS 0;
ALTER TABLE strand.signal_buffer ALTER COLUMN envelope SET STATISTICS 0;
