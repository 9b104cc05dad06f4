/* test_defn.c - compiling flow definitions: every construct accepted, every documented
 * kind of error reported with its JSON pointer, all problems at once. */
#include <string.h>

#include "st_test.h"
#include "strand/engine.h"

static json_t *load(const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (doc == NULL)
        fprintf(stderr, "bad test JSON: %s\n", jerr.text);
    return doc;
}

/* Compiles `text`; returns the problems array (caller decrefs) or NULL if valid. */
static json_t *problems_of(const char *text)
{
    json_t *doc = load(text);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    st_err_t err = st_defn_compile(doc, &defn, &problems);
    json_decref(doc);
    if (err == ST_OK) {
        CU_ASSERT_PTR_NULL(problems);
        st_defn_free(defn);
        return NULL;
    }
    CU_ASSERT_EQUAL(err, ST_ERR_INVALID);
    CU_ASSERT_PTR_NULL(defn);
    return problems;
}

static int has_problem(const json_t *problems, const char *pointer, const char *fragment)
{
    size_t i;
    json_t *p;
    json_array_foreach(problems, i, p)
        if (strcmp(json_string_value(json_object_get(p, "pointer")), pointer) == 0 &&
            strstr(json_string_value(json_object_get(p, "message")), fragment))
            return 1;
    char *text = json_dumps(problems, JSON_INDENT(1));
    fprintf(stderr, "\nno problem at %s with '%s' in %s\n", pointer, fragment, text);
    free(text);
    return 0;
}

#define FLOW(steps) "{\"kind\":\"flow\",\"name\":\"t\",\"version\":1,\"steps\":" steps "}"

static void test_every_construct_compiles(void)
{
    const char *doc = FLOW("["
        "{\"id\":\"s\",\"type\":\"set\",\"values\":{\"a\":\"1\",\"nested\":{\"b\":\"input.x\"}}},"
        "{\"id\":\"i\",\"type\":\"if\",\"condition\":\"state.a > 0\",\"then\":[{\"id\":\"t1\",\"type\":\"set\",\"values\":{\"c\":\"2\"}}],"
        " \"else\":[{\"id\":\"e1\",\"type\":\"set\",\"values\":{\"c\":\"3\"}}]},"
        "{\"id\":\"sw\",\"type\":\"switch\",\"cases\":[{\"when\":\"state.c == 2\",\"steps\":[{\"id\":\"c2\",\"type\":\"set\",\"values\":{\"d\":\"1\"}}]}],"
        " \"default\":[{\"id\":\"cd\",\"type\":\"set\",\"values\":{\"d\":\"0\"}}]},"
        "{\"id\":\"w\",\"type\":\"while\",\"condition\":\"state.d < 3\",\"max_iterations\":10,\"body\":[{\"id\":\"inc\",\"type\":\"set\",\"values\":{\"d\":\"state.d + 1\"}}]},"
        "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"2\",\"body\":[{\"id\":\"rb\",\"type\":\"set\",\"values\":{\"e\":\"1\"}}]},"
        "{\"id\":\"tk\",\"type\":\"task\",\"name\":\"Approve\",\"roles\":[\"approver\"],\"payload\":{\"x\":\"input.x\"},\"deadline\":\"'2d'\",\"result\":\"approval\"},"
        "{\"id\":\"ws\",\"type\":\"wait_signal\",\"name\":\"go\",\"timeout\":\"'1h'\",\"on_timeout\":[{\"id\":\"to\",\"type\":\"fail\",\"error\":\"'late'\"}]},"
        "{\"id\":\"tm\",\"type\":\"timer\",\"delay\":\"'5m'\"},"
        "{\"id\":\"cl\",\"type\":\"call\",\"transport\":\"http\",\"request\":{\"url\":\"'http://w/x'\"},\"timeout\":1000,"
        " \"retry\":{\"max_attempts\":3,\"backoff_ms\":100,\"multiplier\":2},\"on_failure\":[{\"id\":\"cf\",\"type\":\"set\",\"values\":{\"f\":\"true\"}}]},"
        "{\"id\":\"ck\",\"type\":\"call\",\"transport\":\"kafka\",\"request\":{\"order\":\"input.x\"},\"consumers\":[\"billing\"]},"
        "{\"id\":\"sub\",\"type\":\"subworkflow\",\"definition\":\"child\",\"version\":2,\"input\":{\"n\":\"1\"}},"
        "{\"id\":\"par\",\"type\":\"parallel\",\"join\":\"any\",\"branches\":[[{\"id\":\"p1\",\"type\":\"set\",\"values\":{\"g\":\"1\"}}],"
        " [{\"id\":\"p2\",\"type\":\"set\",\"values\":{\"h\":\"1\"}}]]},"
        "{\"id\":\"done\",\"type\":\"complete\",\"output\":{\"d\":\"state.d\"}}]");
    CU_ASSERT_PTR_NULL(problems_of(doc));
    json_t *d = load(doc);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    CU_ASSERT_EQUAL_FATAL(st_defn_compile(d, &defn, &problems), ST_OK);
    CU_ASSERT_STRING_EQUAL(st_defn_name(defn), "t");
    CU_ASSERT_EQUAL(st_defn_version(defn), 1);
    CU_ASSERT_STRING_EQUAL(st_defn_kind(defn), "flow");
    /* The canonical form compiles again to the same thing (what services store). */
    st_defn_t *again = NULL;
    CU_ASSERT_EQUAL(st_defn_compile(st_defn_canonical(defn), &again, &problems), ST_OK);
    CU_ASSERT_TRUE(json_equal(st_defn_canonical(again), st_defn_canonical(defn)));
    st_defn_free(again);
    st_defn_free(defn);
    json_decref(d);
}

