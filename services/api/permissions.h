/*
 * permissions.h - the one table of what each API route and each ingress command needs:
 * a permission (auth.h) and where the request names its definition, for grants limited
 * to one definition ("instances:start@orders") or one ACK consumer ("acks:send:billing").
 *
 * Default deny: a route without a rule answers 403 to everyone, admins included, so
 * a new route cannot ship open by mistake (strand-api --check-openapi and
 * tests/integration/test_permissions.c find it first).
 */
#ifndef STRAND_API_PERMISSIONS_H
#define STRAND_API_PERMISSIONS_H

#include <jansson.h>
#include <libpq-fe.h>

#include "api.h"
#include "strand/auth.h"
#include "strand/http.h"

/* Where a request names the definition (or consumer) a limited grant is checked on. */
typedef enum {
    ST_TARGET_PUBLIC,           /* no token needed (health, metrics, the OpenAPI document) */
    ST_TARGET_SELF,             /* any authenticated caller, about itself (whoami); the
                                   rule's permission is not checked */
    ST_TARGET_ANY,              /* reveals no definition's data: any grant of the permission */
    ST_TARGET_NONE,             /* spans definitions (lists, dead letters): an unlimited grant */
    ST_TARGET_PATH_NAME,        /* the {name} path parameter */
    ST_TARGET_INSTANCE,         /* the {id} instance: its definition, looked up if needed */
    ST_TARGET_TASK,             /* the {id} task: its instance's definition, looked up */
    ST_TARGET_ARG_DEFINITION,   /* the body's "definition" */
    ST_TARGET_ARG_NAME,         /* the body's "name" (a definition document) */
    ST_TARGET_ARG_CONSUMER,     /* the body's "consumer" (an ACK) */
    ST_TARGET_QUERY_DEFINITION  /* a list's ?definition= filter */
} st_perm_target_t;

typedef struct {
    const char *method;         /* NULL in the command table */
    const char *pattern;
    st_perm_t perm;
    st_perm_target_t target;
} st_perm_rule_t;

/* The rule of a route; NULL when it has none (the route is refused). Static. */
const st_perm_rule_t *st_perm_route_rule(const char *method, const char *pattern);
/* The rule of an ingress CommandType (strand.v1); NULL when it has none. Static. */
const st_perm_rule_t *st_perm_command_rule(int command_type);

/* The HTTP guard's second half, after authentication: answers 403 (naming the missing
 * permission in `required_permission`), 400/413 for a body it had to read, or 503,
 * and returns 0; returns 1 when the caller (api->current) may go on. */
int st_api_authorize(st_api_t *api, st_http_req_t *req);

/* The same for an ingress command of `command_type` on `target_id` (may be NULL) with
 * `args` (borrowed): returns 1 if `who` may run it, else sets a 403 (or 503) in `out`. */
int st_api_authorize_command(PGconn *conn, const st_principal_t *who, int command_type,
                             const char *target_id, const json_t *args, st_answer_t *out);

/* For HTTP handlers that need a permission beyond their route's rule: answers 403 and
 * returns 0 unless the caller holds `perm` for `definition` (NULL: in any grant). */
int st_api_require_permission(st_api_t *api, st_http_req_t *req, st_perm_t perm,
                              const char *definition);

#endif
