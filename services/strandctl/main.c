/*
 * strandctl: the command-line client of the Strand API.
 *
 *   strandctl [--api URL] [--json] <command> ...
 *
 * Human-readable output by default, the API's JSON with --json. The API address comes
 * from --api or STRAND_API_URL (default http://127.0.0.1:8080); a bearer token, if
 * needed, from STRAND_API_TOKEN. Exit status: 0 success, 1 the API refused or failed,
 * 2 usage error, 3 the API could not be reached.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strand/curl_body.h"

typedef struct {
    const char *api;
    int json_output;
} ctl_t;

/* Performs one request; returns the HTTP status (or -1 if unreachable) and the raw
 * body in *raw (caller frees; NULL when empty). */
static long request_raw(const ctl_t *ctl, const char *method, const char *path,
                        const char *body, char **raw)
{
    CURL *curl = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof url, "%s%s", ctl->api, path);
    st_curl_body_t buf = {0};
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    const char *token = getenv("STRAND_API_TOKEN");
    if (token != NULL) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        headers = curl_slist_append(headers, auth);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, st_curl_body_collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
    if (body != NULL)
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
    CURLcode rc = curl_easy_perform(curl);
    long status = -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    else
        fprintf(stderr, "strandctl: could not reach %s: %s\n", url, curl_easy_strerror(rc));
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    *raw = buf.data;
    return status;
}

/* Performs one request; returns the HTTP status (or -1 if unreachable) and the
 * parsed body in *out (caller decrefs; may be NULL for a non-JSON body). */
static long request(const ctl_t *ctl, const char *method, const char *path, const char *body,
                    json_t **out)
{
    char *raw = NULL;
    long status = request_raw(ctl, method, path, body, &raw);
    json_error_t jerr;
    *out = raw ? json_loads(raw, JSON_DECODE_ANY, &jerr) : NULL;
    free(raw);
    return status;
}

static void print_problem(const json_t *body, long status);

/* GETs a non-JSON document (SVG, metrics) and writes it to stdout as it is. */
static int run_raw(const ctl_t *ctl, const char *path)
{
    char *raw = NULL;
    long status = request_raw(ctl, "GET", path, NULL, &raw);
    int rc = status < 0 ? 3 : (status >= 200 && status < 300) ? 0 : 1;
    if (rc == 0 && raw != NULL) {
        fputs(raw, stdout);
    } else if (rc == 1) {
        json_error_t jerr;
        json_t *problem = raw ? json_loads(raw, 0, &jerr) : NULL;
        if (ctl->json_output && raw != NULL)
            puts(raw);
        else
            print_problem(problem, status);
        json_decref(problem);
    }
    free(raw);
    return rc;
}

static void print_problem(const json_t *body, long status)
{
    const char *message = json_string_value(json_object_get(body, "message"));
    const char *code = json_string_value(json_object_get(body, "code"));
    const char *field = json_string_value(json_object_get(body, "field"));
    fprintf(stderr, "error %ld %s: %s%s%s\n", status, code ? code : "", message ? message : "",
            field && *field ? " at " : "", field && *field ? field : "");
    json_t *problems = json_object_get(body, "problems");
    size_t i;
    json_t *p;
    json_array_foreach(problems, i, p)
        fprintf(stderr, "  %s: %s\n", json_string_value(json_object_get(p, "pointer")),
                json_string_value(json_object_get(p, "message")));
}

/* Prints a flat object as "key: value" lines (nested values as compact JSON). */
static void print_object(const json_t *obj)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value) {
        if (json_is_string(value)) {
            printf("%-14s %s\n", key, json_string_value(value));
        } else {
            char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY);
            printf("%-14s %s\n", key, text ? text : "?");
            free(text);
        }
    }
}

static void print_instance_row(const json_t *item)
{
    const json_t *def = json_object_get(item, "definition");
    printf("%-36s  %-10s  %s v%lld  %s\n", json_string_value(json_object_get(item, "id")),
           json_string_value(json_object_get(item, "status")),
           json_string_value(json_object_get(def, "name")),
           (long long)json_integer_value(json_object_get(def, "version")),
           json_string_value(json_object_get(item, "created_at")));
}

/* Runs a request and prints the answer; returns the exit status. */
static int run(const ctl_t *ctl, const char *method, const char *path, const char *body,
               void (*human)(const json_t *))
{
    json_t *answer = NULL;
    long status = request(ctl, method, path, body, &answer);
    int rc = status < 0 ? 3 : (status >= 200 && status < 300) ? 0 : 1;
    if (rc == 1 && !ctl->json_output)
        print_problem(answer, status);
    else if (ctl->json_output && answer != NULL) {
        char *text = json_dumps(answer, JSON_INDENT(2) | JSON_ENCODE_ANY);
        puts(text);
        free(text);
    } else if (rc == 0 && answer != NULL)
        human(answer);
    json_decref(answer);
    return rc;
}

