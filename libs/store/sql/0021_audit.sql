-- 0021_audit: the audit log, one row per operator action (issue 18, item 3): who asked,
-- what, on which instance or object, when, and the instance's state before and after.
-- An action taken in two steps (the API accepts it, the executor applies it) writes a
-- row at each step: outcome 'requested', then 'applied' or 'rejected'. The owning
-- module is libs/common/src/audit.c; GET /v1/audit reads it.

CREATE TABLE strand.audit_log (
    id          bigserial   PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,              -- the principal's name, or 'system'
    action      text        NOT NULL,              -- cancel, retry, pause, patch_variables, ...
    outcome     text        NOT NULL,              -- requested applied rejected
    instance_id uuid,                              -- no foreign key: the log outlives instances
    target      text,                              -- another object: dead letter, batch, definition
    before      jsonb,
    after       jsonb,
    detail      jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_by_instance ON strand.audit_log (instance_id, id) WHERE instance_id IS NOT NULL;
CREATE INDEX audit_log_by_time ON strand.audit_log (at);
