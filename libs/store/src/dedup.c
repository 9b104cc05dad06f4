/* dedup.c - the owner of strand.processed_signals (see dedup.h). */
#include "strand/dedup.h"

#include <stdio.h>

#include "strand/pg.h"

st_err_t st_dedup_set_outcome_tx(PGconn *conn, const char *signal_id, const char *outcome,
                                 st_errbuf_t *eb)
{
    static const char *const sql_processed_outcome =
        "UPDATE strand.processed_signals SET outcome = $2 WHERE signal_id = $1";
    const char *params[] = {signal_id, outcome};
    return st_pg_exec(conn, sql_processed_outcome, 2, params, NULL, eb);
}

st_err_t st_dedup_recorded_here_tx(PGconn *conn, const char *signal_id, int *fresh,
                                   st_errbuf_t *eb)
{
    static const char *const sql_processed_by_us =
        "SELECT xmin = pg_current_xact_id()::xid FROM strand.processed_signals"
        " WHERE signal_id = $1";
    const char *params[] = {signal_id};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_processed_by_us, 1, params, &res, eb);
    if (err != ST_OK)
        return err;
    *fresh = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    return ST_OK;
}

st_err_t st_dedup_purge(PGconn *conn, int retention_s, st_errbuf_t *eb)
{
    static const char *const sql_dedup_purge =
        "DELETE FROM strand.processed_signals WHERE signal_id IN (SELECT signal_id"
        " FROM strand.processed_signals WHERE processed_at < now() - make_interval(secs => $1)"
        " LIMIT 10000)";
    char secs[16];
    snprintf(secs, sizeof secs, "%d", retention_s);
    const char *params[] = {secs};
    return st_pg_exec(conn, sql_dedup_purge, 1, params, NULL, eb);
}
