/*
 * openapi.c - serves docs/openapi.json (embedded at build time) and checks it against
 * the router: every registered route must be documented and every documented route
 * registered (`strand-api --check-openapi`, run by ctest).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "permissions.h"

extern const char st_openapi_json[];

static void handle_openapi(st_http_req_t *req, void *ctx)
{
    st_http_reply_text(req, 200, "application/json", st_openapi_json);
}

void st_api_openapi_register(st_api_t *api)
{
    st_http_route_public(api->svc->http, "GET", "/v1/openapi.json", handle_openapi, api);
}

typedef struct {
    json_t *paths;       /* borrowed from the document */
    json_t *served;      /* {"get /v1/x": true} */
    int missing;
} check_t;

static void check_route(const char *method, const char *pattern, void *ctx)
{
    check_t *c = ctx;
    char lower[8];
    size_t i = 0;
    for (; method[i] && i < sizeof lower - 1; i++)
        lower[i] = (char)tolower((unsigned char)method[i]);
    lower[i] = '\0';
    char key[200];
    snprintf(key, sizeof key, "%s %s", lower, pattern);
    json_object_set_new(c->served, key, json_true());
    if (json_object_get(json_object_get(c->paths, pattern), lower) == NULL) {
        fprintf(stderr, "served but not documented: %s %s\n", method, pattern);
        c->missing++;
    }
    if (st_perm_route_rule(method, pattern) == NULL) {
        fprintf(stderr, "served without a permission rule (permissions.c): %s %s\n", method, pattern);
        c->missing++;
    }
}

int st_api_check_openapi(st_api_t *api)
{
    json_error_t jerr;
    json_t *doc = json_loads(st_openapi_json, 0, &jerr);
    if (doc == NULL) {
        fprintf(stderr, "docs/openapi.json is not valid JSON: %s (line %d)\n", jerr.text, jerr.line);
        return 1;
    }
    check_t c = {json_object_get(doc, "paths"), json_object(), 0};
    st_http_routes_foreach(api->svc->http, check_route, &c);
    const char *path;
    json_t *item;
    int routes = 0;
    json_object_foreach(c.paths, path, item) {
        const char *method;
        json_t *op;
        json_object_foreach(item, method, op) {
            char key[200];
            snprintf(key, sizeof key, "%s %s", method, path);
            routes++;
            if (json_object_get(c.served, key) == NULL) {
                fprintf(stderr, "documented but not served: %s\n", key);
                c.missing++;
            }
        }
    }
    printf("openapi: %d documented operations, %zu served routes, %d mismatches\n", routes,
           json_object_size(c.served), c.missing);
    json_decref(c.served);
    json_decref(doc);
    return c.missing == 0 ? 0 : 1;
}
