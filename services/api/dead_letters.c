/*
 * dead_letters.c - list, inspect, replay and discard dead letters.
 *
 * Replay puts the original message back on its topic through the outbox (one
 * transaction: outbox row + status 'replayed'); discard only marks it. Both refuse a
 * letter that is no longer open (409), so a replay happens at most once.
 *
 * Access (services/api/permissions.c): a dead letter holds the refused message itself,
 * so reading letters takes dead-letters:read (the built-in role operator has it);
 * replay and discard take dead-letters:operate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "permissions.h"
#include "strand/audit.h"
#include "strand/kafka.h"
#include "strand/notice.h"
#include "strand/outbox.h"
#include "strand/pg.h"
#include "strand/util.h"

static const char *const sql_dead_letter_list =
    "SELECT id, source_topic, source_partition, source_offset, instance_id, reason, attempts,"
    " node_id, status, created_at FROM strand.dead_letters"
    " WHERE ($1::text IS NULL OR status = $1) AND ($2::bigint IS NULL OR id < $2::bigint)"
    " ORDER BY id DESC LIMIT $3";
static const char *const sql_dead_letter_get =
    "SELECT id, source_topic, source_partition, source_offset, instance_id, reason, attempts,"
    " node_id, status, created_at, encode(payload, 'base64') FROM strand.dead_letters"
    " WHERE id = $1::bigint";

static json_t *row_to_json(PGresult *res, int row)
{
    json_t *item = json_pack("{s:I, s:s, s:i, s:I, s:s, s:i, s:s, s:s, s:o}", "id",
                             (json_int_t)atoll(PQgetvalue(res, row, 0)), "source_topic",
                             PQgetvalue(res, row, 1), "source_partition",
                             atoi(PQgetvalue(res, row, 2)), "source_offset",
                             (json_int_t)atoll(PQgetvalue(res, row, 3)), "reason",
                             PQgetvalue(res, row, 5), "attempts", atoi(PQgetvalue(res, row, 6)),
                             "node_id", PQgetvalue(res, row, 7), "status",
                             PQgetvalue(res, row, 8), "created_at", st_api_time_json(res, row, 9));
    json_object_set_new(item, "instance_id", PQgetisnull(res, row, 4)
                                                 ? json_null()
                                                 : json_string(PQgetvalue(res, row, 4)));
    return item;
}

/* Parses a positive integer id; answers 400 and returns 0 if it is not one. */
static int parse_id(st_http_req_t *req, const char *text)
{
    if (text == NULL || *text == '\0' || strlen(text) > 18 ||
        strspn(text, "0123456789") != strlen(text)) {
        st_http_reply_problem(req, 400, "invalid_id", "the dead letter id must be a positive integer",
                              "/id", NULL);
        return 0;
    }
    return 1;
}

static void handle_list(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *status = st_http_query(req, "status");
    const char *cursor = st_http_query(req, "cursor");
    st_answer_t answer = {0};
    int limit = st_api_page_limit(req, 50, 500, &answer);
    if (limit == 0) {
        st_api_reply(req, &answer);
        return;
    }
    if (status != NULL && strcmp(status, "open") != 0 && strcmp(status, "replayed") != 0 &&
        strcmp(status, "discarded") != 0) {
        st_http_reply_problem(req, 400, "invalid_status",
                              "status must be open, replayed or discarded", "/status", NULL);
        return;
    }
    if (cursor != NULL && !parse_id(req, cursor))
        return;
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    char limit_param[16];
    snprintf(limit_param, sizeof limit_param, "%d", limit);
    const char *params[] = {status, cursor, limit_param};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_dead_letter_list, 3, params, &res, &eb);
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    json_t *items = json_array();
    int n = PQntuples(res);
    for (int i = 0; i < n; i++)
        json_array_append_new(items, row_to_json(res, i));
    json_t *body = json_pack("{s:o}", "items", items);
    json_object_set_new(body, "next_cursor",
                        n == limit ? json_string(PQgetvalue(res, n - 1, 0)) : json_null());
    PQclear(res);
    st_http_reply_json(req, 200, body);
}

