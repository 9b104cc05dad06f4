/* test_expr.c - the expression language: values, operators, paths, null handling,
 * functions, plugins, bounds and clear errors. */
#include <string.h>

#include "st_test.h"
#include "strand/engine.h"
#include "strand/expr.h"

static json_t *scope;

/* Evaluates `text` and compares with the JSON `want` (as text). */
static void expect(const char *text, const char *want)
{
    json_t *value = NULL;
    st_errbuf_t eb;
    st_err_t err = st_expr_eval_text(text, scope, &value, &eb);
    if (err != ST_OK)
        fprintf(stderr, "\n%s -> error %s\n", text, eb.msg);
    CU_ASSERT_EQUAL_FATAL(err, ST_OK);
    json_error_t jerr;
    json_t *expected = json_loads(want, JSON_DECODE_ANY, &jerr);
    int same = json_equal(value, expected) ||
               (json_is_number(value) && json_is_number(expected) &&
                json_number_value(value) == json_number_value(expected));
    if (!same) {
        char *got = json_dumps(value, JSON_ENCODE_ANY);
        fprintf(stderr, "\n%s -> %s, want %s\n", text, got, want);
        free(got);
    }
    CU_ASSERT_TRUE(same);
    json_decref(value);
    json_decref(expected);
}

static void expect_error(const char *text, st_err_t want, const char *fragment)
{
    json_t *value = NULL;
    st_errbuf_t eb;
    st_err_t err = st_expr_eval_text(text, scope, &value, &eb);
    CU_ASSERT_EQUAL(err, want);
    CU_ASSERT_PTR_NULL(value);
    if (fragment && !strstr(eb.msg, fragment))
        fprintf(stderr, "\n%s -> '%s' lacks '%s'\n", text, eb.msg, fragment);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, fragment));
    json_decref(value);
}

static void test_literals_and_arithmetic(void)
{
    expect("1 + 2 * 3", "7");
    expect("(1 + 2) * 3", "9");
    expect("7 / 2", "3.5");
    expect("8 / 2", "4");
    expect("7 % 3", "1");
    expect("-input.n + 1", "-41");
    expect("1.5 * 2", "3.0");
    /* Found by fuzz_expr: integer overflow falls back to floating point, no UB. */
    expect("999999999999999 * 999999999999999 > 0", "true");
    expect("999999999999999 * 999999999999999 * 999999", "9.99998999999998e35");
    expect("-9223372036854775807 - 10 < 0", "true");
    expect("'a' + 'b' + 1", "\"ab1\"");
    expect("\"double\" + ' quoted'", "\"double quoted\"");
    expect("[1, 'x', null]", "[1, \"x\", null]");
    expect("{a: 1, 'b c': input.name}", "{\"a\": 1, \"b c\": \"ada\"}");
}

static void test_comparison_and_logic(void)
{
    expect("input.n > 40 && input.n < 50", "true");
    expect("input.n == 42.0", "true");
    expect("'abc' < 'abd'", "true");
    expect("!input.flag || false", "true");
    expect("input.n >= 43 ? 'big' : 'small'", "\"small\"");
    expect("null == null", "true");
    expect("[1,2] == [1,2]", "true");
    expect("state.missing ?? 'default'", "\"default\"");
    expect("false && (1 / 0)", "false");   /* short-circuit: no division */
}

static void test_paths_and_null_handling(void)
{
    expect("input.name", "\"ada\"");
    expect("input.address.city", "\"Sofia\"");
    expect("input.address.zip", "null");
    expect("input.nothing.deeper", "null");
    expect("input.items[1]", "20");
    expect("input.items[-1]", "30");
    expect("input.items[9]", "null");
    expect("input['name']", "\"ada\"");
}

static void test_functions(void)
{
    expect("len(input.items)", "3");
    expect("len(input.name)", "3");
    expect("upper(input.name)", "\"ADA\"");
    expect("lower('ABC')", "\"abc\"");
    expect("coalesce(null, state.missing, 5)", "5");
    expect("contains(input.items, 20)", "true");
    expect("contains('hello', 'ell')", "true");
    expect("number('12')", "12");
    expect("string(12)", "\"12\"");
    expect("keys({b: 1})", "[\"b\"]");
    expect("max(1, 7, 3)", "7");
    expect("min(4, 2)", "2");
    expect("duration('5m')", "300000");
    expect("duration('2h') + duration('30s')", "7230000");
}

static json_t *plugin_twice(json_t *const *args, int nargs, st_errbuf_t *eb)
{
    if (!json_is_integer(args[0])) {
        st_err_set(eb, ST_ERR_INVALID, "twice() needs an integer");
        return NULL;
    }
    return json_integer(json_integer_value(args[0]) * 2);
}

