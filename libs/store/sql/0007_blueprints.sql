-- 0007_blueprints: lifecycle blueprints, normalised beside their canonical JSON, so
-- that operators and reports can query states, transitions, routes and hooks. Written
-- by the import in the same transaction as strand.definitions; never updated
-- (definitions are immutable).

CREATE TABLE strand.lc_states (
    definition_name    text    NOT NULL,
    definition_version integer NOT NULL,
    name               text    NOT NULL,
    final              boolean NOT NULL DEFAULT false,
    initial            boolean NOT NULL DEFAULT false,
    timeout            jsonb,
    PRIMARY KEY (definition_name, definition_version, name),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);
CREATE TABLE strand.lc_events (
    definition_name    text    NOT NULL,
    definition_version integer NOT NULL,
    code               text    NOT NULL,
    PRIMARY KEY (definition_name, definition_version, code),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);
CREATE TABLE strand.lc_transitions (
    definition_name    text    NOT NULL,
    definition_version integer NOT NULL,
    from_state         text    NOT NULL,
    event              text    NOT NULL,
    to_state           text    NOT NULL,
    PRIMARY KEY (definition_name, definition_version, from_state, event),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);
CREATE TABLE strand.lc_routes (
    definition_name    text    NOT NULL,
    definition_version integer NOT NULL,
    name               text    NOT NULL,
    consumers          jsonb   NOT NULL,
    carries_transitions boolean NOT NULL DEFAULT false,
    PRIMARY KEY (definition_name, definition_version, name),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);
CREATE TABLE strand.lc_hooks (
    definition_name    text    NOT NULL,
    definition_version integer NOT NULL,
    policy             integer NOT NULL,     -- index in the blueprint's policies
    hook               integer NOT NULL,     -- index in the policy's hooks
    when_from          text,
    when_to            text,
    when_event         text,
    code               text    NOT NULL,
    route              text    NOT NULL,
    payload            jsonb   NOT NULL DEFAULT '{}',
    PRIMARY KEY (definition_name, definition_version, policy, hook),
    FOREIGN KEY (definition_name, definition_version) REFERENCES strand.definitions ON DELETE CASCADE
);
