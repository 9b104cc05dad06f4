/* result_schema.c - task result schemas (see result_schema.h). */
#include "strand/result_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *pointer;
    size_t pointer_len;
    char *msg;
    size_t msg_len;
} report_t;

static int fail(report_t *r, const char *pointer, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(report_t *r, const char *pointer, const char *fmt, ...)
{
    snprintf(r->pointer, r->pointer_len, "%s", pointer);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, r->msg_len, fmt, ap);
    va_end(ap);
    return 0;
}

/* Appends "/<key>" (escaped as a JSON pointer token) to `base`. */
static void child(char *out, size_t n, const char *base, const char *key)
{
    size_t len = (size_t)snprintf(out, n, "%s/", base);
    for (const char *k = key; *k && len + 3 < n; k++) {
        if (*k == '~' || *k == '/') {
            out[len++] = '~';
            out[len++] = *k == '~' ? '0' : '1';
        } else {
            out[len++] = *k;
        }
    }
    out[len < n ? len : n - 1] = '\0';
}

static void child_index(char *out, size_t n, const char *base, size_t i)
{
    char key[24];
    snprintf(key, sizeof key, "%zu", i);
    child(out, n, base, key);
}

static const char *const type_names[] = {"object", "array", "string", "number", "integer",
                                         "boolean", "null", NULL};

static int known_type(const json_t *t)
{
    for (int i = 0; json_is_string(t) && type_names[i]; i++)
        if (strcmp(json_string_value(t), type_names[i]) == 0)
            return 1;
    return 0;
}

static int is_count(const json_t *v)
{
    return json_is_integer(v) && json_integer_value(v) >= 0;
}

static int check(const json_t *s, const char *ptr, int depth, report_t *r)
{
    char p[512];
    if (depth > ST_SCHEMA_MAX_DEPTH)
        return fail(r, ptr, "the schema nests more than %d levels", ST_SCHEMA_MAX_DEPTH);
    if (json_is_boolean(s))
        return 1;
    if (!json_is_object(s))
        return fail(r, ptr, "a schema must be an object or a boolean");
    const json_t *v = json_object_get(s, "type");
    if (v != NULL) {
        int ok = known_type(v);
        if (json_is_array(v)) {
            size_t i;
            json_t *t;
            ok = json_array_size(v) > 0;
            json_array_foreach(v, i, t) ok &= known_type(t);
        }
        if (!ok) {
            child(p, sizeof p, ptr, "type");
            return fail(r, p, "type must be one of object, array, string, number, integer,"
                              " boolean, null (or an array of them)");
        }
    }
    if ((v = json_object_get(s, "enum")) != NULL && (!json_is_array(v) || json_array_size(v) == 0)) {
        child(p, sizeof p, ptr, "enum");
        return fail(r, p, "enum must be a non-empty array");
    }
    if ((v = json_object_get(s, "required")) != NULL) {
        size_t i;
        json_t *t;
        int ok = json_is_array(v);
        json_array_foreach(v, i, t) ok &= json_is_string(t);
        if (!ok) {
            child(p, sizeof p, ptr, "required");
            return fail(r, p, "required must be an array of property names");
        }
    }
    static const char *const counts[] = {"minItems", "maxItems", "minLength", "maxLength", NULL};
    for (int i = 0; counts[i]; i++)
        if ((v = json_object_get(s, counts[i])) != NULL && !is_count(v)) {
            child(p, sizeof p, ptr, counts[i]);
            return fail(r, p, "%s must be a non-negative integer", counts[i]);
        }
    static const char *const bounds[] = {"minimum", "maximum", NULL};
    for (int i = 0; bounds[i]; i++)
        if ((v = json_object_get(s, bounds[i])) != NULL && !json_is_number(v)) {
            child(p, sizeof p, ptr, bounds[i]);
            return fail(r, p, "%s must be a number", bounds[i]);
        }
    if ((v = json_object_get(s, "properties")) != NULL) {
        char pp[512];
        child(pp, sizeof pp, ptr, "properties");
        if (!json_is_object(v))
            return fail(r, pp, "properties must be an object of schemas");
        const char *key;
        json_t *sub;
        json_object_foreach((json_t *)v, key, sub) {
            child(p, sizeof p, pp, key);
            if (!check(sub, p, depth + 1, r))
                return 0;
        }
    }
    static const char *const subs[] = {"additionalProperties", "items", NULL};
    for (int i = 0; subs[i]; i++)
        if ((v = json_object_get(s, subs[i])) != NULL) {
            child(p, sizeof p, ptr, subs[i]);
            if (!check(v, p, depth + 1, r))
                return 0;
        }
    return 1;
}

int st_schema_check(const json_t *schema, char *pointer, size_t pointer_len, char *msg,
                    size_t msg_len)
{
    report_t r = {pointer, pointer_len, msg, msg_len};
    return check(schema, "", 0, &r);
}

