/*
 * expr.c - the expression language (see expr.h and docs/expressions.md).
 *
 * Two phases: a recursive-descent parser builds a small tree (bounded in nodes and
 * depth), and an evaluator walks it over a JSON scope. Values are jansson values;
 * `&&`, `||` and `?:` short-circuit.
 */
#include "strand/expr.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"

typedef enum {
    N_LITERAL, N_NAME, N_MEMBER, N_INDEX, N_CALL, N_UNARY, N_BINARY, N_COND,
    N_ARRAY, N_OBJECT
} node_kind_t;

typedef struct node {
    node_kind_t kind;
    int op;                    /* operator token for unary/binary */
    json_t *literal;           /* N_LITERAL */
    char *name;                /* N_NAME, N_MEMBER field, N_CALL function, N_OBJECT keys */
    struct node *a, *b, *c;    /* operands */
    struct node **args;        /* N_CALL, N_ARRAY, N_OBJECT values */
    char **keys;               /* N_OBJECT */
    int nargs;
} node_t;

struct st_expr {
    node_t *root;
};

/* ---- lexer ---------------------------------------------------------------------- */

enum {
    T_END = 0, T_NUM, T_STR, T_IDENT, T_EQ, T_NE, T_LE, T_GE, T_AND, T_OR, T_NULLISH,
    /* single characters are their own codes */
};

typedef struct {
    const char *src;
    size_t pos;
    int tok;
    size_t tok_start;
    json_t *tok_value;      /* T_NUM, T_STR */
    char ident[128];
    int nodes, depth;
    st_errbuf_t *eb;
    int failed;
} parser_t;

static int fail(parser_t *p, const char *fmt, const char *detail)
{
    if (!p->failed) {
        char msg[300];
        snprintf(msg, sizeof msg, fmt, detail ? detail : "");
        st_err_set(p->eb, ST_ERR_INVALID, "at column %zu: %s", p->tok_start + 1, msg);
    }
    p->failed = 1;
    return 0;
}

static void next(parser_t *p)
{
    json_decref(p->tok_value);
    p->tok_value = NULL;
    const char *s = p->src;
    while (isspace((unsigned char)s[p->pos]))
        p->pos++;
    p->tok_start = p->pos;
    char c = s[p->pos];
    if (c == '\0') {
        p->tok = T_END;
        return;
    }
    if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[p->pos + 1]))) {
        char *end;
        double d = strtod(s + p->pos, &end);
        size_t len = (size_t)(end - (s + p->pos));
        int integral = 1;
        for (size_t i = 0; i < len; i++)
            if (strchr(".eE", s[p->pos + i]))
                integral = 0;
        p->tok_value = integral && fabs(d) < 9e15 ? json_integer((json_int_t)d) : json_real(d);
        p->pos += len;
        p->tok = T_NUM;
        return;
    }
    if (c == '\'' || c == '"') {
        char quote = c;
        size_t cap = 64, len = 0;
        char *buf = malloc(cap);
        p->pos++;
        while (s[p->pos] != quote) {
            char ch = s[p->pos];
            if (ch == '\0') {
                free(buf);
                fail(p, "unterminated string", NULL);
                p->tok = T_END;
                return;
            }
            if (ch == '\\') {
                p->pos++;
                ch = s[p->pos];
                if (ch == 'n') ch = '\n';
                else if (ch == 't') ch = '\t';
                else if (ch == '\0') continue;
            }
            if (len + 2 > cap) {
                cap *= 2;
                buf = realloc(buf, cap);
            }
            buf[len++] = ch;
            p->pos++;
        }
        p->pos++;
        buf[len] = '\0';
        p->tok_value = json_stringn(buf, len);
        free(buf);
        if (p->tok_value == NULL) {
            fail(p, "string is not valid UTF-8", NULL);
            p->tok = T_END;
            return;
        }
        p->tok = T_STR;
        return;
    }
    if (isalpha((unsigned char)c) || c == '_') {
        size_t len = 0;
        while (isalnum((unsigned char)s[p->pos]) || s[p->pos] == '_') {
            if (len < sizeof p->ident - 1)
                p->ident[len++] = s[p->pos];
            p->pos++;
        }
        p->ident[len] = '\0';
        p->tok = T_IDENT;
        return;
    }
    static const struct { const char *text; int tok; } two[] = {
        {"==", T_EQ}, {"!=", T_NE}, {"<=", T_LE}, {">=", T_GE}, {"&&", T_AND}, {"||", T_OR},
        {"??", T_NULLISH}};
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++) {
        if (strncmp(s + p->pos, two[i].text, 2) == 0) {
            p->pos += 2;
            p->tok = two[i].tok;
            return;
        }
    }
    if (strchr("+-*/%<>!?:.()[]{},", c)) {
        p->pos++;
        p->tok = c;
        return;
    }
    char what[8];
    snprintf(what, sizeof what, "%c", c);
    fail(p, "unexpected character '%s'", what);
    p->tok = T_END;
}