static void handle_get(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const char *id = st_http_param(req, "id");
    if (!parse_id(req, id))
        return;
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    const char *params[] = {id};
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql_dead_letter_get, 1, params, &res, &eb);
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        st_http_reply_problem(req, 404, "dead_letter_not_found", "no such dead letter", NULL,
                              NULL);
        return;
    }
    json_t *item = row_to_json(res, 0);
    /* base64 from PostgreSQL wraps lines; JSON readers want it unbroken. */
    char *payload = strdup(PQgetvalue(res, 0, 10));
    char *w = payload;
    for (const char *r = payload; *r; r++)
        if (*r != '\n')
            *w++ = *r;
    *w = '\0';
    json_object_set_new(item, "payload_base64", json_string(payload));
    free(payload);
    PQclear(res);
    st_http_reply_json(req, 200, item);
}

/* Marks an open letter `status`; for a replay also re-enqueues its message. */
static void settle(st_api_t *api, st_http_req_t *req, const char *status)
{
    const char *id = st_http_param(req, "id");
    if (!parse_id(req, id))
        return;
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    st_errbuf_t eb;
    st_dead_letter_t letter = {0};
    int found = 0;
    st_err_t err = st_pg_begin(conn, &eb);
    if (err == ST_OK)
        err = st_dead_letter_settle_tx(conn, id, status, &found, &letter, &eb);
    if (err == ST_OK && !found) {
        st_pg_rollback(conn);
        st_http_reply_problem(req, 409, "dead_letter_not_open",
                              "no open dead letter with this id (already replayed or "
                              "discarded, or never existed)", NULL, NULL);
        return;
    }
    if (err == ST_OK && strcmp(status, "replayed") == 0) {
        /* The stored topic is the full name; the outbox wants the suffix. */
        const char *topic = letter.topic;
        size_t prefix_len = strlen(api->svc->cfg.topic_prefix);
        if (strncmp(topic, api->svc->cfg.topic_prefix, prefix_len) == 0)
            topic += prefix_len;
        if (strcmp(topic, ST_TOPIC_INGRESS) == 0 && st_auth_enabled(api->auth)) {
            /* An ingress letter keeps the command without its bearer token: replayed, it
             * would only be refused (401) into a new letter. Say so instead. */
            st_pg_rollback(conn);
            free(letter.payload);
            st_http_reply_problem(req, 409, "replay_needs_token",
                                  "an ingress command is kept without its bearer token, so "
                                  "with authentication on it cannot be replayed: send the "
                                  "command again with a token, then discard this letter",
                                  NULL, NULL);
            return;
        }
        err = st_outbox_add_tx(conn, topic, letter.key[0] ? letter.key : NULL, letter.payload,
                               letter.len, &eb);
    }
    if (err == ST_OK) {
        /* the operator's action in the audit log, in the same transaction */
        char target[64];
        snprintf(target, sizeof target, "dead_letter:%s", id);
        json_t *before = json_pack("{s:s}", "status", "open");
        json_t *after = json_pack("{s:s}", "status", status);
        json_t *detail = json_pack("{s:s}", "source_topic", letter.topic);
        st_audit_entry_t entry = {api->current.name,
                                  strcmp(status, "replayed") == 0 ? "dead_letter_replay"
                                                                  : "dead_letter_discard",
                                  "applied", st_uuid_valid(letter.key) ? letter.key : NULL,
                                  target, before, after, detail};
        err = st_audit_add_tx(conn, &entry, &eb);
        json_decref(before);
        json_decref(after);
        json_decref(detail);
    }
    free(letter.payload);
    if (err == ST_OK)
        err = st_pg_commit(conn, &eb);
    if (err != ST_OK) {
        st_pg_rollback(conn);
        st_api_reply_error(req, err, &eb);
        return;
    }
    st_http_reply_json(req, 200, json_pack("{s:I, s:s}", "id", (json_int_t)atoll(id), "status",
                                           status));
}

static void handle_replay(st_http_req_t *req, void *ctx)
{
    if (st_api_require_permission(ctx, req, ST_PERM_DEAD_LETTERS_OPERATE, NULL))
        settle(ctx, req, "replayed");
}

static void handle_discard(st_http_req_t *req, void *ctx)
{
    if (st_api_require_permission(ctx, req, ST_PERM_DEAD_LETTERS_OPERATE, NULL))
        settle(ctx, req, "discarded");
}

void st_api_dead_letters_register(st_api_t *api)
{
    st_http_route(api->svc->http, "GET", "/v1/dead-letters", handle_list, api);
    st_http_route(api->svc->http, "GET", "/v1/dead-letters/{id}", handle_get, api);
    st_http_route(api->svc->http, "POST", "/v1/dead-letters/{id}/replay", handle_replay, api);
    st_http_route(api->svc->http, "POST", "/v1/dead-letters/{id}/discard", handle_discard, api);
}
