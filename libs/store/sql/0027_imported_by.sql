-- 0027_imported_by: who imported each definition version (issue 33, "a scope is a
-- scope").
--
-- Importing a definition whose subworkflow steps start other definitions needs
-- instances:start on each of them (services/api/definitions.c). The executor checks it
-- again when a subworkflow step starts its child (services/executor/effects.c): the
-- principal recorded here must still hold instances:start on the child's definition in
-- the current token file. NULL: imported before this column existed, not checked.
-- With authentication off the API records "anonymous".

-- Owner: libs/store/src/definition_store.c (as for the rest of the table).
ALTER TABLE strand.definitions ADD COLUMN imported_by text;