static void human_list(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        if (json_object_get(item, "id") != NULL)
            print_instance_row(item);
        else
            printf("%-30s v%-4lld %s\n", json_string_value(json_object_get(item, "name")),
                   (long long)json_integer_value(json_object_get(item, "version")),
                   json_string_value(json_object_get(item, "kind")));
    }
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

static char *read_file(const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return NULL;
    }
    st_curl_body_t buf = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        st_curl_body_collect(chunk, 1, n, &buf);
    if (f != stdin)
        fclose(f);
    return buf.data ? buf.data : strdup("");
}

static void usage(void)
{
    fputs("usage: strandctl [--api URL] [--json] <command>\n"
          "  definitions import FILE|-       import a definition (flow, lifecycle, process)\n"
          "  definitions validate FILE|-     validate without importing\n"
          "  definitions list [--kind flow|lifecycle|process] [--limit N] [--cursor C]\n"
          "  definitions get NAME [VERSION]\n"
          "  definitions diagram NAME VERSION [--instance ID]   SVG on stdout\n"
          "  definitions schema              the JSON Schema of definition documents\n"
          "  definitions pause NAME VERSION [--reason TEXT]   keep every wake-up of its instances\n"
          "  definitions resume NAME VERSION                  apply what they kept, in order\n"
          "  instances start DEFINITION [--version N] [--input JSON] [--business-ref R]\n"
          "                  [--request-id ID]\n"
          "  instances get ID\n"
          "  instances list [--definition D] [--status S] [--business-ref R] [--limit N]\n"
          "                 [--created-after T] [--created-before T] [--cursor C]\n"
          "  instances history ID [--after ENTRY] [--limit N]\n"
          "  instances runtime ID            why it waits: snapshot, tasks, calls, ACKs\n"
          "  instances wait ID [--timeout SECONDS]   wait until the instance ends\n"
          "  instances signal ID NAME [--payload JSON] [--request-id ID]\n"
          "  instances rpc ID NAME [--input JSON] [--request-id ID]   a process's RPC\n"
          "  instances notices ID [--code C] [--since T] [--limit N] [--cursor C]\n"
          "  instances task-events ID [--limit N] [--cursor C]\n"
          "  instances stuck [--reason R] [--limit N] [--cursor C]   nothing can wake them\n"
          "  instances cancel ID [--reason TEXT]\n"
          "  instances terminate ID [--reason TEXT]   (admin)\n"
          "  instances retry ID --expected-version N [--step S] [--reason TEXT]\n"
          "  instances fail ID --expected-version N --code C [--message M] [--reason TEXT]\n"
          "  instances patch-variables ID --expected-version N --patch JSON [--reason TEXT]\n"
          "  instances fire-timer ID --expected-version N [--reason TEXT]\n"
          "  instances skip-wait ID --expected-version N [--payload JSON] [--reason TEXT]\n"
          "                                  repair verbs: N is state_version from 'instances get'\n"
          "  instances pause ID --expected-version N [--reason TEXT]\n"
          "  instances resume ID --expected-version N [--reason TEXT]\n"
          "  instances rewind ID --expected-version N --to-version M [--reason TEXT]\n"
          "                  (N: state_version in instances get; M: from instances history)\n"
          "  signals send NAME --business-ref R [--definition D] [--payload JSON]\n"
          "  tasks list [--role R] [--assignee A] [--status S] [--instance-id ID] [--limit N]\n"
          "             [--cursor C]\n"
          "  tasks get ID\n"
          "  tasks assign ID [--assignee A]\n"
          "  tasks release ID\n"
          "  tasks complete ID [--result JSON]\n"
          "  tasks events ID [--limit N] [--cursor C]\n"
          "  acks send ACK_GUID CONSUMER delivered|processed [--outcome ok|failed]\n"
          "            [--message M] [--error E] [--retry-at-ms MS] [--result JSON]\n"
          "  dead-letters list [--status open|replayed|discarded] [--limit N] [--cursor C]\n"
          "  dead-letters get ID\n"
          "  dead-letters replay ID          (admin)\n"
          "  dead-letters discard ID         (admin)\n"
          "  dead-letters edit ID --payload JSON   a dead-lettered signal's new payload\n"
          "  notices list [--instance-id ID] [--code C] [--since T] [--limit N] [--cursor C]\n"
          "  audit list [--instance-id ID] [--actor A] [--action A] [--outcome O] [--since T]\n"
          "             [--limit N] [--cursor C]\n"
          "  triggers send DEFINITION EXTERNAL_REF EVENT --request-id ID [--actor A]\n"
          "                [--payload JSON] [--version N]   (lifecycles)\n"
          "  retention run (--older-than-days N | --older-than-s N) [--limit N] [--dry-run true]\n"
          "                                  (admin)\n"
          "  batch create ACTION [--definition D] [--version N] [--status S] [--business-ref R]\n"
          "               [--created-after T] [--created-before T] [--waiting-kind K]\n"
          "               [--reason TEXT] [--name SIGNAL] [--payload JSON]\n"
          "                                  ACTION: cancel terminate signal retry pause resume\n"
          "  batch list [--status running|completed|failed|cancelled] [--limit N] [--cursor C]\n"
          "  batch get ID                    progress and the first failures\n"
          "  batch cancel ID\n"
          "  health                          the API's readiness\n"
          "  metrics                         the API's Prometheus metrics\n"
          "  openapi                         the API's OpenAPI document\n"
          "Environment: STRAND_API_URL (default http://127.0.0.1:8080), STRAND_API_TOKEN.\n",
          stderr);
}

