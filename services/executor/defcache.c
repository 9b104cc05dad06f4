/* defcache.c - compiled definitions by (name, version) for the executor (see defcache.h). */
#include "defcache.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

typedef struct defcache_entry {
    char name[128];
    int version;
    st_defn_t *defn;
    struct defcache_entry *next;
} defcache_entry_t;

struct st_defcache {
    defcache_entry_t *head;
};

st_defcache_t *st_defcache_new(void)
{
    return calloc(1, sizeof(st_defcache_t));
}

void st_defcache_free(st_defcache_t *cache)
{
    if (cache == NULL)
        return;
    defcache_entry_t *e = cache->head;
    while (e != NULL) {
        defcache_entry_t *next = e->next;
        st_defn_free(e->defn);
        free(e);
        e = next;
    }
    free(cache);
}

/* Returns the compiled definition, loading it inside the caller's transaction on a
 * miss. Borrowed; valid until st_defcache_free(). */
st_err_t st_defcache_get_tx(st_defcache_t *cache, PGconn *conn, const char *name, int version,
                            const st_defn_t **out, st_errbuf_t *eb)
{
    static const char *const sql_definition_canonical =
        "SELECT canonical::text FROM strand.definitions WHERE name = $1 AND version = $2";
    for (defcache_entry_t *e = cache->head; e != NULL; e = e->next) {
        if (e->version == version && strcmp(e->name, name) == 0) {
            *out = e->defn;
            return ST_OK;
        }
    }
    char version_text[16];
    snprintf(version_text, sizeof version_text, "%d", version);
    const char *params[] = {name, version_text};
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_definition_canonical, 2, params, &res, eb);
    if (err != ST_OK)
        return err;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return st_err_set(eb, ST_ERR_NOT_FOUND, "definition %s v%d is not imported", name,
                          version);
    }
    json_error_t jerr;
    json_t *doc = json_loads(PQgetvalue(res, 0, 0), 0, &jerr);
    PQclear(res);
    if (doc == NULL)
        return st_err_set(eb, ST_ERR_INTERNAL, "stored definition %s v%d is not JSON", name,
                          version);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    err = st_defn_compile(doc, &defn, &problems);
    json_decref(doc);
    if (err != ST_OK) {
        char *text = problems ? json_dumps(problems, JSON_COMPACT) : NULL;
        st_err_set(eb, ST_ERR_INTERNAL, "stored definition %s v%d does not compile: %s",
                   name, version, text ? text : "");
        free(text);
        json_decref(problems);
        return ST_ERR_INTERNAL;
    }
    defcache_entry_t *e = calloc(1, sizeof *e);
    if (e == NULL) {
        st_defn_free(defn);
        return st_err_set(eb, ST_ERR_NOMEM, "could not cache a definition");
    }
    snprintf(e->name, sizeof e->name, "%s", name);
    e->version = version;
    e->defn = defn;
    e->next = cache->head;
    cache->head = e;
    *out = defn;
    return ST_OK;
}