/* ---- parser --------------------------------------------------------------------- */

static node_t *new_node(parser_t *p, node_kind_t kind)
{
    if (++p->nodes > ST_EXPR_MAX_NODES) {
        fail(p, "expression too large", NULL);
        return NULL;
    }
    node_t *n = calloc(1, sizeof *n);
    if (n == NULL)
        abort();
    n->kind = kind;
    return n;
}

static void free_node(node_t *n)
{
    if (n == NULL)
        return;
    json_decref(n->literal);
    free(n->name);
    free_node(n->a);
    free_node(n->b);
    free_node(n->c);
    for (int i = 0; i < n->nargs; i++) {
        free_node(n->args[i]);
        if (n->keys)
            free(n->keys[i]);
    }
    free(n->args);
    free(n->keys);
    free(n);
}

static node_t *parse_expr(parser_t *p);

static int expect(parser_t *p, int tok, const char *what)
{
    if (p->tok != tok)
        return fail(p, "expected %s", what);
    next(p);
    return 1;
}

static node_t *add_arg(node_t *n, node_t *arg)
{
    n->args = realloc(n->args, (size_t)(n->nargs + 1) * sizeof *n->args);
    n->args[n->nargs++] = arg;
    return n;
}

static node_t *parse_primary(parser_t *p)
{
    node_t *n = NULL;
    if (p->tok == T_NUM || p->tok == T_STR) {
        n = new_node(p, N_LITERAL);
        if (n)
            n->literal = json_incref(p->tok_value);
        next(p);
    } else if (p->tok == T_IDENT) {
        const char *id = p->ident;
        if (strcmp(id, "true") == 0 || strcmp(id, "false") == 0 || strcmp(id, "null") == 0) {
            n = new_node(p, N_LITERAL);
            if (n)
                n->literal = id[0] == 't' ? json_true() : id[0] == 'f' ? json_false() : json_null();
            next(p);
        } else {
            n = new_node(p, N_NAME);
            if (n)
                n->name = strdup(id);
            next(p);
            if (n && p->tok == '(') {
                n->kind = N_CALL;
                next(p);
                while (p->tok != ')' && !p->failed) {
                    if (n->nargs == ST_EXPR_MAX_ARGS) {
                        fail(p, "too many arguments", NULL);
                        break;
                    }
                    add_arg(n, parse_expr(p));
                    if (p->tok != ',')
                        break;
                    next(p);
                }
                expect(p, ')', "')' after the arguments");
            }
        }
    } else if (p->tok == '(') {
        next(p);
        n = parse_expr(p);
        expect(p, ')', "')'");
    } else if (p->tok == '[') {
        next(p);
        n = new_node(p, N_ARRAY);
        while (n && p->tok != ']' && !p->failed) {
            add_arg(n, parse_expr(p));
            if (p->tok != ',')
                break;
            next(p);
        }
        expect(p, ']', "']'");
    } else if (p->tok == '{') {
        next(p);
        n = new_node(p, N_OBJECT);
        while (n && p->tok != '}' && !p->failed) {
            char *key;
            if (p->tok == T_IDENT)
                key = strdup(p->ident);
            else if (p->tok == T_STR)
                key = strdup(json_string_value(p->tok_value));
            else {
                fail(p, "expected a key", NULL);
                break;
            }
            next(p);
            if (!expect(p, ':', "':' after the key")) {
                free(key);
                break;
            }
            n->keys = realloc(n->keys, (size_t)(n->nargs + 1) * sizeof *n->keys);
            n->keys[n->nargs] = key;
            add_arg(n, parse_expr(p));
            if (p->tok != ',')
                break;
            next(p);
        }
        expect(p, '}', "'}'");
    } else {
        fail(p, p->tok == T_END ? "unexpected end of expression" : "expected a value", NULL);
    }
    /* postfix: .name  [expr] */
    while (n != NULL && !p->failed && (p->tok == '.' || p->tok == '[')) {
        node_t *m;
        if (p->tok == '.') {
            next(p);
            if (p->tok != T_IDENT) {
                fail(p, "expected a name after '.'", NULL);
                break;
            }
            m = new_node(p, N_MEMBER);
            if (m == NULL)
                break;
            m->name = strdup(p->ident);
            next(p);
        } else {
            next(p);
            m = new_node(p, N_INDEX);
            if (m == NULL)
                break;
            m->b = parse_expr(p);
            expect(p, ']', "']'");
        }
        m->a = n;
        n = m;
    }
    return n;
}

