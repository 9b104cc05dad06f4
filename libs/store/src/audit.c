/* audit.c - the owner of strand.audit_log (see audit.h). */
#include "strand/audit.h"

#include <stdlib.h>

#include "strand/pg.h"

static const char *const sql_audit_insert =
    "INSERT INTO strand.audit_log (actor, action, outcome, instance_id, target, before, after, detail)"
    " VALUES ($1, $2, $3, $4::uuid, $5, $6::jsonb, $7::jsonb, COALESCE($8::jsonb, '{}'))";

/* NULL for NULL, else a malloc'd compact encoding (the caller frees). */
static char *encode(const json_t *value)
{
    return value != NULL ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
}

st_err_t st_audit_add_tx(PGconn *conn, const st_audit_entry_t *entry, st_errbuf_t *eb)
{
    if (entry == NULL || entry->action == NULL || entry->action[0] == '\0' ||
        entry->outcome == NULL || entry->outcome[0] == '\0')
        return st_err_set(eb, ST_ERR_INVALID, "an audit entry needs an action and an outcome");
    const char *actor = entry->actor != NULL && entry->actor[0] != '\0' ? entry->actor : "system";
    char *before = encode(entry->before), *after = encode(entry->after),
         *detail = encode(entry->detail);
    const char *params[] = {actor, entry->action, entry->outcome, entry->instance_id,
                            entry->target, before, after, detail};
    st_err_t err = st_pg_exec(conn, sql_audit_insert, 8, params, NULL, eb);
    free(before);
    free(after);
    free(detail);
    return err;
}
