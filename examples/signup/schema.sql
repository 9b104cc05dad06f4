-- The application's own table for the sign-up example (docs/processes.md). Strand maps
-- the process's global attributes to columns of the row whose id is the process id.
CREATE SCHEMA IF NOT EXISTS app;
CREATE TABLE IF NOT EXISTS app.users (
    id      text PRIMARY KEY,          -- the process id (the start's business_ref)
    email   text,
    status  text CHECK (status IN ('waiting', 'verified')),
    source  text CHECK (source IN ('email_link', 'rpc', 'support'))
);
