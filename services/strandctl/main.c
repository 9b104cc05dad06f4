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
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *api;
    int json_output;
} ctl_t;

typedef struct {
    char *data;
    size_t len;
} buffer_t;

static size_t collect(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    buffer_t *buf = userdata;
    size_t n = size * nmemb;
    char *grown = realloc(buf->data, buf->len + n + 1);
    if (grown == NULL)
        return 0;
    buf->data = grown;
    memcpy(buf->data + buf->len, ptr, n);
    buf->len += n;
    buf->data[buf->len] = '\0';
    return n;
}

/* Performs one request; returns the HTTP status (or -1 if unreachable) and the
 * parsed body in *out (caller decrefs; may be NULL for a non-JSON body). */
static long request(const ctl_t *ctl, const char *method, const char *path, const char *body,
                    json_t **out)
{
    CURL *curl = curl_easy_init();
    char url[2048];
    snprintf(url, sizeof url, "%s%s", ctl->api, path);
    buffer_t buf = {NULL, 0};
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
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
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
    json_error_t jerr;
    *out = buf.data ? json_loads(buf.data, JSON_DECODE_ANY, &jerr) : NULL;
    free(buf.data);
    return status;
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
    buffer_t buf = {NULL, 0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        collect(chunk, 1, n, &buf);
    if (f != stdin)
        fclose(f);
    return buf.data ? buf.data : strdup("");
}

static void usage(void)
{
    fputs("usage: strandctl [--api URL] [--json] <command>\n"
          "  definitions import FILE|-       import a definition (flow, lifecycle, process)\n"
          "  definitions validate FILE|-     validate without importing\n"
          "  definitions list\n"
          "  definitions get NAME [VERSION]\n"
          "  instances start DEFINITION [--version N] [--input JSON] [--business-ref R]\n"
          "                  [--request-id ID]\n"
          "  instances get ID\n"
          "  instances list [--definition D] [--status S] [--business-ref R] [--limit N]\n"
          "                 [--cursor C]\n"
          "  instances wait ID [--timeout SECONDS]   wait until the instance ends\n"
          "  health                          the API's readiness\n",
          stderr);
}

/* Appends "&key=value" (URL-escaped) to a query string. */
static void add_query(CURL *curl, char *query, size_t len, const char *key, const char *value)
{
    if (value == NULL)
        return;
    char *escaped = curl_easy_escape(curl, value, 0);
    size_t used = strlen(query);
    snprintf(query + used, len - used, "%s%s=%s", used ? "&" : "?", key, escaped);
    curl_free(escaped);
}

static int cmd_instances(const ctl_t *ctl, int argc, char **argv)
{
    if (argc < 1) {
        usage();
        return 2;
    }
    const char *sub = argv[0];
    const char *version = NULL, *input = NULL, *ref = NULL, *rid = NULL, *def = NULL;
    const char *status = NULL, *limit = NULL, *cursor = NULL, *timeout = "60";
    static struct option opts[] = {{"version", required_argument, 0, 'v'},
                                   {"input", required_argument, 0, 'i'},
                                   {"business-ref", required_argument, 0, 'b'},
                                   {"request-id", required_argument, 0, 'r'},
                                   {"definition", required_argument, 0, 'd'},
                                   {"status", required_argument, 0, 's'},
                                   {"limit", required_argument, 0, 'l'},
                                   {"cursor", required_argument, 0, 'c'},
                                   {"timeout", required_argument, 0, 't'},
                                   {0, 0, 0, 0}};
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'v': version = optarg; break;
        case 'i': input = optarg; break;
        case 'b': ref = optarg; break;
        case 'r': rid = optarg; break;
        case 'd': def = optarg; break;
        case 's': status = optarg; break;
        case 'l': limit = optarg; break;
        case 'c': cursor = optarg; break;
        case 't': timeout = optarg; break;
        default: usage(); return 2;
        }
    }
    char **rest = argv + optind;
    int nrest = argc - optind;
    char path[1024];
    if (strcmp(sub, "start") == 0 && nrest == 1) {
        json_t *body = json_pack("{s:s}", "definition", rest[0]);
        if (version)
            json_object_set_new(body, "version", json_integer(atoll(version)));
        if (input) {
            json_error_t jerr;
            json_t *in = json_loads(input, 0, &jerr);
            if (in == NULL) {
                fprintf(stderr, "strandctl: --input is not valid JSON: %s\n", jerr.text);
                json_decref(body);
                return 2;
            }
            json_object_set_new(body, "input", in);
        }
        if (ref)
            json_object_set_new(body, "business_ref", json_string(ref));
        if (rid)
            json_object_set_new(body, "request_id", json_string(rid));
        char *text = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        int rc = run(ctl, "POST", "/v1/instances", text, print_object);
        free(text);
        return rc;
    }
    if (strcmp(sub, "get") == 0 && nrest == 1) {
        snprintf(path, sizeof path, "/v1/instances/%s", rest[0]);
        return run(ctl, "GET", path, NULL, print_object);
    }
    if (strcmp(sub, "list") == 0 && nrest == 0) {
        char query[900] = "";
        CURL *curl = curl_easy_init();
        add_query(curl, query, sizeof query, "definition", def);
        add_query(curl, query, sizeof query, "status", status);
        add_query(curl, query, sizeof query, "business_ref", ref);
        add_query(curl, query, sizeof query, "limit", limit);
        add_query(curl, query, sizeof query, "cursor", cursor);
        curl_easy_cleanup(curl);
        snprintf(path, sizeof path, "/v1/instances%s", query);
        return run(ctl, "GET", path, NULL, human_list);
    }
    if (strcmp(sub, "wait") == 0 && nrest == 1) {
        snprintf(path, sizeof path, "/v1/instances/%s", rest[0]);
        time_t deadline = time(NULL) + atoi(timeout);
        for (;;) {
            json_t *answer = NULL;
            long code = request(ctl, "GET", path, NULL, &answer);
            const char *st = json_string_value(json_object_get(answer, "status"));
            int ended = st && (strcmp(st, "completed") == 0 || strcmp(st, "failed") == 0 ||
                               strcmp(st, "cancelled") == 0 || strcmp(st, "terminated") == 0);
            if (code < 0 || (code >= 300) || ended || time(NULL) >= deadline) {
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
            usleep(100 * 1000);
        }
    }
    usage();
    return 2;
}

