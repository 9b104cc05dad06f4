-- 0012_scopes: idempotency scoped to what it protects (ARCHITECTURE.md invariant 13), and
-- at most one running lifecycle instance per reference (issue 16).
--
-- strand.requests held one key per (scope, request_id): every signal, queue message and
-- RPC shared one scope for all instances, so the same message id sent to a second
-- instance was answered "duplicate" and dropped. A request id is now unique within
-- (scope, scope_owner, scope_name):
--   scope     scope_owner        scope_name
--   start     ''                 ''                  one start per request id (as before)
--   signal    the instance id    the signal name     queue messages too
--   cancel    the instance id    ''
--   terminate the instance id    ''
--   rpc       the instance id    the rpc name
--   trigger   the definition     the external_ref
-- The owning module is libs/common/src/request.c.

ALTER TABLE strand.requests
    ADD COLUMN scope_owner text NOT NULL DEFAULT '',
    ADD COLUMN scope_name  text NOT NULL DEFAULT '';
-- The old key goes first: rpc keys of two instances become the same request id.
ALTER TABLE strand.requests DROP CONSTRAINT requests_pkey;

-- Existing rows keep protecting what they protected:
-- a signal key (cancels and terminates shared the scope) names its instance but not its
-- signal name; scope_name '' (no signal has an empty name) marks it as claimed for
-- every name of that instance (st_request_claim_tx() reads it so).
UPDATE strand.requests SET scope_owner = instance_id::text
 WHERE scope = 'signal' AND instance_id IS NOT NULL;

-- an rpc key was "<instance id>:<rpc>:<request id>" in one string.
UPDATE strand.requests
   SET scope_owner = instance_id::text,
       scope_name = split_part(substr(request_id, 38), ':', 1),
       request_id = substr(request_id, 39 + length(split_part(substr(request_id, 38), ':', 1)))
 WHERE scope = 'rpc' AND instance_id IS NOT NULL
   AND left(request_id, 37) = instance_id::text || ':'
   AND split_part(substr(request_id, 38), ':', 1) <> ''
   AND length(request_id) > 38 + length(split_part(substr(request_id, 38), ':', 1));

-- a trigger key was the scope "trigger:<definition>:<external_ref>"; the longest
-- lifecycle name that prefixes it is the definition. The instance is recorded too (the
-- DuplicateRequest notice names it, and retention purges the key with it).
WITH m AS (
    SELECT DISTINCT ON (r.scope, r.request_id) r.scope, r.request_id, d.name
      FROM strand.requests r
      JOIN (SELECT DISTINCT name FROM strand.definitions WHERE kind = 'lifecycle') d
        ON left(r.scope, length(d.name) + 9) = 'trigger:' || d.name || ':'
     WHERE r.scope LIKE 'trigger:%'
     ORDER BY r.scope, r.request_id, length(d.name) DESC)
UPDATE strand.requests r
   SET scope = 'trigger', scope_owner = m.name, scope_name = substr(m.scope, length(m.name) + 10)
  FROM m
 WHERE r.scope = m.scope AND r.request_id = m.request_id;
UPDATE strand.requests r
   SET instance_id = (SELECT i.id FROM strand.instances i
                       WHERE i.definition_name = r.scope_owner AND i.business_ref = r.scope_name
                       ORDER BY i.created_at DESC LIMIT 1)
 WHERE r.scope = 'trigger' AND r.instance_id IS NULL;

ALTER TABLE strand.requests ADD PRIMARY KEY (scope, scope_owner, scope_name, request_id);
CREATE INDEX requests_by_instance ON strand.requests (instance_id) WHERE instance_id IS NOT NULL;

-- A lifecycle reference has at most one running instance, whatever its version. The
-- flag marks instances opened by a trigger (strand-api's triggers.c).
ALTER TABLE strand.instances ADD COLUMN lifecycle boolean NOT NULL DEFAULT false;
-- Instances opened before this migration: the oldest running one per reference gets
-- the flag (triggers went to it); a second one the old defect opened keeps running
-- without it, visible in the instance list, and is ended like any other.
UPDATE strand.instances i SET lifecycle = true
  FROM strand.definitions d
 WHERE d.name = i.definition_name AND d.version = i.definition_version AND d.kind = 'lifecycle'
   AND i.business_ref IS NOT NULL
   AND (i.status IN ('completed', 'failed', 'cancelled', 'terminated')
        OR NOT EXISTS (SELECT 1 FROM strand.instances o
                        WHERE o.definition_name = i.definition_name
                          AND o.business_ref = i.business_ref
                          AND o.status NOT IN ('completed', 'failed', 'cancelled', 'terminated')
                          AND (o.created_at, o.id) < (i.created_at, i.id)));
CREATE UNIQUE INDEX instances_one_running_lifecycle
    ON strand.instances (definition_name, business_ref)
 WHERE lifecycle AND status NOT IN ('completed', 'failed', 'cancelled', 'terminated');