/* Parsed command line of one subcommand: positional words and --key value options. */
typedef struct {
    int npos;
    const char *pos[8];
    json_t *opts;   /* {"key": "value"} */
} args_t;

/* Splits argv into positionals and --key value pairs; returns 0 on a dangling option. */
static int parse_args(int argc, char **argv, args_t *a)
{
    a->npos = 0;
    a->opts = json_object();
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "strandctl: %s needs a value\n", argv[i]);
                return 0;
            }
            json_object_set_new(a->opts, argv[i] + 2, json_string(argv[i + 1]));
            i++;
        } else if (a->npos < 8) {
            a->pos[a->npos++] = argv[i];
        }
    }
    return 1;
}

static const char *opt(const args_t *a, const char *key)
{
    return json_string_value(json_object_get(a->opts, key));
}

/* Copies option `key` into `body` as `field`: a string, or parsed JSON when `as_json`.
 * Returns 0 (after a message) if the JSON does not parse. */
static int copy_opt(const args_t *a, const char *key, json_t *body, const char *field, int as_json)
{
    const char *value = opt(a, key);
    if (value == NULL)
        return 1;
    if (!as_json) {
        json_object_set_new(body, field, json_string(value));
        return 1;
    }
    json_error_t jerr;
    json_t *parsed = json_loads(value, JSON_DECODE_ANY, &jerr);
    if (parsed == NULL) {
        fprintf(stderr, "strandctl: --%s is not valid JSON: %s\n", key, jerr.text);
        return 0;
    }
    json_object_set_new(body, field, parsed);
    return 1;
}

/* Appends "&key=value" (URL-escaped) for every option named in `keys`. */
static void query_from_opts(const args_t *a, const char *const *keys, char *query, size_t len)
{
    CURL *curl = curl_easy_init();
    query[0] = '\0';
    for (int i = 0; keys[i] != NULL; i += 2) {
        const char *value = opt(a, keys[i]);
        if (value == NULL)
            continue;
        char *escaped = curl_easy_escape(curl, value, 0);
        size_t used = strlen(query);
        snprintf(query + used, len - used, "%s%s=%s", used ? "&" : "?", keys[i + 1], escaped);
        curl_free(escaped);
    }
    curl_easy_cleanup(curl);
}

/* POSTs `body` (stolen) to `path` and prints the answer. */
static int post(const ctl_t *ctl, const char *path, json_t *body, void (*human)(const json_t *))
{
    char *text = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    int rc = run(ctl, "POST", path, text, human);
    free(text);
    return rc;
}

/* Long-polls the instance (the API answers when it changes) until it ends. */
static int wait_instance(const ctl_t *ctl, const char *id, const char *timeout)
{
    char path[256];
    time_t deadline = time(NULL) + atoi(timeout);
    long long version = -1;
    for (;;) {
        json_t *answer = NULL;
        long left_ms = (long)(deadline - time(NULL)) * 1000;
        if (version < 0 || left_ms <= 0)
            snprintf(path, sizeof path, "/v1/instances/%s", id);
        else
            snprintf(path, sizeof path, "/v1/instances/%s?wait_ms=%ld&after_version=%lld", id,
                     left_ms < 20000 ? left_ms : 20000, version);
        long code = request(ctl, "GET", path, NULL, &answer);
        version = json_integer_value(json_object_get(answer, "state_version"));
        const char *st = json_string_value(json_object_get(answer, "status"));
        int ended = st && (strcmp(st, "completed") == 0 || strcmp(st, "failed") == 0 ||
                           strcmp(st, "cancelled") == 0 || strcmp(st, "terminated") == 0);
        if (code < 0 || code >= 300 || ended || time(NULL) >= deadline) {
            int rc = code < 0 ? 3 : code >= 300 ? 1 : ended ? 0 : 1;
            if (code >= 300)
                print_problem(answer, code);
            else if (answer && ctl->json_output) {
                char *text = json_dumps(answer, JSON_INDENT(2));
                puts(text);
                free(text);
            } else if (answer) {
                print_object(answer);
            }
            if (!ended && code >= 200 && code < 300)
                fprintf(stderr, "strandctl: instance still %s after %s s\n", st, timeout);
            json_decref(answer);
            return rc;
        }
        json_decref(answer);
    }
}

