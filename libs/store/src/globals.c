/* globals.c - global attributes in the user's table (see globals.h). */
#define _GNU_SOURCE
#include "strand/globals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strand/pg.h"

/* The quoted "schema"."table" (or "table") of the declaration. Caller frees. */
static char *quoted_table(PGconn *conn, const char *table)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", table ? table : "");
    char *dot = strchr(buf, '.');
    char *schema = NULL, *name;
    if (dot != NULL) {
        *dot = '\0';
        schema = PQescapeIdentifier(conn, buf, strlen(buf));
        name = PQescapeIdentifier(conn, dot + 1, strlen(dot + 1));
    } else {
        name = PQescapeIdentifier(conn, buf, strlen(buf));
    }
    char *out = NULL;
    if (name != NULL && (dot == NULL || schema != NULL)) {
        size_t len = strlen(name) + (schema ? strlen(schema) + 1 : 0) + 1;
        out = malloc(len);
        if (out != NULL)
            snprintf(out, len, "%s%s%s", schema ? schema : "", schema ? "." : "", name);
    }
    PQfreemem(schema);
    PQfreemem(name);
    return out;
}

static char *quoted(PGconn *conn, const char *ident)
{
    char *q = PQescapeIdentifier(conn, ident, strlen(ident));
    char *out = q ? strdup(q) : NULL;
    PQfreemem(q);
    return out;
}

st_err_t st_globals_load_tx(PGconn *conn, const json_t *decl, const char *key, json_t **out,
                            st_errbuf_t *eb)
{
    *out = NULL;
    const char *table = json_string_value(json_object_get(decl, "table"));
    const char *key_col = json_string_value(json_object_get(decl, "key"));
    if (table == NULL || key_col == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "global attributes lack a table or key column");
    char *qt = quoted_table(conn, table), *qk = quoted(conn, key_col);
    char *sql = NULL;
    st_err_t err = ST_OK;
    if (qt == NULL || qk == NULL ||
        asprintf(&sql, "SELECT to_jsonb(t)::text FROM %s t WHERE t.%s = $1 FOR UPDATE", qt, qk) < 0) {
        sql = NULL;
        err = st_err_set(eb, ST_ERR_NOMEM, "could not build the global attribute query");
    }
    PGresult *res = NULL;
    if (err == ST_OK) {
        const char *params[] = {key};
        err = st_pg_exec(conn, sql, 1, params, &res, eb);
        if (err != ST_OK) {
            char why[sizeof eb->msg];
            snprintf(why, sizeof why, "%s", eb->msg);
            st_err_set(eb, err, "reading global attributes from %s failed: %s", table, why);
        }
    }
    if (err == ST_OK) {
        json_error_t jerr;
        json_t *row = PQntuples(res) > 0 ? json_loads(PQgetvalue(res, 0, 0), 0, &jerr) : NULL;
        json_t *values = json_object();
        const char *attr;
        json_t *column;
        json_object_foreach(json_object_get(decl, "columns"), attr, column) {
            json_t *v = json_object_get(row, json_string_value(column));
            json_object_set_new(values, attr, v ? json_incref(v) : json_null());
        }
        json_decref(row);
        *out = values;
    }
    PQclear(res);
    free(sql);
    free(qt);
    free(qk);
    return err;
}

st_err_t st_globals_store_tx(PGconn *conn, const json_t *decl, const char *key,
                             const json_t *before, const json_t *state, st_errbuf_t *eb)
{
    const char *table = json_string_value(json_object_get(decl, "table"));
    const char *key_col = json_string_value(json_object_get(decl, "key"));
    json_t *changed = json_object();   /* {column: value} */
    const char *attr;
    json_t *column;
    json_object_foreach(json_object_get(decl, "columns"), attr, column) {
        const json_t *now = json_object_get(state, attr);
        const json_t *was = json_object_get(before, attr);
        if (now == NULL)
            now = json_null();
        if (was == NULL || !json_equal(now, was))
            json_object_set(changed, json_string_value(column), (json_t *)now);
    }
    if (json_object_size(changed) == 0) {
        json_decref(changed);
        return ST_OK;
    }
    /* jsonb_populate_record turns each JSON value into the column's own type (a JSON
     * string into text, any JSON into jsonb, a number into an integer column). */
    char *qt = quoted_table(conn, table), *qk = quoted(conn, key_col);
    size_t cap = 256 + json_object_size(changed) * 300;
    char *cols = calloc(1, cap), *vals = calloc(1, cap);
    st_err_t err = ST_OK;
    if (qt == NULL || qk == NULL || cols == NULL || vals == NULL)
        err = st_err_set(eb, ST_ERR_NOMEM, "could not build the global attribute write");
    json_object_foreach(changed, attr, column) {
        if (err != ST_OK)
            break;
        char *qc = quoted(conn, attr);
        if (qc == NULL) {
            err = st_err_set(eb, ST_ERR_NOMEM, "could not quote a column");
            break;
        }
        size_t n = strlen(cols);
        snprintf(cols + n, cap - n, "%s%s", n ? ", " : "", qc);
        n = strlen(vals);
        snprintf(vals + n, cap - n, "%sr.%s", n ? ", " : "", qc);
        free(qc);
    }
    char *update = NULL, *insert = NULL;
    if (err == ST_OK &&
        (asprintf(&update, "UPDATE %s t SET (%s) = (SELECT %s FROM jsonb_populate_record(NULL::%s,"
                  " $2::jsonb) r) WHERE t.%s = $1", qt, cols, vals, qt, qk) < 0 ||
         asprintf(&insert, "INSERT INTO %s (%s, %s) SELECT r.%s, %s FROM jsonb_populate_record("
                  "NULL::%s, $2::jsonb || jsonb_build_object($3::text, $1::text)) r",
                  qt, qk, cols, qk, vals, qt) < 0)) {
        update = insert = NULL;
        err = st_err_set(eb, ST_ERR_NOMEM, "could not build the global attribute write");
    }
    char *values = err == ST_OK ? json_dumps(changed, JSON_COMPACT) : NULL;
    PGresult *res = NULL;
    if (err == ST_OK) {
        const char *params[] = {key, values};
        err = st_pg_exec(conn, update, 2, params, &res, eb);
        if (err == ST_OK && atoi(PQcmdTuples(res)) == 0) {
            const char *iparams[] = {key, values, key_col};
            err = st_pg_exec(conn, insert, 3, iparams, NULL, eb);
        }
        if (err != ST_OK) {
            char why[sizeof eb->msg];
            snprintf(why, sizeof why, "%s", eb->msg);
            st_err_set(eb, err, "writing global attributes to %s failed: %s", table, why);
        }
    }
    PQclear(res);
    free(values);
    free(update);
    free(insert);
    free(cols);
    free(vals);
    free(qt);
    free(qk);
    json_decref(changed);
    return err;
}
