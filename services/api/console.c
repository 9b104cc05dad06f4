/*
 * console.c - the web console (docs/console.md): its static assets at /ui/, embedded at
 * build time from web/ (cmake/embed_ui.cmake), and the few reads it needs that the
 * rest of the API does not answer: who the caller is and what it may do (whoami), the
 * on-call overview, instance counts per status for a filter, and an instance's parent
 * and children. Read-only: no table is written here.
 *
 * The console's pages are public (they are static files); every /v1 call the page
 * makes carries the user's bearer token, and the server decides as for any client.
 */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "strand/pg.h"
#include "strand/util.h"

typedef struct {
    const char *path, *type;
    const unsigned char *data;
    size_t len;
} st_ui_asset_t;

extern const st_ui_asset_t st_ui_assets[];
extern const int st_ui_assets_count;

/* The page may load its own script and style, draw inline SVG and images from the API
 * and call the API; nothing else, and no other origin, ever. */
#define UI_CSP                                                                             \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"      \
    " connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'self';"          \
    " frame-ancestors 'none'"

static const st_ui_asset_t *ui_asset(const char *path)
{
    for (int i = 0; i < st_ui_assets_count; i++)
        if (strcmp(st_ui_assets[i].path, path) == 0)
            return &st_ui_assets[i];
    return NULL;
}

/* GET /ui/ and /ui/<path>: an asset by name, else index.html for a page route (the
 * single-page app routes itself), or 404 for a missing file (a name with a dot). */
static void handle_ui(st_http_req_t *req, void *ctx)
{
    (void)ctx;
    static const char *const names[] = {"p1", "p2", "p3", "p4"};
    char path[512] = "";
    size_t used = 0;
    const char *last = "";
    for (int i = 0; i < 4; i++) {
        const char *seg = st_http_param(req, names[i]);
        if (seg == NULL)
            break;
        int n = snprintf(path + used, sizeof path - used, "%s%s", used ? "/" : "", seg);
        if (n < 0 || (size_t)n >= sizeof path - used) {
            st_http_reply_problem(req, 404, "not_found", "no such page", NULL, NULL);
            return;
        }
        used += (size_t)n;
        last = seg;
    }
    const st_ui_asset_t *asset = path[0] != '\0' ? ui_asset(path) : NULL;
    if (asset != NULL && strcmp(asset->type, "gzip") == 0)
        asset = NULL;   /* the .gz twins are sent for their originals, not by name */
    int is_index = asset == NULL || strcmp(asset->path, "index.html") == 0;
    if (asset == NULL && strchr(last, '.') != NULL) {
        st_http_reply_problem(req, 404, "not_found", "no such file in the console", NULL,
                              NULL);
        return;
    }
    if (asset == NULL)
        asset = ui_asset("index.html");
    if (asset == NULL) {   /* embed_ui.cmake refuses a bundle without it */
        st_http_reply_problem(req, 500, "internal", "the console was built without its page",
                              NULL, NULL);
        return;
    }
    st_http_add_header(req, "Content-Security-Policy", UI_CSP);
    st_http_add_header(req, "X-Content-Type-Options", "nosniff");
    st_http_add_header(req, "Referrer-Policy", "no-referrer");
    st_http_add_header(req, "X-Frame-Options", "DENY");
    /* index.html names its script and style by content hash: they never change */
    st_http_add_header(req, "Cache-Control",
                       is_index ? "no-cache" : "public, max-age=31536000, immutable");
    /* the gzipped twin, to a client that takes gzip (every browser) */
    const char *accept = st_http_header(req, "Accept-Encoding");
    char gz_path[600];
    snprintf(gz_path, sizeof gz_path, "%s.gz", asset->path);
    const char *offer = accept != NULL ? strstr(accept, "gzip") : NULL;
    const st_ui_asset_t *gz = offer != NULL && strncmp(offer, "gzip;q=0", 8) != 0
                                  ? ui_asset(gz_path) : NULL;
    st_http_add_header(req, "Vary", "Accept-Encoding");
    if (gz != NULL) {
        st_http_add_header(req, "Content-Encoding", "gzip");
        st_http_reply_bytes(req, 200, asset->type, gz->data, gz->len);
        return;
    }
    st_http_reply_bytes(req, 200, asset->type, asset->data, asset->len);
}

/* GET /v1/whoami: the caller's name, roles and permissions (any authenticated caller;
 * with authentication off, the anonymous admin). The console hides what the caller
 * may not do; the server still decides every request. */
static void handle_whoami(st_http_req_t *req, void *ctx)
{
    st_api_t *api = ctx;
    const st_principal_t *who = &api->current;
    json_t *roles = json_array(), *perms = json_array(), *limited = json_array();
    for (int i = 0; i < who->nroles; i++)
        json_array_append_new(roles, json_string(who->roles[i]));
    for (int p = 0; p < ST_PERM_COUNT; p++)
        if (st_principal_holds(who, (st_perm_t)p) == ST_HOLDS_ALL)
            json_array_append_new(perms, json_string(st_perm_name((st_perm_t)p)));
    for (int g = 0; g < who->ngrants; g++) {
        char text[256];
        const st_grant_t *grant = &who->grants[g];
        if (grant->qualifier[0] != '\0')
            snprintf(text, sizeof text, "%s:%s", st_perm_name(grant->perm), grant->qualifier);
        else
            snprintf(text, sizeof text, "%s@%s", st_perm_name(grant->perm), grant->scope);
        json_array_append_new(limited, json_string(text));
    }
    st_http_reply_json(req, 200,
                       json_pack("{s:s, s:b, s:o, s:o, s:o}", "principal", who->name,
                                 "authentication", st_auth_enabled(api->auth), "roles", roles,
                                 "permissions", perms, "limited", limited));
}