static void human_history(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        char *detail = json_dumps(json_object_get(item, "detail"), JSON_COMPACT | JSON_ENCODE_ANY);
        printf("%-6lld  %-30s  %-16s  %s\n", (long long)json_integer_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "at")),
               json_string_value(json_object_get(item, "kind")), detail ? detail : "");
        free(detail);
    }
    const char *next = json_string_value(json_object_get(answer, "next_after"));
    if (next != NULL)
        printf("(more: --after %s)\n", next);
}

/* Prints the "next page" hint of a list answer. */
static void print_next(const json_t *answer)
{
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

static const char *str_or(const json_t *obj, const char *key, const char *absent)
{
    const char *v = json_string_value(json_object_get(obj, key));
    return v ? v : absent;
}

static void human_notices(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-27s  %-22s  %-36s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "code", ""), str_or(item, "instance_id", "-"), str_or(item, "message", ""));
    print_next(answer);
}

static void human_task_events(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-27s  %-36s  %-20s  %-10s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "task_id", ""), str_or(item, "task_name", ""), str_or(item, "kind", ""),
               str_or(item, "actor", "-"));
    print_next(answer);
}

static void human_audit(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        const char *on = str_or(item, "instance_id", NULL);
        printf("%-8lld  %-27s  %-12s  %-20s  %-9s  %s\n",
               (long long)json_integer_value(json_object_get(item, "id")), str_or(item, "at", ""),
               str_or(item, "actor", ""), str_or(item, "action", ""), str_or(item, "outcome", ""),
               on ? on : str_or(item, "target", "-"));
    }
    print_next(answer);
}

static void human_stuck(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-36s  %-24s  %-8s  %-24s v%-4lld since %s\n", str_or(item, "instance_id", ""),
               str_or(item, "reason", ""), str_or(item, "waiting_kind", "-"),
               str_or(item, "definition", ""),
               (long long)json_integer_value(json_object_get(item, "version")),
               str_or(item, "since", ""));
    print_next(answer);
}