static int has_type(const json_t *value, const char *type)
{
    if (strcmp(type, "object") == 0) return json_is_object(value);
    if (strcmp(type, "array") == 0) return json_is_array(value);
    if (strcmp(type, "string") == 0) return json_is_string(value);
    if (strcmp(type, "number") == 0) return json_is_number(value);
    if (strcmp(type, "boolean") == 0) return json_is_boolean(value);
    if (strcmp(type, "null") == 0) return json_is_null(value);
    if (strcmp(type, "integer") == 0)
        return json_is_integer(value) ||
               (json_is_real(value) && floor(json_real_value(value)) == json_real_value(value));
    return 0;
}

/* Counts UTF-8 code points. */
static size_t utf8_length(const char *s, size_t bytes)
{
    size_t n = 0;
    for (size_t i = 0; i < bytes; i++)
        n += ((unsigned char)s[i] & 0xc0) != 0x80;
    return n;
}

static int validate(const json_t *s, const json_t *value, const char *ptr, int depth, report_t *r)
{
    char p[512];
    if (json_is_false(s))
        return fail(r, ptr, "no value is allowed here");
    if (!json_is_object(s) || depth > ST_SCHEMA_MAX_DEPTH)
        return 1;
    const json_t *v = json_object_get(s, "type");
    if (v != NULL) {
        int ok = 0;
        if (json_is_string(v)) {
            ok = has_type(value, json_string_value(v));
        } else {
            size_t i;
            json_t *t;
            json_array_foreach(v, i, t) ok |= json_is_string(t) && has_type(value, json_string_value(t));
        }
        if (!ok) {
            char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            fail(r, ptr, "must be of type %s", want ? want : "?");
            free(want);
            return 0;
        }
    }
    if ((v = json_object_get(s, "const")) != NULL && !json_equal(v, value))
        return fail(r, ptr, "must equal the schema's const value");
    if ((v = json_object_get(s, "enum")) != NULL) {
        size_t i;
        json_t *e;
        int ok = 0;
        json_array_foreach(v, i, e) ok |= json_equal(e, value);
        if (!ok) {
            char *list = json_dumps(v, JSON_COMPACT);
            fail(r, ptr, "must be one of %.200s", list ? list : "the enum");
            free(list);
            return 0;
        }
    }
    if (json_is_number(value)) {
        double x = json_number_value(value);
        if ((v = json_object_get(s, "minimum")) != NULL && json_is_number(v) && x < json_number_value(v))
            return fail(r, ptr, "must be at least %g", json_number_value(v));
        if ((v = json_object_get(s, "maximum")) != NULL && json_is_number(v) && x > json_number_value(v))
            return fail(r, ptr, "must be at most %g", json_number_value(v));
    }
    if (json_is_string(value)) {
        size_t len = utf8_length(json_string_value(value), json_string_length(value));
        if ((v = json_object_get(s, "minLength")) != NULL && is_count(v) && len < (size_t)json_integer_value(v))
            return fail(r, ptr, "must be at least %lld characters long", (long long)json_integer_value(v));
        if ((v = json_object_get(s, "maxLength")) != NULL && is_count(v) && len > (size_t)json_integer_value(v))
            return fail(r, ptr, "must be at most %lld characters long", (long long)json_integer_value(v));
    }
    if (json_is_array(value)) {
        size_t n = json_array_size(value);
        if ((v = json_object_get(s, "minItems")) != NULL && is_count(v) && n < (size_t)json_integer_value(v))
            return fail(r, ptr, "must have at least %lld items", (long long)json_integer_value(v));
        if ((v = json_object_get(s, "maxItems")) != NULL && is_count(v) && n > (size_t)json_integer_value(v))
            return fail(r, ptr, "must have at most %lld items", (long long)json_integer_value(v));
        if ((v = json_object_get(s, "items")) != NULL) {
            size_t i;
            json_t *item;
            json_array_foreach(value, i, item) {
                child_index(p, sizeof p, ptr, i);
                if (!validate(v, item, p, depth + 1, r))
                    return 0;
            }
        }
    }
    if (json_is_object(value)) {
        size_t i;
        json_t *name;
        json_array_foreach(json_object_get(s, "required"), i, name) {
            if (json_is_string(name) && json_object_get(value, json_string_value(name)) == NULL) {
                child(p, sizeof p, ptr, json_string_value(name));
                return fail(r, p, "is required");
            }
        }
        const json_t *props = json_object_get(s, "properties");
        const json_t *extra = json_object_get(s, "additionalProperties");
        const char *key;
        json_t *item;
        json_object_foreach((json_t *)value, key, item) {
            const json_t *sub = json_object_get(props, key);
            child(p, sizeof p, ptr, key);
            if (sub != NULL) {
                if (!validate(sub, item, p, depth + 1, r))
                    return 0;
            } else if (json_is_false(extra)) {
                return fail(r, p, "is not an allowed property");
            } else if (json_is_object(extra) && !validate(extra, item, p, depth + 1, r)) {
                return 0;
            }
        }
    }
    return 1;
}

int st_schema_validate(const json_t *schema, const json_t *value, const char *base,
                       char *pointer, size_t pointer_len, char *msg, size_t msg_len)
{
    report_t r = {pointer, pointer_len, msg, msg_len};
    return validate(schema, value, base ? base : "", 0, &r);
}
