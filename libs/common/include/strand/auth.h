/*
 * auth.h - bearer-token authentication: tokens mapped to principals with roles.
 *
 * The token file (STRAND_AUTH_FILE; a Kubernetes Secret mounted as a file works the
 * same) is JSON:
 *   {"tokens": [{"token": "s3cret", "principal": "alice", "roles": ["approver"]},
 *               {"token_sha256": "<hex>", "principal": "ops", "roles": ["admin"]}]}
 * A token is given either in clear or as the hex SHA-256 of the token. The role
 * "admin" grants every operation. Without a file, authentication is off and every
 * caller is the principal "anonymous" with the role "admin" (development only; the
 * service logs a warning at start-up).
 */
#ifndef STRAND_AUTH_H
#define STRAND_AUTH_H

#include <jansson.h>

#include "strand/err.h"

#define ST_AUTH_MAX_ROLES 16

typedef struct {
    char name[128];
    int nroles;
    char roles[ST_AUTH_MAX_ROLES][64];
} st_principal_t;

typedef struct st_auth st_auth_t;

/* Loads the token file at `path` (NULL or "" = authentication off). On a bad file
 * returns ST_ERR_CONFIG naming the problem. Caller frees with st_auth_free(). */
st_err_t st_auth_load(const char *path, st_auth_t **out, st_errbuf_t *eb);
void st_auth_free(st_auth_t *auth);

/* True when a token file is configured. */
int st_auth_enabled(const st_auth_t *auth);

/* Resolves a bearer token (the part after "Bearer "; NULL if none was sent) into
 * `who`. Returns ST_ERR_UNAUTHORIZED for a missing or unknown token. */
st_err_t st_auth_authenticate(const st_auth_t *auth, const char *token, st_principal_t *who);

/* Extracts the token from an Authorization header value; NULL if it is not
 * "Bearer <token>" with a token of visible ASCII characters only (no control
 * characters, spaces or other bytes). Borrowed from `header`. */
const char *st_auth_bearer(const char *header);

/* True if `who` holds `role` (or is an admin). */
int st_principal_has_role(const st_principal_t *who, const char *role);
/* True if `who` holds any role of the JSON string array `roles` (or is an admin). */
int st_principal_has_any_role(const st_principal_t *who, const json_t *roles);

#endif