static void test_plugins(void)
{
    CU_ASSERT_EQUAL(st_expr_register_fn("twice", 1, 1, plugin_twice), ST_OK);
    expect("twice(input.n)", "84");
    expect_error("twice('x')", ST_ERR_INVALID, "needs an integer");
    CU_ASSERT_EQUAL(st_expr_register_fn("len", 1, 1, plugin_twice), ST_ERR_CONFLICT);
    CU_ASSERT_EQUAL(st_expr_register_fn("bad", 2, 1, plugin_twice), ST_ERR_INVALID);
}

static void test_errors(void)
{
    expect_error("1 +", ST_ERR_INVALID, "column");
    expect_error("'open", ST_ERR_INVALID, "unterminated");
    expect_error("1 / 0", ST_ERR_INVALID, "division by zero");
    expect_error("nosuch.x", ST_ERR_INVALID, "unknown name");
    expect_error("nosuch(1)", ST_ERR_INVALID, "unknown function");
    expect_error("len(1, 2)", ST_ERR_INVALID, "number of arguments");
    expect_error("'a' < 1", ST_ERR_INVALID, "cannot order");
    expect_error("[1] - 1", ST_ERR_INVALID, "arithmetic");
    expect_error("input.name.x", ST_ERR_INVALID, "not an object");
    expect_error("1 2", ST_ERR_INVALID, "after the expression");
    expect_error("#", ST_ERR_INVALID, "unexpected character");
}

static void test_bounds(void)
{
    char deep[400];
    size_t n = 0;
    for (int i = 0; i < 150; i++)
        deep[n++] = '(';
    deep[n++] = '1';
    for (int i = 0; i < 150; i++)
        deep[n++] = ')';
    deep[n] = '\0';
    expect_error(deep, ST_ERR_INVALID, "nested too deeply");
    /* A long chain exceeds the evaluation bounds. */
    static char chain[20000];
    chain[0] = '\0';
    for (int i = 0; i < 1000; i++)
        strcat(chain, i ? " + 1" : "1");
    json_t *value = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_expr_eval_text(chain, scope, &value, &eb), ST_ERR_LIMIT);
    CU_ASSERT_PTR_NULL(value);
    /* Strings are capped. */
    char *big = malloc(40001);
    memset(big, 'x', 40000);
    big[40000] = '\0';
    json_t *saved = scope;
    scope = json_pack("{s:{s:s}}", "input", "s", big);
    CU_ASSERT_EQUAL(st_expr_eval_text("input.s + input.s", scope, &value, &eb), ST_ERR_LIMIT);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "string longer than 65536 bytes"));
    CU_ASSERT_EQUAL(st_expr_eval_text("len(input.s + 'y')", scope, &value, &eb), ST_OK);
    CU_ASSERT_EQUAL(json_integer_value(value), 40001);
    json_decref(value);
    json_decref(scope);
    free(big);
    scope = saved;
}

static void test_truthiness(void)
{
    json_t *values[] = {json_false(), json_null(), json_integer(0), json_string(""), json_array(),
                        json_object()};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        CU_ASSERT_FALSE(st_expr_truthy(values[i]));
        json_decref(values[i]);
    }
    json_t *yes = json_string("x");
    CU_ASSERT_TRUE(st_expr_truthy(yes));
    json_decref(yes);
}

/* A plugin that fails with a message that merely mentions a limit: the code decides. */
static json_t *fn_says_limit(json_t *const *a, int n, st_errbuf_t *eb)
{
    st_err_set(eb, ST_ERR_INVALID, "the value is over the customer's credit limit (bounds)");
    return NULL;
}

/* A plugin that builds a string past the string limit. */
static json_t *fn_huge(json_t *const *a, int n, st_errbuf_t *eb)
{
    size_t len = 200000;
    char *s = malloc(len + 1);
    memset(s, 'h', len);
    s[len] = '\0';
    json_t *r = json_string(s);
    free(s);
    return r;
}

/* Issue 21: every function and constructor that builds strings or arrays is bounded,
 * evaluation is charged to a work budget, and ST_ERR_LIMIT is decided by code. */