static node_t *parse_unary(parser_t *p)
{
    if (++p->depth > ST_EXPR_MAX_DEPTH) {
        fail(p, "expression nested too deeply", NULL);
        return NULL;
    }
    node_t *n;
    if (p->tok == '!' || p->tok == '-') {
        int op = p->tok;
        next(p);
        n = new_node(p, N_UNARY);
        if (n) {
            n->op = op;
            n->a = parse_unary(p);
        }
    } else {
        n = parse_primary(p);
    }
    p->depth--;
    return n;
}

/* Binary operators by precedence level, lowest first. */
static const int levels[][4] = {
    {T_NULLISH, 0}, {T_OR, 0}, {T_AND, 0}, {T_EQ, T_NE, 0}, {'<', '>', T_LE, T_GE},
    {'+', '-', 0}, {'*', '/', '%', 0}};
#define NLEVELS (int)(sizeof levels / sizeof levels[0])

static int at_level(int tok, int level)
{
    for (int i = 0; i < 4 && levels[level][i]; i++)
        if (levels[level][i] == tok)
            return 1;
    return 0;
}

static node_t *parse_binary(parser_t *p, int level)
{
    if (level == NLEVELS)
        return parse_unary(p);
    node_t *left = parse_binary(p, level + 1);
    while (left != NULL && !p->failed && at_level(p->tok, level)) {
        int op = p->tok;
        next(p);
        node_t *n = new_node(p, N_BINARY);
        if (n == NULL)
            break;
        n->op = op;
        n->a = left;
        n->b = parse_binary(p, level + 1);
        left = n;
    }
    return left;
}

static node_t *parse_expr(parser_t *p)
{
    if (++p->depth > ST_EXPR_MAX_DEPTH) {
        fail(p, "expression nested too deeply", NULL);
        return NULL;
    }
    node_t *n = parse_binary(p, 0);
    if (n != NULL && p->tok == '?') {
        next(p);
        node_t *c = new_node(p, N_COND);
        if (c != NULL) {
            c->a = n;
            c->b = parse_expr(p);
            expect(p, ':', "':' in a conditional");
            c->c = parse_expr(p);
            n = c;
        }
    }
    p->depth--;
    return n;
}

st_err_t st_expr_parse(const char *text, st_expr_t **out, st_errbuf_t *eb)
{
    parser_t p = {.src = text, .eb = eb};
    next(&p);
    node_t *root = parse_expr(&p);
    if (!p.failed && p.tok != T_END)
        fail(&p, "unexpected text after the expression", NULL);
    json_decref(p.tok_value);
    if (p.failed || root == NULL) {
        if (!p.failed)
            st_err_set(eb, ST_ERR_INVALID, "empty expression");
        free_node(root);
        return ST_ERR_INVALID;
    }
    st_expr_t *e = malloc(sizeof *e);
    if (e == NULL)
        abort();
    e->root = root;
    *out = e;
    return ST_OK;
}

void st_expr_free(st_expr_t *expr)
{
    if (expr == NULL)
        return;
    free_node(expr->root);
    free(expr);
}

/* ---- values --------------------------------------------------------------------- */

int st_expr_truthy(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE: return 1;
    case JSON_FALSE: case JSON_NULL: return 0;
    case JSON_INTEGER: return json_integer_value(v) != 0;
    case JSON_REAL: return json_real_value(v) != 0.0;
    case JSON_STRING: return json_string_length(v) > 0;
    case JSON_ARRAY: return json_array_size(v) > 0;
    case JSON_OBJECT: return json_object_size(v) > 0;
    }
    return 0;
}

/* The code of a built-in's failure: functions return NULL after st_err_set(), and a
 * built-in that fails on a limit says so here (reset before every call), so that the
 * evaluation returns ST_ERR_LIMIT by code, not by its message. */