/* Runs `sql` (one row, one JSON text column) and answers with that document; no row
 * is 404 (an instance that does not exist). A parameter PostgreSQL cannot read as its
 * type (a time like 2026-02-30) is 400 invalid_time: only times are cast here. */
/* Runs `sql` (one row, one JSON text column) and answers it; `visible` (may be NULL)
 * first removes from the document what the caller may not read. */
static void reply_json_query(st_api_t *api, st_http_req_t *req, const char *sql, int nparams,
                             const char *const *params,
                             void (*visible)(const st_api_t *api, json_t *doc))
{
    PGconn *conn = st_api_conn_or_reply(api, req);
    if (conn == NULL)
        return;
    st_errbuf_t eb;
    PGresult *res = NULL;
    st_err_t err = st_pg_exec(conn, sql, nparams, params, &res, &eb);
    if (err == ST_ERR_INVALID) {
        st_http_reply_problem(req, 400, "invalid_time",
                              "created_after and created_before take ISO 8601 times", NULL, NULL);
        return;
    }
    if (err != ST_OK) {
        st_api_reply_error(req, err, &eb);
        return;
    }
    json_error_t jerr;
    json_t *doc = PQntuples(res) == 1 ? json_loads(PQgetvalue(res, 0, 0), 0, &jerr) : NULL;
    PQclear(res);
    if (doc == NULL) {
        st_http_reply_problem(req, 404, "instance_not_found", "no such instance", NULL, NULL);
        return;
    }
    if (visible != NULL)
        visible(api, doc);
    st_http_reply_json(req, 200, doc);
}

#define RFC3339(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"

/* The last 30 minutes per minute, and what an on-call operator checks first. The
 * window scans the instances created or ended in it (created_at is indexed). */
static const char *const sql_overview =
    "WITH minutes AS (SELECT generate_series(date_trunc('minute', now()) - interval '29 minutes',"
    "                   date_trunc('minute', now()), interval '1 minute') AS m),"
    " started AS (SELECT date_trunc('minute', created_at) AS m, count(*) AS n"
    "   FROM strand.instances WHERE created_at >= now() - interval '30 minutes' GROUP BY 1),"
    " ended AS (SELECT date_trunc('minute', ended_at) AS m,"
    "   count(*) FILTER (WHERE status = 'completed') AS completed,"
    "   count(*) FILTER (WHERE status = 'failed') AS failed"
    "   FROM strand.instances WHERE ended_at >= now() - interval '30 minutes' GROUP BY 1)"
    " SELECT json_build_object("
    "  'at', " RFC3339("now()") ","
    "  'per_minute', (SELECT json_agg(json_build_object('minute', " RFC3339("minutes.m") ","
    "      'started', coalesce(s.n, 0), 'completed', coalesce(e.completed, 0),"
    "      'failed', coalesce(e.failed, 0)) ORDER BY minutes.m)"
    "    FROM minutes LEFT JOIN started s ON s.m = minutes.m LEFT JOIN ended e ON e.m = minutes.m),"
    "  'waiting', (SELECT count(*) FROM strand.instances WHERE status = 'waiting'),"
    "  'outbox_backlog', (SELECT count(*) FROM strand.outbox WHERE published_at IS NULL),"
    "  'outbox_oldest_age_s', (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)"
    "      FROM strand.outbox WHERE published_at IS NULL),"
    "  'timers_overdue', (SELECT count(*) FROM strand.timers WHERE fired_at IS NULL AND due_at < now()),"
    "  'timer_lateness_max_s', (SELECT coalesce(extract(epoch FROM now() - min(due_at)), 0)"
    "      FROM strand.timers WHERE fired_at IS NULL AND due_at < now()),"
    "  'timer_lateness_recent_avg_s', (SELECT coalesce(extract(epoch FROM avg(fired_at - due_at)), 0)"
    "      FROM strand.timers WHERE fired_at >= now() - interval '10 minutes'),"
    "  'dead_letters_open', (SELECT count(*) FROM strand.dead_letters WHERE status = 'open'),"
    "  'tasks_open', (SELECT count(*) FROM strand.tasks WHERE status IN ('open', 'assigned'))"
    " )::text";

/* GET /v1/overview: the console's first page (instances:read for every definition). */
static void handle_overview(st_http_req_t *req, void *ctx)
{
    reply_json_query(ctx, req, sql_overview, 0, NULL, NULL);
}

