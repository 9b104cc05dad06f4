-- The database work of W1 instances as Strand does it at 16 clients, without Strand: two
-- starts in one API transaction (the definition look-up, then per start the instance and
-- its runtime state and the START outbox row; one pipeline, one commit: the API's start
-- groups put about 1.8 starts in a commit at 16 clients) and each start's executor
-- wake-up in a transaction of its own (lock + dedup, then persist + commit), with the
-- statements and values of a real W1 instance (pg_stat_statements, tree d8bd970): 1.5
-- commits per instance, as Strand's. Left out, so that this is a floor: the relay's
-- claim and publish mark of the outbox row, and the API's read of the finished
-- instance. bench/floor.sh runs it with pgbench -M prepared; one pgbench transaction
-- is two instances.
\set a random(1, 9000000000000000)
\set b random(1, 9000000000000000)
\startpipeline
BEGIN;
SELECT version, canonical->>'id_reuse_policy' FROM strand.definitions WHERE name = 'floor_w1' AND (1::int IS NULL OR version = 1::int) ORDER BY version DESC LIMIT 1;
WITH i AS (INSERT INTO strand.instances (id, definition_name, definition_version, business_ref, status, input, parent_instance_id, parent_waiting_token, lifecycle) VALUES (md5(:a::text)::uuid, 'floor_w1', 1, NULL, 'pending', '{"i": 0}'::jsonb, NULL, NULL, false) RETURNING *), rs AS (INSERT INTO strand.runtime_states (instance_id, state_version) SELECT id, 0 FROM i RETURNING *) SELECT i.id, i.definition_name, i.definition_version, i.business_ref, i.status, i.input::text, i.output::text, i.error::text, i.created_at, i.updated_at, i.ended_at, rs.state_version, rs.waiting_kind, rs.waiting_token, rs.waiting_until FROM i JOIN rs ON rs.instance_id = i.id;
WITH ins AS (INSERT INTO strand.outbox (topic, key, payload, signal_id, instance_id) VALUES ('signals', md5(:a::text), '\x0801122431303235616437372d663639622d343331342d623036652d3237323963383533313463371a2461623532313739322d323738312d343265382d383361392d313635396539306437333737200138eaa7e587a1344a027b7d'::bytea, md5(:a::text || 's'), md5(:a::text)::uuid)) SELECT 1;
WITH i AS (INSERT INTO strand.instances (id, definition_name, definition_version, business_ref, status, input, parent_instance_id, parent_waiting_token, lifecycle) VALUES (md5(:b::text)::uuid, 'floor_w1', 1, NULL, 'pending', '{"i": 0}'::jsonb, NULL, NULL, false) RETURNING *), rs AS (INSERT INTO strand.runtime_states (instance_id, state_version) SELECT id, 0 FROM i RETURNING *) SELECT i.id, i.definition_name, i.definition_version, i.business_ref, i.status, i.input::text, i.output::text, i.error::text, i.created_at, i.updated_at, i.ended_at, rs.state_version, rs.waiting_kind, rs.waiting_token, rs.waiting_until FROM i JOIN rs ON rs.instance_id = i.id;
WITH ins AS (INSERT INTO strand.outbox (topic, key, payload, signal_id, instance_id) VALUES ('signals', md5(:b::text), '\x0801122431303235616437372d663639622d343331342d623036652d3237323963383533313463371a2461623532313739322d323738312d343265382d383361392d313635396539306437333737200138eaa7e587a1344a027b7d'::bytea, md5(:b::text || 's'), md5(:b::text)::uuid)) SELECT 1;
COMMIT;
\endpipeline
\startpipeline
BEGIN;
WITH p AS (INSERT INTO strand.processed_signals (signal_id, instance_id, outcome) VALUES (md5(:a::text || 's'), md5(:a::text)::uuid, 'applied') ON CONFLICT (signal_id) DO NOTHING RETURNING 1) SELECT rs.state_version, rs.snapshot::text, i.definition_name, i.definition_version, i.input::text, i.status, coalesce(i.business_ref, i.id::text), (SELECT count(*) FROM p), i.parent_instance_id, i.parent_waiting_token, EXISTS (SELECT 1 FROM strand.definition_pauses dp WHERE dp.definition_name = i.definition_name AND dp.definition_version = i.definition_version) FROM strand.runtime_states rs JOIN strand.instances i ON i.id = rs.instance_id WHERE rs.instance_id = md5(:a::text)::uuid FOR UPDATE OF rs;
\endpipeline
\startpipeline
WITH rs AS (UPDATE strand.runtime_states SET state_version = state_version + 1, snapshot = '{"seq": 0, "error": null, "input": {"i": 0}, "state": {"x": 1, "y": 2}, "output": {"y": 2}, "status": "completed", "threads": [{"id": 0, "done": true, "wait": null, "stack": [{"path": "/steps", "index": 3}], "parent": null}], "waiting": null, "next_thread": 1, "schema_version": 1}'::jsonb, waiting_kind = NULL, waiting_token = NULL, waiting_until = NULL, last_signal_id = md5(:a::text || 's'), last_executed_by = 'floor', last_executed_at = now(), last_error_code = NULL, last_error = NULL WHERE instance_id = md5(:a::text)::uuid AND state_version = 0 RETURNING 1), i AS (UPDATE strand.instances SET status = 'completed', output = '{"y": 2}'::jsonb, error = NULL, updated_at = now(), ended_at = now() WHERE id = md5(:a::text)::uuid AND EXISTS (SELECT 1 FROM rs)), h AS (INSERT INTO strand.history (instance_id, kind, detail) SELECT md5(:a::text)::uuid, 'wakeup', '{"status": "completed", "effects": ["complete"], "signal_id": "92298de1-9050-4316-9849-1bd47f275c5b", "signal_type": "START", "state_version": 1}'::jsonb WHERE EXISTS (SELECT 1 FROM rs)) SELECT (SELECT count(*) FROM rs);
COMMIT;
\endpipeline
\startpipeline
BEGIN;
WITH p AS (INSERT INTO strand.processed_signals (signal_id, instance_id, outcome) VALUES (md5(:b::text || 's'), md5(:b::text)::uuid, 'applied') ON CONFLICT (signal_id) DO NOTHING RETURNING 1) SELECT rs.state_version, rs.snapshot::text, i.definition_name, i.definition_version, i.input::text, i.status, coalesce(i.business_ref, i.id::text), (SELECT count(*) FROM p), i.parent_instance_id, i.parent_waiting_token, EXISTS (SELECT 1 FROM strand.definition_pauses dp WHERE dp.definition_name = i.definition_name AND dp.definition_version = i.definition_version) FROM strand.runtime_states rs JOIN strand.instances i ON i.id = rs.instance_id WHERE rs.instance_id = md5(:b::text)::uuid FOR UPDATE OF rs;
\endpipeline
\startpipeline
WITH rs AS (UPDATE strand.runtime_states SET state_version = state_version + 1, snapshot = '{"seq": 0, "error": null, "input": {"i": 0}, "state": {"x": 1, "y": 2}, "output": {"y": 2}, "status": "completed", "threads": [{"id": 0, "done": true, "wait": null, "stack": [{"path": "/steps", "index": 3}], "parent": null}], "waiting": null, "next_thread": 1, "schema_version": 1}'::jsonb, waiting_kind = NULL, waiting_token = NULL, waiting_until = NULL, last_signal_id = md5(:b::text || 's'), last_executed_by = 'floor', last_executed_at = now(), last_error_code = NULL, last_error = NULL WHERE instance_id = md5(:b::text)::uuid AND state_version = 0 RETURNING 1), i AS (UPDATE strand.instances SET status = 'completed', output = '{"y": 2}'::jsonb, error = NULL, updated_at = now(), ended_at = now() WHERE id = md5(:b::text)::uuid AND EXISTS (SELECT 1 FROM rs)), h AS (INSERT INTO strand.history (instance_id, kind, detail) SELECT md5(:b::text)::uuid, 'wakeup', '{"status": "completed", "effects": ["complete"], "signal_id": "92298de1-9050-4316-9849-1bd47f275c5b", "signal_type": "START", "state_version": 1}'::jsonb WHERE EXISTS (SELECT 1 FROM rs)) SELECT (SELECT count(*) FROM rs);
COMMIT;
\endpipeline