static void test_each_error_has_a_pointer(void)
{
    json_t *p = problems_of(FLOW("["
        "{\"id\":\"a\",\"type\":\"no-such\"},"                                        /* 0 */
        "{\"type\":\"set\",\"values\":{\"x\":\"1\"}},"                                 /* 1 */
        "{\"id\":\"a\",\"type\":\"set\",\"values\":{\"x\":\"1 +\"}},"                  /* 2 */
        "{\"id\":\"ws\",\"type\":\"wait_signal\",\"name\":\"go\",\"timeout\":1000},"   /* 3 */
        "{\"id\":\"par\",\"type\":\"parallel\",\"branches\":[[{\"id\":\"p\",\"type\":\"set\",\"values\":{\"y\":\"1\"}}]]}," /* 4 */
        "{\"id\":\"w\",\"type\":\"while\",\"condition\":\"true\",\"body\":[{\"id\":\"wb\",\"type\":\"set\",\"values\":{\"z\":\"1\"}}]}," /* 5 */
        "{\"id\":\"c\",\"type\":\"call\",\"transport\":\"smtp\",\"request\":{},\"retry\":{\"max_attempts\":0}}," /* 6 */
        "{\"id\":\"t\",\"type\":\"timer\"},"                                            /* 7 */
        "{\"id\":\"i\",\"type\":\"if\",\"condition\":\"x ==\"},"                        /* 8 */
        "{\"id\":\"end\",\"type\":\"complete\"},"                                       /* 9 */
        "{\"id\":\"after\",\"type\":\"set\",\"values\":{\"q\":\"1\"}}]"));              /* 10 */
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_TRUE(has_problem(p, "/steps/0/type", "unknown step type"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/1/id", "needs a non-empty string id"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/2/id", "duplicate step id"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/2/values/x", "bad expression"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/3/on_timeout", "timeout needs an on_timeout path"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/4/branches", "at least two branches"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/5/max_iterations", "missing max_iterations"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/6/transport", "http or kafka"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/6/retry/max_attempts", "integer from 1"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/7", "exactly one of delay"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/8/condition", "bad expression"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/8/then", "missing steps"));
    CU_ASSERT_TRUE(has_problem(p, "/steps/10", "unreachable"));
    json_decref(p);
}

static void test_document_level_errors(void)
{
    json_t *p = problems_of("{\"kind\":\"flow\",\"name\":\"\",\"version\":0,\"steps\":[],\"extra\":1}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_TRUE(has_problem(p, "/name", "non-empty string"));
    CU_ASSERT_TRUE(has_problem(p, "/version", "positive integer"));
    CU_ASSERT_TRUE(has_problem(p, "/steps", "non-empty array"));
    CU_ASSERT_TRUE(has_problem(p, "/extra", "unknown field"));
    json_decref(p);
    p = problems_of("{\"name\":\"x\",\"version\":1}");
    CU_ASSERT_TRUE(has_problem(p, "/kind", "missing kind"));
    json_decref(p);
    p = problems_of("{\"kind\":\"workflow\"}");
    CU_ASSERT_TRUE(has_problem(p, "/kind", "unknown kind"));
    json_decref(p);
    p = problems_of("{\"kind\":\"process\"}");
    CU_ASSERT_TRUE(has_problem(p, "/name", "non-empty string"));
    CU_ASSERT_TRUE(has_problem(p, "/states", "non-empty array"));
    json_decref(p);
    p = problems_of("[1, 2]");
    CU_ASSERT_TRUE(has_problem(p, "", "must be a JSON object"));
    json_decref(p);
}

ST_TEST_MAIN("defn", ST_TEST(test_every_construct_compiles), ST_TEST(test_each_error_has_a_pointer),
             ST_TEST(test_document_level_errors))