static const char *const sql_counts =
    "SELECT json_build_object('counts', coalesce(json_object_agg(status, n), '{}'),"
    "  'total', coalesce(sum(n), 0))::text FROM ("
    " SELECT status, count(*) AS n FROM strand.instances"
    " WHERE ($1::text IS NULL OR definition_name = $1)"
    "   AND ($2::int IS NULL OR definition_version = $2::int)"
    "   AND ($3::text IS NULL OR business_ref = $3)"
    "   AND ($4::timestamptz IS NULL OR created_at >= $4::timestamptz)"
    "   AND ($5::timestamptz IS NULL OR created_at < $5::timestamptz)"
    " GROUP BY status) c";

/* True if `text` is NULL or a time PostgreSQL reads (an ISO 8601 date or time). */
static int time_ok(const char *text)
{
    if (text == NULL)
        return 1;
    size_t n = strlen(text);
    return n >= 10 && n <= 40 && strspn(text, "0123456789-:.TZ+ ") == n;
}

/* GET /v1/instance-counts?definition=&version=&business_ref=&created_after=&created_before=:
 * {counts: {status: n}, total} for the filters of GET /v1/instances. */
static void handle_counts(st_http_req_t *req, void *ctx)
{
    const char *params[] = {st_http_query(req, "definition"), st_http_query(req, "version"),
                            st_http_query(req, "business_ref"),
                            st_http_query(req, "created_after"),
                            st_http_query(req, "created_before")};
    if (params[1] != NULL &&
        (params[1][0] == '\0' || strlen(params[1]) > 9 ||
         strspn(params[1], "0123456789") != strlen(params[1]))) {
        st_http_reply_problem(req, 400, "invalid_version", "version must be a positive integer",
                              "/version", NULL);
        return;
    }
    if (!time_ok(params[3]) || !time_ok(params[4])) {
        st_http_reply_problem(req, 400, "invalid_time",
                              "created_after and created_before take ISO 8601 times", NULL, NULL);
        return;
    }
    reply_json_query(ctx, req, sql_counts, 5, params, NULL);
}

static const char *const sql_family =
    "SELECT json_build_object("
    "  'parent', (SELECT json_build_object('id', p.id, 'definition', p.definition_name,"
    "      'version', p.definition_version, 'status', p.status)"
    "    FROM strand.instances p WHERE p.id = i.parent_instance_id),"
    "  'children', (SELECT coalesce(json_agg(json_build_object('id', c.id, 'definition',"
    "      c.definition_name, 'version', c.definition_version, 'status', c.status)"
    "      ORDER BY c.created_at), '[]') FROM (SELECT * FROM strand.instances"
    "      WHERE parent_instance_id = i.id ORDER BY created_at LIMIT 200) c)"
    " )::text FROM strand.instances i WHERE i.id = $1::uuid";

/* True when the caller may read instances of `definition`. */
static int may_read_instances(const st_api_t *api, const char *definition)
{
    return definition != NULL &&
           st_principal_may(&api->current, ST_PERM_INSTANCES_READ, definition, NULL);
}

/* A scoped caller sees only the relatives it may read: the parent becomes null and
 * children of other definitions are left out, as if they did not exist. */
static void family_visible(const st_api_t *api, json_t *doc)
{
    json_t *parent = json_object_get(doc, "parent");
    if (json_is_object(parent) &&
        !may_read_instances(api, json_string_value(json_object_get(parent, "definition"))))
        json_object_set_new(doc, "parent", json_null());
    json_t *children = json_object_get(doc, "children");
    for (size_t i = json_array_size(children); i-- > 0;) {
        json_t *child = json_array_get(children, i);
        if (!may_read_instances(api, json_string_value(json_object_get(child, "definition"))))
            json_array_remove(children, i);
    }
}

/* GET /v1/instances/{id}/family: {parent, children: [first 200]} as {id, definition,
 * version, status}, without the relatives the caller may not read. */
static void handle_family(st_http_req_t *req, void *ctx)
{
    const char *id = st_http_param(req, "id");
    if (!st_uuid_valid(id)) {
        st_http_reply_problem(req, 400, "invalid_id", "the instance id must be a UUID", "/id",
                              NULL);
        return;
    }
    const char *params[] = {id};
    reply_json_query(ctx, req, sql_family, 1, params, family_visible);
}

void st_api_console_register(st_api_t *api)
{
    st_http_server_t *http = api->svc->http;
    st_http_route_public(http, "GET", "/ui", handle_ui, api);
    st_http_route_public(http, "GET", "/ui/{p1}", handle_ui, api);
    st_http_route_public(http, "GET", "/ui/{p1}/{p2}", handle_ui, api);
    st_http_route_public(http, "GET", "/ui/{p1}/{p2}/{p3}", handle_ui, api);
    st_http_route_public(http, "GET", "/ui/{p1}/{p2}/{p3}/{p4}", handle_ui, api);
    st_http_route(http, "GET", "/v1/whoami", handle_whoami, api);
    st_http_route(http, "GET", "/v1/overview", handle_overview, api);
    st_http_route(http, "GET", "/v1/instance-counts", handle_counts, api);
    st_http_route(http, "GET", "/v1/instances/{id}/family", handle_family, api);
}