static void test_limits(void)
{
    st_errbuf_t eb;
    json_t *value = NULL;
    /* string() of a large value: refused before the text is built (was a 512 KB string). */
    json_t *big = json_array();
    for (int i = 0; i < 20000; i++)
        json_array_append_new(big, json_string("abcdefghijklmnopqrstuvwxyz"));
    json_t *sc = json_pack("{s:{s:o}}", "state", "x", big);
    CU_ASSERT_EQUAL(st_expr_eval_text("string(state.x)", sc, &value, &eb), ST_ERR_LIMIT);
    CU_ASSERT_PTR_NULL(value);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "string()"));
    CU_ASSERT_EQUAL(st_expr_eval_text("'' + state.x", sc, &value, &eb), ST_ERR_LIMIT);
    /* [x,x,...]: an array of eight copies of a 500 KB value is 4 MB as text. */
    CU_ASSERT_EQUAL(st_expr_eval_text("[state.x, state.x, state.x, state.x, state.x, state.x,"
                                      " state.x, state.x]", sc, &value, &eb), ST_ERR_LIMIT);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_EXPR_MAX_VALUE_BYTES"));
    CU_ASSERT_EQUAL(st_expr_eval_text("{a: state.x, b: state.x, c: state.x}", sc, &value, &eb),
                    ST_ERR_LIMIT);
    CU_ASSERT_EQUAL(st_expr_eval_text("[state.x]", sc, &value, &eb), ST_OK);   /* one copy fits */
    json_decref(value);
    value = NULL;
    /* A function that hands back its argument built nothing: coalesce() of a long string. */
    json_t *longs = json_array();
    json_t *text = json_string_nocheck("");
    char *buf = calloc(100001, 1);
    memset(buf, 'z', 100000);
    json_string_set(text, buf);
    free(buf);
    json_array_append_new(longs, text);
    json_object_set_new(json_object_get(sc, "state"), "long", longs);
    CU_ASSERT_EQUAL(st_expr_eval_text("coalesce(null, state.long[0])", sc, &value, &eb), ST_OK);
    CU_ASSERT_EQUAL(json_string_length(value), 100000);
    json_decref(value);
    value = NULL;
    CU_ASSERT_EQUAL(st_expr_eval_text("upper(state.long[0])", sc, &value, &eb), ST_ERR_LIMIT);
    json_decref(sc);
    /* A plugin's string is checked as well; a plugin's own failure keeps its code. */
    CU_ASSERT_EQUAL(st_expr_register_fn("huge", 0, 0, fn_huge), ST_OK);
    CU_ASSERT_EQUAL(st_expr_register_fn("says_limit", 0, 0, fn_says_limit), ST_OK);
    CU_ASSERT_EQUAL(st_expr_eval_text("huge()", scope, &value, &eb), ST_ERR_LIMIT);
    CU_ASSERT_EQUAL(st_expr_eval_text("says_limit()", scope, &value, &eb), ST_ERR_INVALID);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "credit limit"));
    /* The work budget: a caller's counter runs out mid-expression. */
    st_expr_t *e = NULL;
    CU_ASSERT_EQUAL_FATAL(st_expr_parse("1 + 2 + 3 + 4 + 5 + 6 + 7 + 8", &e, &eb), ST_OK);
    long long work = 100;
    CU_ASSERT_EQUAL(st_expr_eval_counted(e, scope, &value, &work, &eb), ST_OK);
    CU_ASSERT_EQUAL(work, 100 - 15);
    json_decref(value);
    value = NULL;
    work = 5;
    CU_ASSERT_EQUAL(st_expr_eval_counted(e, scope, &value, &work, &eb), ST_ERR_LIMIT);
    CU_ASSERT_TRUE(work < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "STRAND_RUN_MAX_WORK"));
    st_expr_free(e);
    /* The string limit is a setting. */
    st_engine_limits_t lim, saved = *st_engine_limits();
    st_engine_limits_default(&lim);
    lim.max_string = 64;
    CU_ASSERT_EQUAL(st_engine_set_limits(&lim, &eb), ST_OK);
    CU_ASSERT_EQUAL(st_expr_eval_text("upper(input.name) + '0123456789012345678901234567890123456789"
                                      "0123456789012345678901234567890123456789'", scope, &value, &eb),
                    ST_ERR_LIMIT);
    lim.max_string = 1;
    CU_ASSERT_EQUAL(st_engine_set_limits(&lim, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, "max_string"));
    CU_ASSERT_EQUAL(st_engine_set_limits(&saved, &eb), ST_OK);
}

static void setup(void)
{
    json_error_t jerr;
    scope = json_loads("{\"input\": {\"name\": \"ada\", \"n\": 42, \"flag\": false,"
                       " \"items\": [10, 20, 30], \"address\": {\"city\": \"Sofia\"}},"
                       " \"state\": {}}", 0, &jerr);
}

static void test_all(void)
{
    setup();
    test_literals_and_arithmetic();
    test_comparison_and_logic();
    test_paths_and_null_handling();
    test_functions();
    test_plugins();
    test_errors();
    test_bounds();
    test_truthiness();
    test_limits();
    json_decref(scope);
}

ST_TEST_MAIN("expr", ST_TEST(test_all))
