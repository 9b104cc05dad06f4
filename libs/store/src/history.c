/* history.c - the owner of strand.history (see history.h). */
#include "strand/history.h"

#include <stdlib.h>

#include "strand/pg.h"

static const char *const sql_history_insert =
    ST_HISTORY_INSERT " VALUES ($1::uuid, $2, $3::jsonb)";

static st_err_t add(PGconn *conn, const char *instance_id, const char *kind,
                    const json_t *detail, int queued, st_errbuf_t *eb)
{
    char *text = json_dumps(detail, JSON_COMPACT);
    if (text == NULL)
        return st_err_set(eb, ST_ERR_NOMEM, "could not encode a history entry");
    const char *params[] = {instance_id, kind, text};
    st_err_t err = queued ? st_pg_queue_bin(conn, sql_history_insert, 3, params, NULL, NULL, eb)
                          : st_pg_exec(conn, sql_history_insert, 3, params, NULL, eb);
    free(text);
    return err;
}

st_err_t st_history_add_tx(PGconn *conn, const char *instance_id, const char *kind,
                           const json_t *detail, st_errbuf_t *eb)
{
    return add(conn, instance_id, kind, detail, 0, eb);
}

st_err_t st_history_queue_tx(PGconn *conn, const char *instance_id, const char *kind,
                             const json_t *detail, st_errbuf_t *eb)
{
    return add(conn, instance_id, kind, detail, 1, eb);
}