static int cmd_instances(const ctl_t *ctl, const args_t *a)
{
    const char *sub = a->npos > 0 ? a->pos[0] : "";
    char path[1024], query[900];
    if (strcmp(sub, "start") == 0 && a->npos == 2) {
        json_t *body = json_pack("{s:s}", "definition", a->pos[1]);
        if (opt(a, "version"))
            json_object_set_new(body, "version", json_integer(atoll(opt(a, "version"))));
        if (!copy_opt(a, "input", body, "input", 1) ||
            !copy_opt(a, "business-ref", body, "business_ref", 0) ||
            !copy_opt(a, "request-id", body, "request_id", 0)) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/instances", body, print_object);
    }
    if (strcmp(sub, "get") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/instances/%s", a->pos[1]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if (strcmp(sub, "list") == 0 && a->npos == 1) {
        static const char *const keys[] = {"definition", "definition", "status", "status",
                                           "business-ref", "business_ref", "limit", "limit",
                                           "created-after", "created_after", "created-before",
                                           "created_before", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/instances%s", query);
        return run(ctl, "GET", path, NULL, human_list);
    }
    if (strcmp(sub, "history") == 0 && a->npos == 2) {
        static const char *const keys[] = {"after", "after", "limit", "limit", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/instances/%s/history%s", a->pos[1], query);
        return run(ctl, "GET", path, NULL, human_history);
    }
    if (strcmp(sub, "runtime") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/instances/%s/runtime", a->pos[1]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if (strcmp(sub, "wait") == 0 && a->npos == 2)
        return wait_instance(ctl, a->pos[1], opt(a, "timeout") ? opt(a, "timeout") : "60");
    if (strcmp(sub, "signal") == 0 && a->npos == 3) {
        json_t *body = json_pack("{s:s}", "name", a->pos[2]);
        if (!copy_opt(a, "payload", body, "payload", 1) ||
            !copy_opt(a, "request-id", body, "request_id", 0)) {
            json_decref(body);
            return 2;
        }
        snprintf(path, sizeof path, "/v1/instances/%s/signals", a->pos[1]);
        return post(ctl, path, body, print_object);
    }
    if (strcmp(sub, "rpc") == 0 && a->npos == 3) {
        json_t *body = json_object();
        if (!copy_opt(a, "input", body, "input", 1) ||
            !copy_opt(a, "request-id", body, "request_id", 0)) {
            json_decref(body);
            return 2;
        }
        snprintf(path, sizeof path, "/v1/instances/%s/rpc/%s", a->pos[1], a->pos[2]);
        return post(ctl, path, body, print_object);
    }
    /* ---- pause ---- the operator verbs (docs/api.md "Pause, resume and rewind") */
    if ((strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0 || strcmp(sub, "rewind") == 0) &&
        a->npos == 2) {
        int rewind = strcmp(sub, "rewind") == 0;
        if (opt(a, "expected-version") == NULL || (rewind && opt(a, "to-version") == NULL)) {
            fprintf(stderr, "strandctl: instances %s needs --expected-version N%s (the state_version "
                    "of instances get)\n", sub, rewind ? " and --to-version M" : "");
            return 2;
        }
        json_t *body = json_object();
        if (!copy_opt(a, "expected-version", body, "expected_version", 1) ||
            !copy_opt(a, "to-version", body, "to_version", 1)) {
            json_decref(body);
            return 2;
        }
        copy_opt(a, "reason", body, "reason", 0);
        snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[1], sub);
        return post(ctl, path, body, print_object);
    }
    if (strcmp(sub, "notices") == 0 && a->npos == 2) {
        static const char *const keys[] = {"code", "code", "since", "since", "limit", "limit",
                                           "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/instances/%s/notices%s", a->pos[1], query);
        return run(ctl, "GET", path, NULL, human_notices);
    }
    if (strcmp(sub, "task-events") == 0 && a->npos == 2) {
        static const char *const keys[] = {"limit", "limit", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/instances/%s/task-events%s", a->pos[1], query);
        return run(ctl, "GET", path, NULL, human_task_events);
    }
    if (strcmp(sub, "stuck") == 0 && a->npos == 1) {
        static const char *const keys[] = {"reason", "reason", "limit", "limit", "cursor",
                                           "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/instances/stuck%s", query);
        return run(ctl, "GET", path, NULL, human_stuck);
    }
    if ((strcmp(sub, "cancel") == 0 || strcmp(sub, "terminate") == 0) && a->npos == 2) {
        json_t *body = json_object();
        copy_opt(a, "reason", body, "reason", 0);
        snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[1], sub);
        return post(ctl, path, body, print_object);
    }
    /* repair verbs (docs/api.md, "Repairing an instance") */
    static const char *const verbs[][2] = {{"retry", "retry"}, {"fail", "fail"},
                                           {"patch-variables", "variables"},
                                           {"fire-timer", "fire-timer"}, {"skip-wait", "skip-wait"}};
    for (size_t v = 0; v < sizeof verbs / sizeof verbs[0] && a->npos == 2; v++) {
        if (strcmp(sub, verbs[v][0]) != 0)
            continue;
        const char *ev = opt(a, "expected-version");
        if (ev == NULL || strspn(ev, "0123456789") != strlen(ev) || *ev == '\0') {
            fprintf(stderr, "strandctl: %s needs --expected-version N (the state_version that "
                            "'instances get' shows)\n", sub);
            return 2;
        }
        json_t *body = json_pack("{s:I}", "expected_version", (json_int_t)atoll(ev));
        copy_opt(a, "reason", body, "reason", 0);
        copy_opt(a, "step", body, "step", 0);
        if (opt(a, "code"))
            json_object_set_new(body, "error", json_pack("{s:s}", "code", opt(a, "code")));
        if (opt(a, "message") && json_object_get(body, "error"))
            json_object_set_new(json_object_get(body, "error"), "message", json_string(opt(a, "message")));
        if (!copy_opt(a, "patch", body, "patch", 1) || !copy_opt(a, "payload", body, "payload", 1)) {
            json_decref(body);
            return 2;
        }
        snprintf(path, sizeof path, "/v1/instances/%s/%s", a->pos[1], verbs[v][1]);
        return post(ctl, path, body, print_object);
    }
    usage();
    return 2;
}

static int cmd_signals(const ctl_t *ctl, const args_t *a)
{
    if (a->npos == 2 && strcmp(a->pos[0], "send") == 0 && opt(a, "business-ref")) {
        json_t *body = json_pack("{s:s, s:s}", "name", a->pos[1], "business_ref",
                                 opt(a, "business-ref"));
        if (!copy_opt(a, "definition", body, "definition", 0) ||
            !copy_opt(a, "payload", body, "payload", 1)) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/signals", body, print_object);
    }
    usage();
    return 2;
}

static void human_tasks(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item) {
        const char *assignee = json_string_value(json_object_get(item, "assignee"));
        printf("%-36s  %-9s  %-24s  %s\n", json_string_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "name")), assignee ? assignee : "-");
    }
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

