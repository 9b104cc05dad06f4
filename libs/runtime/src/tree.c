/* tree.c - an instance's end reaches what it owns (see tree.h). */
#include "strand/tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/call.h"
#include "strand/pg.h"
#include "strand/task.h"
#include "strand/work.h"

/* One round trip: cancels the instance's open tasks (each with a task event), its
 * pending calls, and the ACKs still awaited for its Kafka-transport calls (stage
 * `cancelled`: no more re-raises; a late ACK is a harmless duplicate), and answers its
 * children that have not ended, with the token each was started for. $2 NULL:
 * everything; else only what the wait $2 owns. */
static const char *const sql_tree_end =
    "WITH " ST_TASK_CANCEL_CTES("$1::uuid", "$2", "$3::jsonb") ","
    " c AS (" ST_CALL_CANCEL_SQL("$1::uuid", "$2") "),"
    " a AS (" ST_ACK_CANCEL_CALLS_SQL("$1::uuid", "$2") ")"
    " SELECT id, parent_waiting_token FROM strand.instances"
    " WHERE parent_instance_id = $1::uuid AND ($2::text IS NULL OR parent_waiting_token = $2)"
    " AND status NOT IN ('completed', 'failed', 'cancelled', 'terminated')";

static st_err_t end_owned_tx(PGconn *conn, const char *instance_id, const char *token,
                             const char *reason, st_signal_type_t child_signal, st_errbuf_t *eb)
{
    json_t *detail = json_pack("{s:s}", "reason", reason);
    char *detail_text = json_dumps(detail, JSON_COMPACT);
    json_decref(detail);
    if (detail_text == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a task event");
    const char *params[] = {instance_id, token, detail_text};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_tree_end, 3, params, &res, eb);
    free(detail_text);
    if (err != ST_OK)
        return err;
    for (int i = 0; i < PQntuples(res) && err == ST_OK; i++) {
        st_signal_t sig;
        st_signal_init(&sig, child_signal, PQgetvalue(res, i, 0), -1);
        snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", PQgetvalue(res, i, 1));
        sig.payload = json_pack("{s:s, s:s}", "reason", reason, "parent_id", instance_id);
        err = st_signal_enqueue_tx(conn, &sig, eb);
        st_signal_close(&sig);
    }
    PQclear(res);
    return err;
}

st_err_t st_tree_end_tx(PGconn *conn, const char *instance_id, const char *status,
                        st_errbuf_t *eb)
{
    char reason[48];
    snprintf(reason, sizeof reason, "parent_%s", status);
    return end_owned_tx(conn, instance_id, NULL, reason,
                        strcmp(status, "terminated") == 0 ? ST_SIGNAL_TERMINATE : ST_SIGNAL_CANCEL,
                        eb);
}

st_err_t st_tree_abandon_tx(PGconn *conn, const char *instance_id, const char *token,
                            st_errbuf_t *eb)
{
    if (token == NULL || token[0] == '\0')
        return st_err_set(eb, ST_ERR_INVALID, "an abandoned wait needs its token");
    return end_owned_tx(conn, instance_id, token, "branch_abandoned", ST_SIGNAL_CANCEL, eb);
}

int st_tree_from_parent(const st_signal_t *sig, const char *parent_token)
{
    return parent_token != NULL && parent_token[0] != '\0' && sig->waiting_token[0] != '\0' &&
           strcmp(sig->waiting_token, parent_token) == 0;
}

st_err_t st_tree_notify_parent_tx(PGconn *conn, const char *child_id, const char *parent_id,
                                  const char *parent_token, const char *status,
                                  const json_t *output, const json_t *error, st_errbuf_t *eb)
{
    st_signal_t sig;
    st_signal_init(&sig, ST_SIGNAL_CHILD_COMPLETED, parent_id, -1);
    snprintf(sig.waiting_token, sizeof sig.waiting_token, "%s", parent_token ? parent_token : "");
    sig.payload = json_pack("{s:s, s:s, s:O, s:O}", "child_id", child_id, "status", status,
                            "output", output ? output : json_null(), "error",
                            error ? error : json_null());
    st_err_t err = sig.payload == NULL ? st_err_set(eb, ST_ERR_NOMEM, "could not build a signal")
                                       : st_signal_enqueue_tx(conn, &sig, eb);
    st_signal_close(&sig);
    return err;
}