static __thread st_err_t fn_code;

/* Text of a value for string concatenation: strings as they are, others as JSON.
 * NULL when the JSON text would pass the string limit (nothing is built then).
 * Caller frees. */
static char *to_text(const json_t *v)
{
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (json_is_null(v))
        return strdup("");
    const st_engine_limits_t *lim = st_engine_limits();
    if (!st_value_fits(v, lim->max_string, lim->max_data_depth, NULL, NULL))
        return NULL;
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

static const char *type_name(const json_t *v)
{
    static const char *const names[] = {"object", "array", "string", "number", "number",
                                        "boolean", "boolean", "null"};
    return v ? names[json_typeof(v)] : "nothing";
}

/* ---- functions ------------------------------------------------------------------ */

typedef struct {
    char name[32];
    int min_args, max_args;
    st_expr_fn fn;
    int builtin;
} fn_entry_t;

static json_t *fn_len(json_t *const *a, int n, st_errbuf_t *eb)
{
    if (json_is_string(a[0])) return json_integer((json_int_t)json_string_length(a[0]));
    if (json_is_array(a[0])) return json_integer((json_int_t)json_array_size(a[0]));
    if (json_is_object(a[0])) return json_integer((json_int_t)json_object_size(a[0]));
    if (json_is_null(a[0])) return json_integer(0);
    st_err_set(eb, ST_ERR_INVALID, "len() needs a string, array or object, got %s", type_name(a[0]));
    return NULL;
}

static json_t *fn_case(json_t *const *a, int upper, st_errbuf_t *eb)
{
    if (!json_is_string(a[0])) {
        st_err_set(eb, ST_ERR_INVALID, "%s() needs a string, got %s", upper ? "upper" : "lower",
                   type_name(a[0]));
        return NULL;
    }
    char *s = strdup(json_string_value(a[0]));
    for (char *c = s; *c; c++)
        *c = (char)(upper ? toupper((unsigned char)*c) : tolower((unsigned char)*c));
    json_t *r = json_string(s);
    free(s);
    return r;
}

static json_t *fn_upper(json_t *const *a, int n, st_errbuf_t *eb) { return fn_case(a, 1, eb); }
static json_t *fn_lower(json_t *const *a, int n, st_errbuf_t *eb) { return fn_case(a, 0, eb); }

static json_t *fn_coalesce(json_t *const *a, int n, st_errbuf_t *eb)
{
    for (int i = 0; i < n; i++)
        if (!json_is_null(a[i]))
            return json_incref(a[i]);
    return json_null();
}

static json_t *fn_contains(json_t *const *a, int n, st_errbuf_t *eb)
{
    if (json_is_string(a[0]) && json_is_string(a[1]))
        return json_boolean(strstr(json_string_value(a[0]), json_string_value(a[1])) != NULL);
    if (json_is_array(a[0])) {
        size_t i;
        json_t *item;
        json_array_foreach(a[0], i, item)
            if (json_equal(item, a[1]))
                return json_true();
        return json_false();
    }
    if (json_is_object(a[0]) && json_is_string(a[1]))
        return json_boolean(json_object_get(a[0], json_string_value(a[1])) != NULL);
    st_err_set(eb, ST_ERR_INVALID, "contains() needs a string, array or object");
    return NULL;
}

static json_t *fn_number(json_t *const *a, int n, st_errbuf_t *eb)
{
    if (json_is_number(a[0]))
        return json_incref(a[0]);
    if (json_is_string(a[0])) {
        char *end;
        const char *s = json_string_value(a[0]);
        double d = strtod(s, &end);
        if (*s != '\0' && *end == '\0')
            return d == (double)(json_int_t)d ? json_integer((json_int_t)d) : json_real(d);
    }
    st_err_set(eb, ST_ERR_INVALID, "number() cannot convert %s", type_name(a[0]));
    return NULL;
}

static json_t *fn_string(json_t *const *a, int n, st_errbuf_t *eb)
{
    char *s = to_text(a[0]);
    if (s == NULL || (long long)strlen(s) > st_engine_limits()->max_string) {
        free(s);
        fn_code = ST_ERR_LIMIT;
        st_err_set(eb, ST_ERR_LIMIT, "string() would build a string longer than %lld bytes",
                   st_engine_limits()->max_string);
        return NULL;
    }
    json_t *r = json_string(s);
    free(s);
    return r;
}

static json_t *fn_keys(json_t *const *a, int n, st_errbuf_t *eb)
{
    if (!json_is_object(a[0])) {
        st_err_set(eb, ST_ERR_INVALID, "keys() needs an object, got %s", type_name(a[0]));
        return NULL;
    }
    json_t *r = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(a[0], k, v)
        json_array_append_new(r, json_string(k));
    return r;
}

static json_t *fn_min_max(json_t *const *a, int n, int want_max, st_errbuf_t *eb)
{
    double best = 0;
    const json_t *pick = NULL;
    for (int i = 0; i < n; i++) {
        if (!json_is_number(a[i])) {
            st_err_set(eb, ST_ERR_INVALID, "min()/max() need numbers, got %s", type_name(a[i]));
            return NULL;
        }
        double d = json_number_value(a[i]);
        if (pick == NULL || (want_max ? d > best : d < best)) {
            best = d;
            pick = a[i];
        }
    }
    return json_incref((json_t *)pick);
}

static json_t *fn_min(json_t *const *a, int n, st_errbuf_t *eb) { return fn_min_max(a, n, 0, eb); }
static json_t *fn_max(json_t *const *a, int n, st_errbuf_t *eb) { return fn_min_max(a, n, 1, eb); }

/* duration('90s') / duration('5m') / duration('2h') / duration('1d') -> milliseconds */
static json_t *fn_duration(json_t *const *a, int n, st_errbuf_t *eb)
{
    if (json_is_integer(a[0]))
        return json_incref(a[0]);
    const char *s = json_string_value(a[0]);
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    long long unit = 0;
    if (end != NULL && end != s) {
        if (strcmp(end, "ms") == 0) unit = 1;
        else if (strcmp(end, "s") == 0) unit = 1000;
        else if (strcmp(end, "m") == 0) unit = 60000;
        else if (strcmp(end, "h") == 0) unit = 3600000;
        else if (strcmp(end, "d") == 0) unit = 86400000;
    }
    if (unit == 0 || !(v >= 0) || v * (double)unit > 9e15) {
        st_err_set(eb, ST_ERR_INVALID, "duration() needs a text like '30s', '5m', '2h' or '1d'");
        return NULL;
    }
    return json_integer((json_int_t)(v * (double)unit));
}

#define MAX_FNS 64
static fn_entry_t fns[MAX_FNS] = {
    {"len", 1, 1, fn_len, 1},           {"upper", 1, 1, fn_upper, 1},
    {"lower", 1, 1, fn_lower, 1},       {"coalesce", 1, ST_EXPR_MAX_ARGS, fn_coalesce, 1},
    {"contains", 2, 2, fn_contains, 1}, {"number", 1, 1, fn_number, 1},
    {"string", 1, 1, fn_string, 1},     {"keys", 1, 1, fn_keys, 1},
    {"min", 1, ST_EXPR_MAX_ARGS, fn_min, 1}, {"max", 1, ST_EXPR_MAX_ARGS, fn_max, 1},
    {"duration", 1, 1, fn_duration, 1},
};

static fn_entry_t *find_fn(const char *name)
{
    for (int i = 0; i < MAX_FNS && fns[i].fn != NULL; i++)
        if (strcmp(fns[i].name, name) == 0)
            return &fns[i];
    return NULL;
}

st_err_t st_expr_register_fn(const char *name, int min_args, int max_args, st_expr_fn fn)
{
    if (name == NULL || strlen(name) >= sizeof fns[0].name || fn == NULL || min_args < 0 ||
        max_args < min_args || max_args > ST_EXPR_MAX_ARGS)
        return ST_ERR_INVALID;
    fn_entry_t *e = find_fn(name);
    if (e != NULL && e->builtin)
        return ST_ERR_CONFLICT;
    if (e == NULL) {
        int i = 0;
        while (i < MAX_FNS && fns[i].fn != NULL)
            i++;
        if (i == MAX_FNS)
            return ST_ERR_LIMIT;
        e = &fns[i];
    }
    snprintf(e->name, sizeof e->name, "%s", name);
    e->min_args = min_args;
    e->max_args = max_args;
    e->fn = fn;
    e->builtin = 0;
    return ST_OK;
}

/* ---- evaluation ----------------------------------------------------------------- */

typedef struct {
    const json_t *scope;
    int steps;
    long long *work;       /* units left in the run's budget; below 0: exhausted */
    st_err_t err;          /* code of the failure, set with its message */
    st_errbuf_t *eb;
} eval_t;

static json_t *eval(eval_t *ev, const node_t *n, int depth);

static json_t *eval_fail(eval_t *ev, st_err_t err, const char *msg, const char *detail)
{
    st_err_set(ev->eb, err, msg, detail ? detail : "");
    ev->err = err;
    return NULL;
}

static json_t *arith(eval_t *ev, int op, json_t *l, json_t *r)
{
    if (op == '+' && (json_is_string(l) || json_is_string(r))) {
        char *a = to_text(l), *b = to_text(r);
        size_t la = a ? strlen(a) : 0, lb = b ? strlen(b) : 0;
        json_t *out = NULL;
        *ev->work -= (long long)(la + lb) / 256;
        if (a == NULL || b == NULL || (long long)(la + lb) > st_engine_limits()->max_string) {
            char msg[96];
            snprintf(msg, sizeof msg, "string longer than %lld bytes (STRAND_EXPR_MAX_STRING)",
                     st_engine_limits()->max_string);
            eval_fail(ev, ST_ERR_LIMIT, "%s", msg);
        } else {
            char *s = malloc(la + lb + 1);
            memcpy(s, a, la);
            memcpy(s + la, b, lb + 1);
            out = json_string(s);
            free(s);
        }
        free(a);
        free(b);
        return out;
    }
    if (!json_is_number(l) || !json_is_number(r)) {
        char msg[96];
        snprintf(msg, sizeof msg, "arithmetic on %s and %s", type_name(l), type_name(r));
        return eval_fail(ev, ST_ERR_INVALID, "%s", msg);
    }
    if (json_is_integer(l) && json_is_integer(r)) {
        json_int_t a = json_integer_value(l), b = json_integer_value(r), out;
        /* Integer results that would overflow fall through to floating point. */
        switch (op) {
        case '+':
            if (!__builtin_add_overflow(a, b, &out))
                return json_integer(out);
            break;
        case '-':
            if (!__builtin_sub_overflow(a, b, &out))
                return json_integer(out);
            break;
        case '*':
            if (!__builtin_mul_overflow(a, b, &out))
                return json_integer(out);
            break;
        case '%':
        case '/':
            if (b == 0)
                return eval_fail(ev, ST_ERR_INVALID, "division by zero%s", NULL);
            if (b == -1 && a == INT64_MIN)
                break;
            if (op == '%')
                return json_integer(a % b);
            if (a % b == 0)
                return json_integer(a / b);
            return json_real((double)a / (double)b);
        }
    }
    double a = json_number_value(l), b = json_number_value(r);
    switch (op) {
    case '+': return json_real(a + b);
    case '-': return json_real(a - b);
    case '*': return json_real(a * b);
    case '/':
    case '%':
        if (b == 0)
            return eval_fail(ev, ST_ERR_INVALID, "division by zero%s", NULL);
        return json_real(op == '/' ? a / b : fmod(a, b));
    }
    return eval_fail(ev, ST_ERR_INTERNAL, "unknown operator%s", NULL);
}

static json_t *compare(eval_t *ev, int op, json_t *l, json_t *r)
{
    if (op == T_EQ || op == T_NE) {
        int eq;
        if (json_is_number(l) && json_is_number(r))
            eq = json_number_value(l) == json_number_value(r);
        else
            eq = json_equal(l, r);
        return json_boolean(op == T_EQ ? eq : !eq);
    }
    int c;
    if (json_is_number(l) && json_is_number(r)) {
        double a = json_number_value(l), b = json_number_value(r);
        c = a < b ? -1 : a > b;
    } else if (json_is_string(l) && json_is_string(r)) {
        c = strcmp(json_string_value(l), json_string_value(r));
    } else {
        char msg[96];
        snprintf(msg, sizeof msg, "cannot order %s and %s", type_name(l), type_name(r));
        return eval_fail(ev, ST_ERR_INVALID, "%s", msg);
    }
    switch (op) {
    case '<': return json_boolean(c < 0);
    case '>': return json_boolean(c > 0);
    case T_LE: return json_boolean(c <= 0);
    default: return json_boolean(c >= 0);
    }
}

/* Checks a value an expression built (an array, an object, a function's result)
 * against the string and value limits; the measure is charged to the work budget.
 * Returns `v` or NULL (with `v` released and the error set). */
static json_t *built(eval_t *ev, json_t *v, const char *what)
{
    const st_engine_limits_t *lim = st_engine_limits();
    char msg[160];
    int too_deep = 0;
    if (json_is_string(v) && (long long)json_string_length(v) > lim->max_string) {
        snprintf(msg, sizeof msg, "%s built a string longer than %lld bytes (STRAND_EXPR_MAX_STRING)",
                 what, lim->max_string);
    } else if ((json_is_array(v) || json_is_object(v)) &&
               !st_value_fits(v, lim->max_value_bytes, lim->max_data_depth, ev->work, &too_deep)) {
        if (too_deep)
            snprintf(msg, sizeof msg, "%s built a value nested deeper than %d levels (STRAND_DATA_MAX_DEPTH)",
                     what, lim->max_data_depth);
        else
            snprintf(msg, sizeof msg, "%s built a value larger than %lld bytes as JSON (STRAND_EXPR_MAX_VALUE_BYTES)",
                     what, lim->max_value_bytes);
    } else {
        return v;
    }
    json_decref(v);
    return eval_fail(ev, ST_ERR_LIMIT, "%s", msg);
}

static json_t *eval(eval_t *ev, const node_t *n, int depth)
{
    if (--*ev->work < 0)
        return eval_fail(ev, ST_ERR_LIMIT, "the run spent its expression work budget (STRAND_RUN_MAX_WORK)%s", NULL);
    if (++ev->steps > ST_EXPR_MAX_NODES * 4 || depth > ST_EXPR_MAX_DEPTH * 2)
        return eval_fail(ev, ST_ERR_LIMIT, "expression evaluation exceeded its bounds%s", NULL);
    switch (n->kind) {
    case N_LITERAL:
        return json_incref(n->literal);
    case N_NAME: {
        json_t *v = json_object_get(ev->scope, n->name);
        if (v == NULL)
            return eval_fail(ev, ST_ERR_INVALID, "unknown name '%s'", n->name);
        return json_incref(v);
    }
    case N_MEMBER: {
        json_t *base = eval(ev, n->a, depth + 1);
        if (base == NULL)
            return NULL;
        json_t *v = json_is_object(base) ? json_object_get(base, n->name) : NULL;
        if (v == NULL && !json_is_object(base) && !json_is_null(base)) {
            json_decref(base);
            return eval_fail(ev, ST_ERR_INVALID, "'.%s' on a value that is not an object", n->name);
        }
        json_t *out = v ? json_incref(v) : json_null();   /* missing member: null */
        json_decref(base);
        return out;
    }
    case N_INDEX: {
        json_t *base = eval(ev, n->a, depth + 1);
        json_t *idx = base ? eval(ev, n->b, depth + 1) : NULL;
        json_t *out = NULL;
        if (base != NULL && idx != NULL) {
            if (json_is_array(base) && json_is_integer(idx)) {
                json_int_t i = json_integer_value(idx);
                if (i < 0)
                    i += (json_int_t)json_array_size(base);
                json_t *v = i >= 0 ? json_array_get(base, (size_t)i) : NULL;
                out = v ? json_incref(v) : json_null();
            } else if (json_is_object(base) && json_is_string(idx)) {
                json_t *v = json_object_get(base, json_string_value(idx));
                out = v ? json_incref(v) : json_null();
            } else if (json_is_null(base)) {
                out = json_null();
            } else {
                eval_fail(ev, ST_ERR_INVALID, "cannot index %s", type_name(base));
            }
        }
        json_decref(base);
        json_decref(idx);
        return out;
    }
    case N_CALL: {
        fn_entry_t *f = find_fn(n->name);
        if (f == NULL)
            return eval_fail(ev, ST_ERR_INVALID, "unknown function '%s'", n->name);
        if (n->nargs < f->min_args || n->nargs > f->max_args)
            return eval_fail(ev, ST_ERR_INVALID, "wrong number of arguments to %s()", n->name);
        json_t *args[ST_EXPR_MAX_ARGS];
        int got = 0;
        for (; got < n->nargs; got++)
            if ((args[got] = eval(ev, n->args[got], depth + 1)) == NULL)
                break;
        json_t *out = NULL;
        if (got == n->nargs) {
            fn_code = ST_ERR_INVALID;
            out = f->fn(args, n->nargs, ev->eb);
            if (out == NULL)
                ev->err = fn_code;
        }
        int passed_through = 0;   /* coalesce(x) returns x: nothing was built */
        for (int i = 0; i < got; i++) {
            passed_through |= out == args[i];
            json_decref(args[i]);
        }
        if (out != NULL && !passed_through) {
            char what[48];
            snprintf(what, sizeof what, "%s()", n->name);
            out = built(ev, out, what);
        }
        return out;
    }
    case N_UNARY: {
        json_t *v = eval(ev, n->a, depth + 1);
        if (v == NULL)
            return NULL;
        json_t *out;
        if (n->op == '!')
            out = json_boolean(!st_expr_truthy(v));
        else if (json_is_integer(v) && json_integer_value(v) != INT64_MIN)
            out = json_integer(-json_integer_value(v));
        else if (json_is_integer(v))
            out = json_real(-(double)json_integer_value(v));
        else if (json_is_real(v))
            out = json_real(-json_real_value(v));
        else
            out = eval_fail(ev, ST_ERR_INVALID, "cannot negate %s", type_name(v));
        json_decref(v);
        return out;
    }
    case N_BINARY: {
        json_t *l = eval(ev, n->a, depth + 1);
        if (l == NULL)
            return NULL;
        if (n->op == T_AND || n->op == T_OR) {
            int t = st_expr_truthy(l);
            json_decref(l);
            if (n->op == T_AND ? !t : t)
                return json_boolean(t);
            json_t *r = eval(ev, n->b, depth + 1);
            if (r == NULL)
                return NULL;
            json_t *out = json_boolean(st_expr_truthy(r));
            json_decref(r);
            return out;
        }
        if (n->op == T_NULLISH) {
            if (!json_is_null(l))
                return l;
            json_decref(l);
            return eval(ev, n->b, depth + 1);
        }
        json_t *r = eval(ev, n->b, depth + 1);
        if (r == NULL) {
            json_decref(l);
            return NULL;
        }
        json_t *out = strchr("+-*/%", n->op) && n->op < 128 ? arith(ev, n->op, l, r)
                                                             : compare(ev, n->op, l, r);
        json_decref(l);
        json_decref(r);
        return out;
    }
    case N_COND: {
        json_t *c = eval(ev, n->a, depth + 1);
        if (c == NULL)
            return NULL;
        int t = st_expr_truthy(c);
        json_decref(c);
        return eval(ev, t ? n->b : n->c, depth + 1);
    }
    case N_ARRAY: {
        json_t *arr = json_array();
        for (int i = 0; i < n->nargs; i++) {
            json_t *v = eval(ev, n->args[i], depth + 1);
            if (v == NULL) {
                json_decref(arr);
                return NULL;
            }
            json_array_append_new(arr, v);
        }
        return built(ev, arr, "an array");
    }
    case N_OBJECT: {
        json_t *obj = json_object();
        for (int i = 0; i < n->nargs; i++) {
            json_t *v = eval(ev, n->args[i], depth + 1);
            if (v == NULL) {
                json_decref(obj);
                return NULL;
            }
            json_object_set_new(obj, n->keys[i], v);
        }
        return built(ev, obj, "an object");
    }
    }
    return eval_fail(ev, ST_ERR_INTERNAL, "unknown node%s", NULL);
}

st_err_t st_expr_eval_counted(const st_expr_t *expr, const json_t *scope, json_t **value,
                              long long *work, st_errbuf_t *eb)
{
    st_errbuf_t local;
    eval_t ev = {scope, 0, work, ST_ERR_INVALID, eb ? eb : &local};
    ev.eb->msg[0] = '\0';
    json_t *v = eval(&ev, expr->root, 0);
    if (v == NULL) {
        if (ev.eb->msg[0] == '\0')
            st_err_set(ev.eb, ST_ERR_INVALID, "the expression has no value");
        return ev.err == ST_ERR_LIMIT ? ST_ERR_LIMIT : ST_ERR_INVALID;
    }
    *value = v;
    return ST_OK;
}

st_err_t st_expr_eval(const st_expr_t *expr, const json_t *scope, json_t **value,
                      st_errbuf_t *eb)
{
    long long work = st_engine_limits()->max_work;
    return st_expr_eval_counted(expr, scope, value, &work, eb);
}

st_err_t st_expr_eval_text(const char *text, const json_t *scope, json_t **value,
                           st_errbuf_t *eb)
{
    st_expr_t *e = NULL;
    st_err_t err = st_expr_parse(text, &e, eb);
    if (err != ST_OK)
        return err;
    err = st_expr_eval(e, scope, value, eb);
    st_expr_free(e);
    return err;
}