static int cmd_tasks(const ctl_t *ctl, const args_t *a)
{
    const char *sub = a->npos > 0 ? a->pos[0] : "";
    char path[1024], query[900];
    if (strcmp(sub, "list") == 0 && a->npos == 1) {
        static const char *const keys[] = {"role", "role", "assignee", "assignee", "status",
                                           "status", "instance-id", "instance_id", "limit",
                                           "limit", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/tasks%s", query);
        return run(ctl, "GET", path, NULL, human_tasks);
    }
    if (strcmp(sub, "get") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/tasks/%s", a->pos[1]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if (strcmp(sub, "events") == 0 && a->npos == 2) {
        static const char *const keys[] = {"limit", "limit", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/tasks/%s/events%s", a->pos[1], query);
        return run(ctl, "GET", path, NULL, human_task_events);
    }
    if ((strcmp(sub, "assign") == 0 || strcmp(sub, "release") == 0 ||
         strcmp(sub, "complete") == 0) && a->npos == 2) {
        json_t *body = json_object();
        if (!copy_opt(a, "assignee", body, "assignee", 0) ||
            !copy_opt(a, "result", body, "result", 1)) {
            json_decref(body);
            return 2;
        }
        snprintf(path, sizeof path, "/v1/tasks/%s/%s", a->pos[1], sub);
        return post(ctl, path, body, print_object);
    }
    usage();
    return 2;
}

static int cmd_acks(const ctl_t *ctl, const args_t *a)
{
    if (a->npos == 4 && strcmp(a->pos[0], "send") == 0) {
        json_t *body = json_pack("{s:s, s:s, s:s}", "ack_guid", a->pos[1], "consumer", a->pos[2],
                                 "stage", a->pos[3]);
        if (opt(a, "retry-at-ms"))
            json_object_set_new(body, "retry_at_ms", json_integer(atoll(opt(a, "retry-at-ms"))));
        if (!copy_opt(a, "outcome", body, "outcome", 0) ||
            !copy_opt(a, "message", body, "message", 0) ||
            !copy_opt(a, "error", body, "error", 0) || !copy_opt(a, "result", body, "result", 1)) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/acks", body, print_object);
    }
    usage();
    return 2;
}

static void human_dead_letters(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-8lld  %-9s  %-24s  %s\n", (long long)json_integer_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "source_topic")),
               json_string_value(json_object_get(item, "reason")));
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

static int cmd_dead_letters(const ctl_t *ctl, const args_t *a)
{
    const char *sub = a->npos > 0 ? a->pos[0] : "";
    char path[1024], query[900];
    if (strcmp(sub, "list") == 0 && a->npos == 1) {
        static const char *const keys[] = {"status", "status", "limit", "limit", "cursor",
                                           "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/dead-letters%s", query);
        return run(ctl, "GET", path, NULL, human_dead_letters);
    }
    if (strcmp(sub, "get") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/dead-letters/%s", a->pos[1]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if ((strcmp(sub, "replay") == 0 || strcmp(sub, "discard") == 0) && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/dead-letters/%s/%s", a->pos[1], sub);
        return post(ctl, path, json_object(), print_object);
    }
    if (strcmp(sub, "edit") == 0 && a->npos == 2 && opt(a, "payload")) {
        json_t *body = json_object();
        if (!copy_opt(a, "payload", body, "payload", 1)) {
            json_decref(body);
            return 2;
        }
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        snprintf(path, sizeof path, "/v1/dead-letters/%s/payload", a->pos[1]);
        int rc = run(ctl, "PUT", path, text, print_object);
        free(text);
        return rc;
    }
    usage();
    return 2;
}

/* notices list, audit list: the global read-back lists. */
static int cmd_reads(const ctl_t *ctl, const char *group, const args_t *a)
{
    char path[1024], query[900];
    if (a->npos != 1 || strcmp(a->pos[0], "list") != 0) {
        usage();
        return 2;
    }
    if (strcmp(group, "notices") == 0) {
        static const char *const keys[] = {"instance-id", "instance_id", "code", "code", "since",
                                           "since", "limit", "limit", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/notices%s", query);
        return run(ctl, "GET", path, NULL, human_notices);
    }
    static const char *const keys[] = {"instance-id", "instance_id", "actor", "actor", "action",
                                       "action", "outcome", "outcome", "since", "since", "limit",
                                       "limit", "cursor", "cursor", NULL};
    query_from_opts(a, keys, query, sizeof query);
    snprintf(path, sizeof path, "/v1/audit%s", query);
    return run(ctl, "GET", path, NULL, human_audit);
}

static int cmd_definitions(const ctl_t *ctl, const args_t *a)
{
    char path[1024];
    const char *sub = a->npos > 0 ? a->pos[0] : "";
    if (a->npos == 2 && (strcmp(sub, "import") == 0 || strcmp(sub, "validate") == 0)) {
        char *body = read_file(a->pos[1]);
        if (body == NULL)
            return 2;
        int rc = run(ctl, "POST",
                     strcmp(sub, "import") == 0 ? "/v1/definitions" : "/v1/definitions/validate",
                     body, print_object);
        free(body);
        return rc;
    }
    if (a->npos == 1 && strcmp(sub, "list") == 0) {
        static const char *const keys[] = {"kind", "kind", "limit", "limit", "cursor", "cursor", NULL};
        char query[900];
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/definitions%s", query);
        return run(ctl, "GET", path, NULL, human_list);
    }
    if (a->npos == 1 && strcmp(sub, "schema") == 0)
        return run(ctl, "GET", "/v1/schema/definition", NULL, print_object);
    /* ---- pause ---- a definition version's pause and resume */
    if (a->npos == 3 && (strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0)) {
        CURL *curl = curl_easy_init();
        char *name = curl_easy_escape(curl, a->pos[1], 0);
        char *version = curl_easy_escape(curl, a->pos[2], 0);
        snprintf(path, sizeof path, "/v1/definitions/%s/%s/%s", name, version, sub);
        curl_free(name);
        curl_free(version);
        curl_easy_cleanup(curl);
        json_t *body = json_object();
        copy_opt(a, "reason", body, "reason", 0);
        return post(ctl, path, body, print_object);
    }
    if (a->npos == 3 && strcmp(sub, "diagram") == 0) {
        CURL *curl = curl_easy_init();
        char *name = curl_easy_escape(curl, a->pos[1], 0);
        char *inst = opt(a, "instance") ? curl_easy_escape(curl, opt(a, "instance"), 0) : NULL;
        snprintf(path, sizeof path, "/v1/definitions/%s/%s/diagram.svg%s%s", name, a->pos[2],
                 inst ? "?instance=" : "", inst ? inst : "");
        curl_free(name);
        curl_free(inst);
        curl_easy_cleanup(curl);
        return run_raw(ctl, path);
    }
    if ((a->npos == 2 || a->npos == 3) && strcmp(sub, "get") == 0) {
        CURL *curl = curl_easy_init();
        char *name = curl_easy_escape(curl, a->pos[1], 0);
        if (a->npos == 3)
            snprintf(path, sizeof path, "/v1/definitions/%s/%s", name, a->pos[2]);
        else
            snprintf(path, sizeof path, "/v1/definitions/%s", name);
        curl_free(name);
        curl_easy_cleanup(curl);
        return run(ctl, "GET", path, NULL, print_object);
    }
    usage();
    return 2;
}

static int cmd_triggers(const ctl_t *ctl, const args_t *a)
{
    if (a->npos == 4 && strcmp(a->pos[0], "send") == 0 && opt(a, "request-id")) {
        json_t *body = json_pack("{s:s, s:s, s:s, s:s}", "definition", a->pos[1], "external_ref",
                                 a->pos[2], "event", a->pos[3], "request_id", opt(a, "request-id"));
        if (opt(a, "version"))
            json_object_set_new(body, "version", json_integer(atoll(opt(a, "version"))));
        if (!copy_opt(a, "actor", body, "actor", 0) || !copy_opt(a, "payload", body, "payload", 1)) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/triggers", body, print_object);
    }
    usage();
    return 2;
}

/* An integer option as a JSON integer; returns 0 (after a message) if it is not one. */
static int int_opt(const args_t *a, const char *key, json_t *body, const char *field)
{
    const char *value = opt(a, key);
    if (value == NULL)
        return 1;
    char *end = NULL;
    long long v = strtoll(value, &end, 10);
    if (*value == '\0' || *end != '\0') {
        fprintf(stderr, "strandctl: --%s must be an integer\n", key);
        return 0;
    }
    json_object_set_new(body, field, json_integer(v));
    return 1;
}

static int cmd_retention(const ctl_t *ctl, const args_t *a)
{
    if (a->npos == 1 && strcmp(a->pos[0], "run") == 0) {
        json_t *body = json_object();
        if (!int_opt(a, "older-than-days", body, "older_than_days") ||
            !int_opt(a, "older-than-s", body, "older_than_s") || !int_opt(a, "limit", body, "limit") ||
            !copy_opt(a, "dry-run", body, "dry_run", 1)) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/retention/run", body, print_object);
    }
    usage();
    return 2;
}

static void human_batches(const json_t *answer)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(answer, "items"), i, item)
        printf("%-36s  %-9s  %-9s  %lld/%lld done, %lld failed  %s\n",
               json_string_value(json_object_get(item, "id")),
               json_string_value(json_object_get(item, "status")),
               json_string_value(json_object_get(item, "action")),
               (long long)json_integer_value(json_object_get(item, "done")),
               (long long)json_integer_value(json_object_get(item, "total")),
               (long long)json_integer_value(json_object_get(item, "failed")),
               json_string_value(json_object_get(item, "created_at")));
    const char *next = json_string_value(json_object_get(answer, "next_cursor"));
    if (next != NULL)
        printf("(more: --cursor %s)\n", next);
}

