-- 0001_init: Strand's base schema. Applied once by st_pg_migrate() under an advisory
-- lock; every service runs migrations at start-up, so a fresh deployment and a restart
-- take the same path. Migrations are append-only: never edit an applied file.

CREATE TABLE strand.definitions (
    name        text        NOT NULL,
    version     integer     NOT NULL CHECK (version > 0),
    kind        text        NOT NULL,
    source      jsonb       NOT NULL,          -- the document as imported
    canonical   jsonb       NOT NULL,          -- what the interpreter runs
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE strand.instances (
    id                  uuid        PRIMARY KEY,
    definition_name     text        NOT NULL,
    definition_version  integer     NOT NULL,
    business_ref        text,
    status              text        NOT NULL,  -- pending running waiting completed failed cancelled terminated
    input               jsonb       NOT NULL DEFAULT '{}',
    output              jsonb,
    error               jsonb,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    ended_at            timestamptz,
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions
);
CREATE INDEX instances_by_definition ON strand.instances (definition_name, status, created_at);
CREATE INDEX instances_by_business_ref ON strand.instances (business_ref) WHERE business_ref IS NOT NULL;
CREATE INDEX instances_by_created ON strand.instances (created_at, id);

CREATE TABLE strand.runtime_states (
    instance_id             uuid        PRIMARY KEY REFERENCES strand.instances ON DELETE CASCADE,
    state_version           bigint      NOT NULL DEFAULT 0,
    snapshot_schema_version integer     NOT NULL DEFAULT 1,
    snapshot                jsonb,                     -- NULL until the START signal runs
    waiting_kind            text,
    waiting_token           text,
    waiting_until           timestamptz,
    last_signal_id          text,
    last_error_code         text,
    last_error              jsonb,
    last_executed_by        text,
    last_executed_at        timestamptz
);

CREATE TABLE strand.tasks (
    id              uuid        PRIMARY KEY,
    instance_id     uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    name            text        NOT NULL,
    status          text        NOT NULL,      -- open assigned completed cancelled
    roles           text[]      NOT NULL DEFAULT '{}',
    assignee        text,
    payload         jsonb       NOT NULL DEFAULT '{}',
    waiting_token   text        NOT NULL,
    deadline_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz
);
CREATE INDEX tasks_open_by_roles ON strand.tasks USING gin (roles) WHERE status IN ('open', 'assigned');
CREATE INDEX tasks_by_instance ON strand.tasks (instance_id);

CREATE TABLE strand.task_events (
    id          bigserial   PRIMARY KEY,
    task_id     uuid        NOT NULL REFERENCES strand.tasks ON DELETE CASCADE,
    kind        text        NOT NULL,          -- created assigned released completed
    actor       text,
    detail      jsonb       NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE strand.history (
    id          bigserial   PRIMARY KEY,
    instance_id uuid        NOT NULL REFERENCES strand.instances ON DELETE CASCADE,
    kind        text        NOT NULL,
    detail      jsonb       NOT NULL DEFAULT '{}',
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX history_by_instance ON strand.history (instance_id, id);

CREATE TABLE strand.timers (
    id              bigserial   PRIMARY KEY,
    instance_id     uuid        NOT NULL,
    waiting_token   text        NOT NULL,
    kind            text        NOT NULL,      -- timer retry state_timeout process_timeout
    shard           integer     NOT NULL,
    due_at          timestamptz NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{}',
    fired_at        timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX timers_pending ON strand.timers (shard, due_at) WHERE fired_at IS NULL;

-- Messages committed with the state change that caused them; the relay publishes
-- them to Kafka after commit (topic is the suffix; the prefix is configuration).
CREATE TABLE strand.outbox (
    id              bigserial   PRIMARY KEY,
    topic           text        NOT NULL,
    key             text,
    payload         bytea       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    published_at    timestamptz
);
CREATE INDEX outbox_unpublished ON strand.outbox (id) WHERE published_at IS NULL;
CREATE INDEX outbox_published ON strand.outbox (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE strand.processed_signals (
    signal_id       text        PRIMARY KEY,
    instance_id     uuid        NOT NULL,
    outcome         text        NOT NULL,      -- applied stale duplicate
    processed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX processed_signals_by_time ON strand.processed_signals (processed_at);

CREATE TABLE strand.requests (
    scope           text        NOT NULL,      -- "start", "trigger", ...
    request_id      text        NOT NULL,
    instance_id     uuid,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, request_id)
);

CREATE TABLE strand.dead_letters (
    id              bigserial   PRIMARY KEY,
    source_topic    text        NOT NULL,
    source_partition integer,
    source_offset   bigint,
    instance_id     uuid,
    reason          text        NOT NULL,
    attempts        integer     NOT NULL,
    node_id         text        NOT NULL,
    payload         bytea       NOT NULL,
    status          text        NOT NULL DEFAULT 'open',   -- open replayed discarded
    created_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE strand.leases (
    name            text        PRIMARY KEY,
    holder          text        NOT NULL,
    expires_at      timestamptz NOT NULL
);
