/*
 * diagram.c - definitions drawn with Graphviz (see diagram.h).
 *
 * The DOT text is built from the canonical definition by hand (every user string is
 * escaped), then laid out and rendered by libgvc in memory. One Graphviz context is
 * shared by the process (plugin loading is slow) behind a mutex.
 */
#include "strand/diagram.h"

#include <gvc.h>
#include <gvplugin.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t len, cap;
    int nodes;
    int oom;
    json_t *visited;   /* {node name: true} */
    json_t *waiting;   /* {node name: true} */
    json_t *failed;    /* {node name: true}: the step a failed instance failed in */
    json_t *edges_seen;   /* {"a\tb": true} lifecycle/process visited edges */
} dot_t;

static int max_nodes = ST_DIAGRAM_DEFAULT_MAX_NODES;

void st_diagram_set_max_nodes(int n)
{
    max_nodes = n < 10 ? 10 : n > ST_DIAGRAM_MAX_NODES ? ST_DIAGRAM_MAX_NODES : n;
}

static void put(dot_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fmt(char *out, size_t n, const char *f, ...) __attribute__((format(printf, 3, 4)));

/* snprintf for pointers and labels: a longer text is cut (pointers are bounded far
 * below the buffers by the definition validator). */
static void fmt(char *out, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(out, n, f, ap);
    va_end(ap);
}

static void put(dot_t *d, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(d->buf ? d->buf + d->len : NULL, d->buf ? d->cap - d->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            d->oom = 1;
            return;
        }
        if (d->buf != NULL && d->len + (size_t)n < d->cap) {
            d->len += (size_t)n;
            return;
        }
        size_t cap = d->cap ? d->cap * 2 : 4096;
        while (cap <= d->len + (size_t)n)
            cap *= 2;
        char *nb = realloc(d->buf, cap);
        if (nb == NULL) {
            d->oom = 1;
            return;
        }
        d->buf = nb;
        d->cap = cap;
    }
}

/* Appends `s` as the inside of a DOT double-quoted string (at most 120 bytes shown). */
static void put_escaped(dot_t *d, const char *s, size_t max)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && n < max; p++, n++) {
        if (*p == '"' || *p == '\\')
            put(d, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            put(d, " ");
        else
            put(d, "%c", *p);
    }
}