static int cmd_batch(const ctl_t *ctl, const args_t *a)
{
    const char *sub = a->npos > 0 ? a->pos[0] : "";
    char path[1024], query[900];
    if (strcmp(sub, "create") == 0 && a->npos == 2) {
        json_t *filter = json_object(), *args = json_object();
        int ok = copy_opt(a, "definition", filter, "definition", 0) &&
                 int_opt(a, "version", filter, "version") &&
                 copy_opt(a, "status", filter, "status", 0) &&
                 copy_opt(a, "business-ref", filter, "business_ref", 0) &&
                 copy_opt(a, "created-after", filter, "created_after", 0) &&
                 copy_opt(a, "created-before", filter, "created_before", 0) &&
                 copy_opt(a, "waiting-kind", filter, "waiting_kind", 0) &&
                 copy_opt(a, "reason", args, "reason", 0) && copy_opt(a, "name", args, "name", 0) &&
                 copy_opt(a, "payload", args, "payload", 1);
        json_t *body = json_pack("{s:o, s:s, s:o}", "filter", filter, "action", a->pos[1], "args", args);
        if (!ok) {
            json_decref(body);
            return 2;
        }
        return post(ctl, "/v1/batches", body, print_object);
    }
    if (strcmp(sub, "list") == 0 && a->npos == 1) {
        static const char *const keys[] = {"status", "status", "limit", "limit", "cursor", "cursor", NULL};
        query_from_opts(a, keys, query, sizeof query);
        snprintf(path, sizeof path, "/v1/batches%s", query);
        return run(ctl, "GET", path, NULL, human_batches);
    }
    if (strcmp(sub, "get") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/batches/%s", a->pos[1]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if (strcmp(sub, "cancel") == 0 && a->npos == 2) {
        snprintf(path, sizeof path, "/v1/batches/%s/cancel", a->pos[1]);
        return post(ctl, path, json_object(), print_object);
    }
    usage();
    return 2;
}

