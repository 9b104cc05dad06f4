/*
 * request.h - idempotency keys (strand.requests): a caller's request id, claimed once
 * per scope, so that a retried request changes nothing.
 *
 * A key is unique within (scope, owner, name) - docs/architecture.md invariant 13,
 * "idempotency is scoped to what it protects":
 *   ST_REQUEST_START     ("", "")                       a start
 *   ST_REQUEST_SIGNAL    (instance id, signal name)     a signal or queue message
 *   ST_REQUEST_CANCEL    (instance id, "")              a cancel
 *   ST_REQUEST_TERMINATE (instance id, "")              a terminate
 *   ST_REQUEST_RPC       (instance id, rpc name)        a process's RPC
 *   ST_REQUEST_TRIGGER   (definition name, external_ref) a lifecycle trigger
 * The same request id in another scope, instance, name or reference is another
 * request. This module owns the table's SQL (migrations 0001 and 0012).
 */
#ifndef STRAND_REQUEST_H
#define STRAND_REQUEST_H

#include <libpq-fe.h>

#include "strand/err.h"

#define ST_REQUEST_START "start"
#define ST_REQUEST_SIGNAL "signal"
#define ST_REQUEST_CANCEL "cancel"
#define ST_REQUEST_TERMINATE "terminate"
#define ST_REQUEST_RPC "rpc"
#define ST_REQUEST_TRIGGER "trigger"

/* Claims `request_id` in (scope, owner, name) for `instance_id` (may be NULL), inside
 * the caller's open transaction on `conn`: it commits or rolls back with the request's
 * effects. Sets *fresh to 1 when this call claimed it, 0 when it was claimed before;
 * then `prior_instance` (37 bytes, may be NULL) receives the instance the earlier
 * claim recorded, "" when it recorded none. A signal key claimed before migration 0012
 * (recorded without its signal name) counts for every name of its instance. */
st_err_t st_request_claim_tx(PGconn *conn, const char *scope, const char *owner,
                             const char *name, const char *request_id,
                             const char *instance_id, int *fresh, char *prior_instance,
                             st_errbuf_t *eb);

/* The retention run's part, for its one statement (a CTE body): deletes the keys
 * recorded for the instances in the CTE named `batch` (column id) unless `dry`, a
 * boolean SQL expression. Both are SQL text literals. */
#define ST_REQUEST_PURGE_SQL(batch, dry)                                                  \
    "DELETE FROM strand.requests r USING " batch " b WHERE NOT " dry                      \
    " AND r.instance_id = b.id RETURNING 1"

/* Like st_request_claim_tx() without claiming: sets *found, and `instance` (37 bytes,
 * may be NULL) to the instance the claim recorded ("" for none). Runs in the caller's
 * transaction if one is open. */
st_err_t st_request_find(PGconn *conn, const char *scope, const char *owner,
                         const char *name, const char *request_id, int *found,
                         char *instance, st_errbuf_t *eb);

#endif
