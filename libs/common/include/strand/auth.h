/*
 * auth.h - bearer-token authentication: tokens mapped to principals, roles mapped to
 * permissions.
 *
 * The token file (STRAND_AUTH_FILE; a Kubernetes Secret mounted as a file works the
 * same) is JSON:
 *   {"roles":  {"approver": ["tasks:read", "tasks:act", "instances:read"],
 *               "orders-bot": ["instances:start@orders", "acks:send:billing"]},
 *    "tokens": [{"token": "s3cret", "principal": "alice", "roles": ["approver"]},
 *               {"token_sha256": "<hex>", "principal": "ops", "roles": ["operator"]}]}
 * A token is given either in clear or as the hex SHA-256 of the token. "roles" is
 * optional: it names roles and the permissions each grants (docs/api.md,
 * "Authentication and permissions"). A permission is a name from st_perm_t
 * ("instances:start"), "<group>:*" for a whole group, optionally limited to one
 * definition ("instances:start@orders": definitions, instances, tasks, triggers) or, for
 * acks:send, to one consumer ("acks:send:billing").
 * Built-in roles: admin (every permission), operator (instances:*, dead-letters:*,
 * tasks:read, definitions:read), viewer (every :read). A role name neither built in
 * nor defined in "roles" is a task role (a definition's task names it): it grants
 * tasks:read, tasks:act and instances:read, as before permissions existed.
 * Without a file, authentication is off and every caller is the principal
 * "anonymous" with the role "admin" (development only; the service logs a warning at
 * start-up).
 */
#ifndef STRAND_AUTH_H
#define STRAND_AUTH_H

#include <jansson.h>

#include "strand/err.h"

#define ST_AUTH_MAX_ROLES 16

/* The permissions a role can grant; ST_PERM_ADMIN implies every other. */
typedef enum {
    ST_PERM_DEFINITIONS_READ,
    ST_PERM_DEFINITIONS_WRITE,
    ST_PERM_INSTANCES_READ,
    ST_PERM_INSTANCES_START,
    ST_PERM_INSTANCES_SIGNAL,
    ST_PERM_INSTANCES_OPERATE,     /* cancel (and later retry-like verbs) */
    ST_PERM_INSTANCES_TERMINATE,
    ST_PERM_TASKS_READ,
    ST_PERM_TASKS_ACT,             /* assign, release, complete; the task's roles apply too */
    ST_PERM_ACKS_SEND,
    ST_PERM_DEAD_LETTERS_READ,
    ST_PERM_DEAD_LETTERS_OPERATE,  /* replay, discard */
    ST_PERM_TRIGGERS_SEND,
    ST_PERM_AUDIT_READ,            /* the audit log (GET /v1/audit) */
    ST_PERM_ADMIN,
    ST_PERM_COUNT
} st_perm_t;

/* A grant limited to one definition and/or one ACK consumer. */
typedef struct {
    st_perm_t perm;
    char scope[128];       /* the definition name ("@orders") */
    char qualifier[64];    /* the ACK consumer ("acks:send:billing"); "" = any */
} st_grant_t;

typedef struct {
    char name[128];
    int nroles;
    char roles[ST_AUTH_MAX_ROLES][64];
    unsigned perms;              /* bit (1u << p): p held for every definition and consumer */
    int ngrants;                 /* grants limited to a definition or a consumer */
    const st_grant_t *grants;    /* borrowed from the st_auth_t; valid until st_auth_free() */
} st_principal_t;

typedef struct st_auth st_auth_t;

/* Loads the token file at `path` (NULL or "" = authentication off). On a bad file
 * returns ST_ERR_CONFIG naming the problem. Caller frees with st_auth_free(). */
st_err_t st_auth_load(const char *path, st_auth_t **out, st_errbuf_t *eb);
void st_auth_free(st_auth_t *auth);

/* Reads the token file again, as one atomic swap: requests see either the old tokens
 * or the new ones. `force` = 0 reads it only when it changed since the last try (inode,
 * size or mtime: a rewritten file, a renamed-over file, a Kubernetes Secret update).
 * Sets *reloaded when new tokens took effect. A file that does not load (bad JSON, a
 * bad entry, missing) keeps the old tokens and returns ST_ERR_CONFIG with `eb` naming
 * the problem; that same unchanged file is not reported again. Authentication cannot
 * be switched on or off by a reload. Thread-safe with st_auth_authenticate(); every
 * table read stays allocated until st_auth_free() (principals point at its grants). */
st_err_t st_auth_reload(st_auth_t *auth, int force, int *reloaded, st_errbuf_t *eb);

/* True when a token file is configured. */
int st_auth_enabled(const st_auth_t *auth);

/* Resolves a bearer token (the part after "Bearer "; NULL if none was sent) into
 * `who`. Returns ST_ERR_UNAUTHORIZED for a missing or unknown token. `who->grants`
 * stays owned by `auth`. */
st_err_t st_auth_authenticate(const st_auth_t *auth, const char *token, st_principal_t *who);

/* Extracts the token from an Authorization header value; NULL if it is not
 * "Bearer <token>" with a token of visible ASCII characters only (no control
 * characters, spaces or other bytes). Borrowed from `header`. */
const char *st_auth_bearer(const char *header);

/* True if `who` holds `role` (or the admin permission). */
int st_principal_has_role(const st_principal_t *who, const char *role);
/* True if `who` holds any role of the JSON string array `roles` (or the admin
 * permission). */
int st_principal_has_any_role(const st_principal_t *who, const json_t *roles);

/* ---- permissions ------------------------------------------------------------------ */

/* The permission's name ("instances:start"); a static string. */
const char *st_perm_name(st_perm_t perm);

/* How `who` holds `perm`: for everything, only for some definitions or consumers, or
 * not at all. Admins hold everything. */
typedef enum { ST_HOLDS_NONE, ST_HOLDS_SOME, ST_HOLDS_ALL } st_holds_t;
st_holds_t st_principal_holds(const st_principal_t *who, st_perm_t perm);

/* True if `who` may use `perm` on the definition `definition` for the ACK consumer
 * `consumer` (either NULL where the request names none: then only a grant without that
 * limit counts). */
int st_principal_may(const st_principal_t *who, st_perm_t perm, const char *definition,
                     const char *consumer);

/* True if the principal named `name` holds `perm` for `definition` (st_principal_may())
 * through some token of the current token file: every token entry with that principal
 * counts. A principal the file no longer names holds nothing (0). With authentication
 * off, 1. For checks made later on a principal's behalf (the executor: the importer of
 * a definition may still start its subworkflows' definitions). Thread-safe with
 * st_auth_reload(). */
int st_auth_principal_may(const st_auth_t *auth, const char *name, st_perm_t perm,
                          const char *definition);

#endif