int main(int argc, char **argv)
{
    ctl_t ctl = {getenv("STRAND_API_URL") ? getenv("STRAND_API_URL") : "http://127.0.0.1:8080", 0};
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--json") == 0)
            ctl.json_output = 1;
        else if (strcmp(argv[i], "--api") == 0 && i + 1 < argc)
            ctl.api = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage();
            return 0;
        } else {
            usage();
            return 2;
        }
    }
    if (i >= argc) {
        usage();
        return 2;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    args_t a;
    int rc = 2;
    const char *group = argv[i];
    if (!parse_args(argc - i - 1, argv + i + 1, &a))
        rc = 2;
    else if (strcmp(group, "definitions") == 0)
        rc = cmd_definitions(&ctl, &a);
    else if (strcmp(group, "instances") == 0)
        rc = cmd_instances(&ctl, &a);
    else if (strcmp(group, "signals") == 0)
        rc = cmd_signals(&ctl, &a);
    else if (strcmp(group, "tasks") == 0)
        rc = cmd_tasks(&ctl, &a);
    else if (strcmp(group, "acks") == 0)
        rc = cmd_acks(&ctl, &a);
    else if (strcmp(group, "dead-letters") == 0)
        rc = cmd_dead_letters(&ctl, &a);
    else if (strcmp(group, "notices") == 0 || strcmp(group, "audit") == 0)
        rc = cmd_reads(&ctl, group, &a);
    else if (strcmp(group, "triggers") == 0)
        rc = cmd_triggers(&ctl, &a);
    else if (strcmp(group, "retention") == 0)
        rc = cmd_retention(&ctl, &a);
    else if (strcmp(group, "batch") == 0)
        rc = cmd_batch(&ctl, &a);
    else if (strcmp(group, "health") == 0)
        rc = run(&ctl, "GET", "/readyz", NULL, print_object);
    else if (strcmp(group, "metrics") == 0)
        rc = run_raw(&ctl, "/metrics");
    else if (strcmp(group, "openapi") == 0)
        rc = run(&ctl, "GET", "/v1/openapi.json", NULL, print_object);
    else
        usage();
    json_decref(a.opts);
    curl_global_cleanup();
    return rc;
}