static int cmd_definitions(const ctl_t *ctl, int argc, char **argv)
{
    char path[1024];
    if (argc == 2 && (strcmp(argv[0], "import") == 0 || strcmp(argv[0], "validate") == 0)) {
        char *body = read_file(argv[1]);
        if (body == NULL)
            return 2;
        int rc = run(ctl, "POST",
                     strcmp(argv[0], "import") == 0 ? "/v1/definitions" : "/v1/definitions/validate",
                     body, print_object);
        free(body);
        return rc;
    }
    if (argc == 1 && strcmp(argv[0], "list") == 0)
        return run(ctl, "GET", "/v1/definitions", NULL, human_list);
    if ((argc == 2 || argc == 3) && strcmp(argv[0], "get") == 0) {
        CURL *curl = curl_easy_init();
        char *name = curl_easy_escape(curl, argv[1], 0);
        if (argc == 3)
            snprintf(path, sizeof path, "/v1/definitions/%s/%s", name, argv[2]);
        else
            snprintf(path, sizeof path, "/v1/definitions/%s", name);
        curl_free(name);
        curl_easy_cleanup(curl);
        return run(ctl, "GET", path, NULL, print_object);
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
    int rc;
    if (strcmp(argv[i], "definitions") == 0)
        rc = cmd_definitions(&ctl, argc - i - 1, argv + i + 1);
    else if (strcmp(argv[i], "instances") == 0)
        rc = cmd_instances(&ctl, argc - i - 1, argv + i + 1);
    else if (strcmp(argv[i], "health") == 0)
        rc = run(&ctl, "GET", "/readyz", NULL, print_object);
    else {
        usage();
        rc = 2;
    }
    curl_global_cleanup();
    return rc;
}