static const char *str(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

/* Emits one node: `name` is the DOT node name, `svg_id` its SVG id. */
static void node(dot_t *d, const char *name, const char *svg_id_prefix, const char *svg_id,
                 const char *label, const char *shape)
{
    d->nodes++;
    const char *cls = json_object_get(d->waiting, name)  ? "waiting"
                      : json_object_get(d->failed, name) ? "failed"
                      : json_object_get(d->visited, name) ? "visited" : NULL;
    put(d, "  \"");
    put_escaped(d, name, 600);
    put(d, "\" [id=\"%s", svg_id_prefix);
    put_escaped(d, svg_id, 200);
    put(d, "\", label=\"");
    put_escaped(d, label, 120);
    put(d, "\", shape=%s", shape);
    if (cls != NULL)
        put(d, ", class=\"%s\", style=\"filled,bold\", fillcolor=\"%s\"", cls,
            strcmp(cls, "waiting") == 0 ? "#ffd166" : strcmp(cls, "failed") == 0 ? "#ef476f" : "#b7e4c7");
    put(d, "];\n");
}

static void edge(dot_t *d, const char *from, const char *to, const char *label, int visited)
{
    put(d, "  \"");
    put_escaped(d, from, 600);
    put(d, "\" -> \"");
    put_escaped(d, to, 600);
    put(d, "\"");
    if (label != NULL || visited) {
        put(d, " [");
        if (label != NULL) {
            put(d, "label=\"");
            put_escaped(d, label, 60);
            put(d, "\"%s", visited ? ", " : "");
        }
        if (visited)
            put(d, "class=\"visited\", color=\"#2d6a4f\", penwidth=2");
        put(d, "]");
    }
    put(d, ";\n");
}

/* ---- flows: the canonical step tree ------------------------------------------------ */

static void extend_steal(json_t *exits, json_t *more)
{
    json_array_extend(exits, more);
    json_decref(more);
}

static void flow_edges_from(dot_t *d, json_t *exits, const char *to, const char *label)
{
    size_t i;
    json_t *e;
    json_array_foreach(exits, i, e) {
        const char *from = json_string_value(e);
        int visited = json_object_get(d->visited, from) &&
                      (json_object_get(d->visited, to) || json_object_get(d->waiting, to));
        edge(d, from, to, i == 0 ? label : NULL, visited);
    }
}

/* Draws the step list at `pointer`, entered from `entry` (node names); returns the
 * list's exits (new array). Terminal steps (complete, fail, goto) leave no exit. */
static json_t *flow_list(dot_t *d, const json_t *steps, const char *pointer, json_t *entry,
                         const char *entry_label);

static json_t *flow_step(dot_t *d, const json_t *step, const char *ptr, json_t *entry,
                         const char *entry_label)
{
    const char *type = str(step, "type") ? str(step, "type") : "?";
    const char *id = str(step, "id") ? str(step, "id") : ptr;
    char label[200];
    const char *name = str(step, "name");
    fmt(label, sizeof label, "%s\n%s%s%s", id, type, name ? ": " : "", name ? name : "");
    const char *shape = strcmp(type, "if") == 0 || strcmp(type, "switch") == 0 ? "diamond"
                        : strcmp(type, "task") == 0                            ? "box3d"
                        : strcmp(type, "complete") == 0 || strcmp(type, "fail") == 0
                            ? "doubleoctagon"
                        : strcmp(type, "parallel") == 0 ? "trapezium"
                        : strcmp(type, "wait_signal") == 0 || strcmp(type, "timer") == 0
                            ? "ellipse"
                            : "box";
    node(d, ptr, "step-", id, label, shape);
    flow_edges_from(d, entry, ptr, entry_label);
    json_t *self = json_pack("[s]", ptr);
    json_t *exits = json_array();
    char p[700];
    if (strcmp(type, "if") == 0) {
        fmt(p, sizeof p, "%s/then", ptr);
        extend_steal(exits, flow_list(d, json_object_get(step, "then"), p, self, "then"));
        if (json_object_get(step, "else") && json_array_size(json_object_get(step, "else"))) {
            fmt(p, sizeof p, "%s/else", ptr);
            extend_steal(exits, flow_list(d, json_object_get(step, "else"), p, self, "else"));
        } else {
            json_array_append(exits, json_array_get(self, 0));
        }
    } else if (strcmp(type, "switch") == 0) {
        size_t i;
        json_t *cs;
        json_array_foreach(json_object_get(step, "cases"), i, cs) {
            fmt(p, sizeof p, "%s/cases/%zu/steps", ptr, i);
            char lbl[40];
            fmt(lbl, sizeof lbl, "case %zu", i);
            extend_steal(exits, flow_list(d, json_object_get(cs, "steps"), p, self, lbl));
        }
        if (json_array_size(json_object_get(step, "default"))) {
            fmt(p, sizeof p, "%s/default", ptr);
            extend_steal(exits, flow_list(d, json_object_get(step, "default"), p, self, "default"));
        } else {
            json_array_append(exits, json_array_get(self, 0));
        }
    } else if (strcmp(type, "while") == 0 || strcmp(type, "repeat") == 0) {
        fmt(p, sizeof p, "%s/body", ptr);
        json_t *body_exits = flow_list(d, json_object_get(step, "body"), p, self, "body");
        flow_edges_from(d, body_exits, ptr, "loop");
        json_decref(body_exits);
        json_array_append(exits, json_array_get(self, 0));
    } else if (strcmp(type, "parallel") == 0) {
        size_t i;
        json_t *br;
        json_array_foreach(json_object_get(step, "branches"), i, br) {
            fmt(p, sizeof p, "%s/branches/%zu", ptr, i);
            char lbl[40];
            fmt(lbl, sizeof lbl, "branch %zu", i);
            extend_steal(exits, flow_list(d, br, p, self, lbl));
        }
    } else if (strcmp(type, "task") == 0 || strcmp(type, "wait_signal") == 0 ||
               strcmp(type, "timer") == 0 || strcmp(type, "call") == 0) {
        json_array_append(exits, json_array_get(self, 0));
        /* timeouts and failure handlers branch off */
        static const char *const side[] = {"on_timeout", "on_failure", NULL};
        for (int k = 0; side[k]; k++) {
            const json_t *list = json_object_get(step, side[k]);
            if (json_is_array(list) && json_array_size(list)) {
                fmt(p, sizeof p, "%s/%s", ptr, side[k]);
                extend_steal(exits, flow_list(d, list, p, self, side[k]));
            }
        }
    } else if (strcmp(type, "complete") != 0 && strcmp(type, "fail") != 0 &&
               strcmp(type, "goto") != 0) {
        json_array_append(exits, json_array_get(self, 0));
    }
    json_decref(self);
    return exits;
}

static json_t *flow_list(dot_t *d, const json_t *steps, const char *pointer, json_t *entry,
                         const char *entry_label)
{
    json_t *cur = json_copy(entry);
    const char *label = entry_label;
    size_t i;
    json_t *step;
    json_array_foreach(steps, i, step) {
        if (d->nodes > max_nodes || d->oom)
            break;
        char p[700];
        fmt(p, sizeof p, "%s/%zu", pointer, i);
        json_t *next = flow_step(d, step, p, cur, label);
        json_decref(cur);
        cur = next;
        label = NULL;
    }
    return cur;
}

/* Marks the overlay of a flow snapshot: each thread's wait (waiting), and the steps
 * before each frame's position and the steps enclosing it (visited). */
static void flow_overlay(dot_t *d, const json_t *canonical, const json_t *snapshot,
                         const json_t *done_tasks)
{
    size_t i, j;
    json_t *th, *frame;
    json_array_foreach(json_object_get(snapshot, "threads"), i, th) {
        const char *wait_step = str(json_object_get(th, "wait"), "step");
        if (wait_step != NULL)
            json_object_set_new(d->waiting, wait_step, json_true());
        json_array_foreach(json_object_get(th, "stack"), j, frame) {
            const char *path = str(frame, "path");
            json_int_t index = json_integer_value(json_object_get(frame, "index"));
            if (path == NULL || strlen(path) > 600 || index < 0)
                continue;
            for (json_int_t k = 0; k < index && k < max_nodes; k++) {
                char p[700];
                fmt(p, sizeof p, "%s/%lld", path, (long long)k);
                json_object_set_new(d->visited, p, json_true());
            }
            /* the steps enclosing this list: every prefix "/steps/N[/...]/M" */
            char p[700];
            fmt(p, sizeof p, "%s", path);
            for (char *s = p + 1; *s; s++) {
                if (*s != '/')
                    continue;
                *s = '\0';
                const char *last = strrchr(p, '/');
                if (last && last[1] >= '0' && last[1] <= '9')
                    json_object_set_new(d->visited, p, json_true());
                *s = '/';
            }
        }
    }
    /* Completed tasks: task steps with that name were on the path. */
    if (json_array_size(done_tasks) == 0)
        return;
    json_t *stack = json_pack("[[s, O]]", "/steps", json_object_get(canonical, "steps"));
    while (json_array_size(stack) > 0 && json_array_size(stack) < 10000) {
        json_t *top = json_incref(json_array_get(stack, json_array_size(stack) - 1));
        json_array_remove(stack, json_array_size(stack) - 1);
        const char *ptr = json_string_value(json_array_get(top, 0));
        const json_t *v = json_array_get(top, 1);
        if (json_is_array(v)) {
            json_t *e;
            json_array_foreach(v, i, e) {
                char p[700];
                fmt(p, sizeof p, "%s/%zu", ptr, i);
                json_array_append_new(stack, json_pack("[s, O]", p, e));
            }
        } else if (json_is_object(v)) {
            if (str(v, "type") && strcmp(str(v, "type"), "task") == 0) {
                json_t *n;
                json_array_foreach(done_tasks, j, n)
                    if (json_is_string(n) && str(v, "name") && strcmp(json_string_value(n), str(v, "name")) == 0)
                        json_object_set_new(d->visited, ptr, json_true());
            }
            static const char *const lists[] = {"then", "else", "default", "body", "branches",
                                                "on_timeout", "on_failure", NULL};
            for (int k = 0; lists[k]; k++)
                if (json_object_get(v, lists[k])) {
                    char p[700];
                    fmt(p, sizeof p, "%s/%s", ptr, lists[k]);
                    json_array_append_new(stack, json_pack("[s, O]", p, json_object_get(v, lists[k])));
                }
            json_t *cs;
            json_array_foreach(json_object_get(v, "cases"), j, cs) {
                char p[700];
                fmt(p, sizeof p, "%s/cases/%zu/steps", ptr, j);
                json_array_append_new(stack, json_pack("[s, O]", p, json_object_get(cs, "steps")));
            }
        }
        json_decref(top);
    }
    json_decref(stack);
}

static void draw_flow(dot_t *d, const json_t *canonical, const json_t *snapshot, int overlay)
{
    const char *status = str(snapshot, "status");
    int ended = status && (strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0);
    if (overlay)
        json_object_set_new(d->visited, "start", json_true());
    if (ended)
        json_object_set_new(d->visited, "end", json_true());
    const char *failed_step = str(json_object_get(snapshot, "error"), "step");
    if (failed_step != NULL)
        json_object_set_new(d->failed, failed_step, json_true());
    node(d, "start", "", "start", "start", "circle");
    json_t *entry = json_pack("[s]", "start");
    json_t *exits = flow_list(d, json_object_get(canonical, "steps"), "/steps", entry, NULL);
    node(d, "end", "", "end", "end", "doublecircle");
    flow_edges_from(d, exits, "end", NULL);
    json_decref(exits);
    json_decref(entry);
}

/* ---- lifecycles: states and transitions -------------------------------------------- */

static void draw_lifecycle(dot_t *d, const json_t *canonical, const json_t *snapshot)
{
    size_t i;
    json_t *s, *t;
    if (snapshot != NULL) {
        const char *current = str(snapshot, "current");
        const char *status = str(snapshot, "status");
        if (current != NULL)
            json_object_set_new(status && strcmp(status, "waiting") == 0 ? d->waiting : d->visited,
                                current, json_true());
        json_array_foreach(json_object_get(snapshot, "timeline"), i, t) {
            if (!str(t, "from") || !str(t, "to") || !str(t, "event"))
                continue;
            json_object_set_new(d->visited, str(t, "from"), json_true());
            char key[600];
            fmt(key, sizeof key, "%s\t%s\t%s", str(t, "from"), str(t, "event"), str(t, "to"));
            json_object_set_new(d->edges_seen, key, json_true());
        }
        if (str(canonical, "initial"))
            json_object_set_new(d->visited, "start", json_true());
    }
    node(d, "start", "", "start", "start", "point");
    json_array_foreach(json_object_get(canonical, "states"), i, s) {
        const char *name = str(s, "name");
        if (name == NULL || d->nodes > max_nodes)
            continue;
        int final = json_is_true(json_object_get(s, "final"));
        node(d, name, "state-", name, name, final ? "doublecircle" : "box");
    }
    if (str(canonical, "initial"))
        edge(d, "start", str(canonical, "initial"), NULL, snapshot != NULL);
    json_array_foreach(json_object_get(canonical, "transitions"), i, t) {
        const char *from = str(t, "from"), *to = str(t, "to"), *event = str(t, "event");
        if (!from || !to || !event)
            continue;
        char key[600];
        fmt(key, sizeof key, "%s\t%s\t%s", from, event, to);
        edge(d, from, to, event, json_object_get(d->edges_seen, key) != NULL);
    }
}

/* ---- processes: states and their next edges ---------------------------------------- */

/* The process state a canonical step pointer belongs to: the prefix of its step id
 * before the first '/' (the compiler names steps "<state>/..."). */
static void process_state_of(const json_t *canonical, const char *pointer, char *out, size_t n)
{
    out[0] = '\0';
    json_t *v = (json_t *)canonical;
    char p[700];
    fmt(p, sizeof p, "%s", pointer ? pointer : "");
    char *save = NULL;
    for (char *seg = strtok_r(p, "/", &save); seg && v; seg = strtok_r(NULL, "/", &save))
        v = json_is_array(v) ? json_array_get(v, strtoul(seg, NULL, 10)) : json_object_get(v, seg);
    const char *id = str(v, "id");
    if (id == NULL)
        return;
    size_t len = strcspn(id, "/");
    if (len >= n)
        len = n - 1;
    memcpy(out, id, len);
    out[len] = '\0';
}

static void draw_process(dot_t *d, const json_t *canonical, const json_t *snapshot)
{
    const json_t *source = json_object_get(canonical, "source");
    if (source == NULL)
        source = canonical;
    size_t i, j;
    json_t *s, *n, *th, *frame;
    if (snapshot != NULL) {
        json_object_set_new(d->visited, "start", json_true());
        char failed[200];
        process_state_of(canonical, str(json_object_get(snapshot, "error"), "step"), failed, sizeof failed);
        if (failed[0])
            json_object_set_new(d->failed, failed, json_true());
        json_array_foreach(json_object_get(snapshot, "threads"), i, th) {
            char state[200];
            process_state_of(canonical, str(json_object_get(th, "wait"), "step"), state, sizeof state);
            if (state[0])
                json_object_set_new(d->waiting, state, json_true());
            json_array_foreach(json_object_get(th, "stack"), j, frame) {
                char p[700];
                fmt(p, sizeof p, "%s/%lld", str(frame, "path") ? str(frame, "path") : "",
                         (long long)json_integer_value(json_object_get(frame, "index")));
                process_state_of(canonical, p, state, sizeof state);
                if (state[0] && !json_object_get(d->waiting, state))
                    json_object_set_new(d->visited, state, json_true());
            }
        }
    }
    node(d, "start", "", "start", "start", "point");
    json_array_foreach(json_object_get(source, "states"), i, s) {
        const char *id = str(s, "id");
        if (id == NULL || d->nodes > max_nodes)
            continue;
        char label[300];
        fmt(label, sizeof label, "%s%s%s%s", id,
                 json_object_get(s, "wait_until") ? "\nwait_until" : "",
                 json_object_get(s, "execute") ? "\nexecute" : "",
                 json_object_get(s, "complete") ? "\ncomplete" : "");
        node(d, id, "state-", id, label, json_object_get(s, "complete") ? "doublecircle" : "box");
    }
    json_array_foreach(json_object_get(source, "start"), i, n)
        if (json_is_string(n))
            edge(d, "start", json_string_value(n), NULL, snapshot != NULL);
    json_array_foreach(json_object_get(source, "states"), i, s) {
        const char *id = str(s, "id");
        if (id == NULL)
            continue;
        json_array_foreach(json_object_get(s, "next"), j, n)
            if (json_is_string(n))
                edge(d, id, json_string_value(n), NULL,
                     json_object_get(d->visited, id) &&
                         (json_object_get(d->visited, json_string_value(n)) ||
                          json_object_get(d->waiting, json_string_value(n))));
        const char *fail = str(json_object_get(s, "execute"), "on_failure");
        if (fail != NULL)
            edge(d, id, fail, "on_failure", 0);
    }
}

st_err_t st_diagram_dot(const json_t *canonical, const json_t *snapshot,
                        const json_t *done_tasks, char **out, st_errbuf_t *eb)
{
    *out = NULL;
    const char *kind = str(canonical, "kind");
    if (!json_is_object(snapshot))
        snapshot = NULL;
    if (kind == NULL)
        return st_err_set(eb, ST_ERR_INVALID, "the definition has no kind");
    dot_t d = {.visited = json_object(), .waiting = json_object(), .failed = json_object(),
               .edges_seen = json_object()};
    put(&d, "digraph \"");
    put_escaped(&d, str(canonical, "name"), 120);
    put(&d, "\" {\n  graph [rankdir=TB, fontname=\"Helvetica\", label=\"");
    put_escaped(&d, str(canonical, "name"), 120);
    put(&d, " v%lld (%s)\"];\n  node [fontname=\"Helvetica\", fontsize=10];\n"
            "  edge [fontname=\"Helvetica\", fontsize=9];\n",
        (long long)json_integer_value(json_object_get(canonical, "version")), kind);
    st_err_t err = ST_OK;
    if (strcmp(kind, "flow") == 0) {
        if (snapshot || done_tasks)
            flow_overlay(&d, canonical, snapshot, done_tasks);
        draw_flow(&d, canonical, snapshot, snapshot != NULL || done_tasks != NULL);
    } else if (strcmp(kind, "lifecycle") == 0) {
        draw_lifecycle(&d, canonical, snapshot);
    } else if (strcmp(kind, "process") == 0) {
        draw_process(&d, canonical, snapshot);
    } else {
        err = st_err_set(eb, ST_ERR_INVALID, "cannot draw a definition of kind '%s'", kind);
    }
    put(&d, "}\n");
    if (err == ST_OK && d.oom)
        err = st_err_set(eb, ST_ERR_NOMEM, "out of memory drawing the definition");
    if (err == ST_OK && d.nodes > max_nodes)
        err = st_err_set(eb, ST_ERR_INVALID, "the definition has more than %d steps to draw",
                         max_nodes);
    json_decref(d.visited);
    json_decref(d.waiting);
    json_decref(d.failed);
    json_decref(d.edges_seen);
    if (err != ST_OK) {
        free(d.buf);
        return err;
    }
    *out = d.buf;
    return ST_OK;
}

static pthread_mutex_t gv_lock = PTHREAD_MUTEX_INITIALIZER;
static GVC_t *gv_context;   /* created once, kept for the process's life */

/* Only the two plugins a diagram needs, linked in: the dot layout and the core
 * renderers (SVG). Without demand loading Graphviz reads no plugin configuration and
 * loads no text-layout plugin (fontconfig): label widths are estimated from built-in
 * font metrics, which is enough for boxes around ids. */
extern gvplugin_library_t gvplugin_dot_layout_LTX_library;
extern gvplugin_library_t gvplugin_core_LTX_library;
static const lt_symlist_t diagram_plugins[] = {
    {"gvplugin_dot_layout_LTX_library", &gvplugin_dot_layout_LTX_library},
    {"gvplugin_core_LTX_library", &gvplugin_core_LTX_library},
    {0, 0},
};

st_err_t st_diagram_svg(const char *dot, char **svg, size_t *len, st_errbuf_t *eb)
{
    *svg = NULL;
    *len = 0;
    if (pthread_mutex_trylock(&gv_lock) != 0)
        return st_err_set(eb, ST_ERR_RETRY, "another diagram is being drawn; retry shortly");
    if (gv_context == NULL) {
        agseterr(AGMAX);   /* errors come back as return codes, not stderr lines */
        gv_context = gvContextPlugins(diagram_plugins, 0);
    }
    st_err_t err = ST_OK;
    Agraph_t *g = gv_context ? agmemread(dot) : NULL;
    if (g == NULL) {
        err = st_err_set(eb, ST_ERR_INTERNAL, "graphviz could not read the generated graph");
    } else if (gvLayout(gv_context, g, "dot") != 0) {
        err = st_err_set(eb, ST_ERR_INTERNAL, "graphviz could not lay out the graph");
    } else {
        char *data = NULL;
        unsigned int n = 0;
        if (gvRenderData(gv_context, g, "svg", &data, &n) != 0 || data == NULL) {
            err = st_err_set(eb, ST_ERR_INTERNAL, "graphviz could not render SVG");
        } else {
            *svg = data;
            *len = n;
        }
        gvFreeLayout(gv_context, g);
    }
    if (g != NULL)
        agclose(g);
    pthread_mutex_unlock(&gv_lock);
    return err;
}

void st_diagram_free(char *svg)
{
    if (svg != NULL)
        gvFreeRenderData(svg);
}
