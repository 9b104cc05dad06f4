/* test_auth.c - bearer tokens to principals: loading, lookup, roles, bad files. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "st_test.h"
#include "strand/auth.h"

static char *write_file(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/strand-auth-test-XXXXXX");
    int fd = mkstemp(path);
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? path : NULL;
}

static void test_tokens_map_to_principals(void)
{
    /* sha256("ops-token-0123456789") */
    const char *doc =
        "{\"tokens\":[{\"token\":\"alice-token-0123456789\",\"principal\":\"alice\","
        "\"roles\":[\"approver\"]},"
        "{\"token_sha256\":\"d51a4891ede9d7c8a89088e5f255d5852a7154ab4b92ad562614e8d0824bfc2b\","
        "\"principal\":\"hashed\",\"roles\":[\"admin\"]}]}";
    char *path = write_file(doc);
    st_auth_t *auth = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_auth_load(path, &auth, &eb), ST_OK);
    CU_ASSERT_TRUE(st_auth_enabled(auth));
    st_principal_t who;
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "alice-token-0123456789", &who), ST_OK);
    CU_ASSERT_STRING_EQUAL(who.name, "alice");
    CU_ASSERT_TRUE(st_principal_has_role(&who, "approver"));
    CU_ASSERT_FALSE(st_principal_has_role(&who, "admin"));
    json_t *roles = json_pack("[s, s]", "clerk", "approver");
    CU_ASSERT_TRUE(st_principal_has_any_role(&who, roles));
    json_decref(roles);
    roles = json_pack("[s]", "clerk");
    CU_ASSERT_FALSE(st_principal_has_any_role(&who, roles));
    json_decref(roles);
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "ops-token-0123456789", &who), ST_OK);
    CU_ASSERT_STRING_EQUAL(who.name, "hashed");
    CU_ASSERT_TRUE(st_principal_has_role(&who, "anything"));   /* admin */
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "alice-token-012345678", &who), ST_ERR_UNAUTHORIZED);
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, NULL, &who), ST_ERR_UNAUTHORIZED);
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "", &who), ST_ERR_UNAUTHORIZED);
    st_auth_free(auth);
    unlink(path);
}

static void test_off_without_file(void)
{
    st_auth_t *auth = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_auth_load("", &auth, &eb), ST_OK);
    CU_ASSERT_FALSE(st_auth_enabled(auth));
    st_principal_t who;
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, NULL, &who), ST_OK);
    CU_ASSERT_TRUE(st_principal_has_role(&who, "admin"));
    st_auth_free(auth);
}

static void test_bearer_header(void)
{
    CU_ASSERT_STRING_EQUAL(st_auth_bearer("Bearer abc"), "abc");
    CU_ASSERT_STRING_EQUAL(st_auth_bearer("bearer   abc"), "abc");
    CU_ASSERT_PTR_NULL(st_auth_bearer("Basic abc"));
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer "));
    CU_ASSERT_PTR_NULL(st_auth_bearer(NULL));
    /* Control characters, spaces and non-ASCII bytes inside the token: refused. */
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer abc\x01junk"));
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer abc\tjunk"));
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer abc junk"));
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer abc\x7f"));
    CU_ASSERT_PTR_NULL(st_auth_bearer("Bearer abc\xc3\xa9"));
}

static void expect_bad(const char *doc, const char *fragment)
{
    char *path = write_file(doc);
    st_auth_t *auth = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL(st_auth_load(path, &auth, &eb), ST_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(eb.msg, fragment));
    CU_ASSERT_PTR_NULL(auth);
    unlink(path);
}

static void test_bad_files(void)
{
    expect_bad("{", "STRAND_AUTH_FILE");
    expect_bad("{\"tokens\":[]}", "non-empty array");
    expect_bad("{\"tokens\":[{\"token\":\"short\",\"principal\":\"a\",\"roles\":[]}]}", "16 characters");
    expect_bad("{\"tokens\":[{\"principal\":\"a\",\"roles\":[]}]}", "exactly one of");
    expect_bad("{\"tokens\":[{\"token\":\"0123456789abcdef\",\"roles\":[]}]}", "/tokens/0/principal");
    expect_bad("{\"tokens\":[{\"token_sha256\":\"zz\",\"principal\":\"a\",\"roles\":[]}]}", "64 hex");
    expect_bad("{\"tokens\":[{\"token\":\"0123456789abcdef\",\"principal\":\"a\",\"roles\":[1]}]}",
               "/tokens/0/roles/0");
}

/* Roles grant permissions: built-in, defined in "roles", limited, and task roles. */
static void test_roles_grant_permissions(void)
{
    const char *doc =
        "{\"roles\":{\"bot\":[\"instances:start@orders\",\"acks:send:billing\",\"tasks:*\"],"
        "           \"boss\":[\"admin\"], \"none\":[]},"
        " \"tokens\":[{\"token\":\"bot-token-0123456789\",\"principal\":\"bot\",\"roles\":[\"bot\"]},"
        "  {\"token\":\"op-token-0123456789\",\"principal\":\"op\",\"roles\":[\"operator\"]},"
        "  {\"token\":\"view-token-0123456789\",\"principal\":\"v\",\"roles\":[\"viewer\",\"none\"]},"
        "  {\"token\":\"task-token-0123456789\",\"principal\":\"t\",\"roles\":[\"approver\"]},"
        "  {\"token\":\"boss-token-0123456789\",\"principal\":\"b\",\"roles\":[\"boss\"]},"
        "  {\"token\":\"zero-token-0123456789\",\"principal\":\"z\",\"roles\":[]}]}";
    char *path = write_file(doc);
    st_auth_t *auth = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_auth_load(path, &auth, &eb), ST_OK);
    st_principal_t who;
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "bot-token-0123456789", &who), ST_OK);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_INSTANCES_START), ST_HOLDS_SOME);
    CU_ASSERT_TRUE(st_principal_may(&who, ST_PERM_INSTANCES_START, "orders", NULL));
    CU_ASSERT_FALSE(st_principal_may(&who, ST_PERM_INSTANCES_START, "billing", NULL));
    CU_ASSERT_FALSE(st_principal_may(&who, ST_PERM_INSTANCES_START, NULL, NULL));
    CU_ASSERT_TRUE(st_principal_may(&who, ST_PERM_ACKS_SEND, NULL, "billing"));
    CU_ASSERT_FALSE(st_principal_may(&who, ST_PERM_ACKS_SEND, NULL, "shipping"));
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_TASKS_ACT), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_INSTANCES_READ), ST_HOLDS_NONE);
    CU_ASSERT_FALSE(st_principal_has_role(&who, "admin"));
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "op-token-0123456789", &who), ST_OK);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_INSTANCES_TERMINATE), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_DEAD_LETTERS_OPERATE), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_TASKS_ACT), ST_HOLDS_NONE);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_DEFINITIONS_WRITE), ST_HOLDS_NONE);
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "view-token-0123456789", &who), ST_OK);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_DEAD_LETTERS_READ), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_INSTANCES_START), ST_HOLDS_NONE);
    /* an undefined role name is a task role */
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "task-token-0123456789", &who), ST_OK);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_TASKS_ACT), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_INSTANCES_READ), ST_HOLDS_ALL);
    CU_ASSERT_EQUAL(st_principal_holds(&who, ST_PERM_DEFINITIONS_READ), ST_HOLDS_NONE);
    /* a defined role granting admin is an admin, also for task roles */
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "boss-token-0123456789", &who), ST_OK);
    CU_ASSERT_TRUE(st_principal_has_role(&who, "approver"));
    CU_ASSERT_TRUE(st_principal_may(&who, ST_PERM_ACKS_SEND, NULL, "anyone"));
    CU_ASSERT_EQUAL(st_auth_authenticate(auth, "zero-token-0123456789", &who), ST_OK);
    for (int p = 0; p < ST_PERM_COUNT; p++)
        CU_ASSERT_EQUAL(st_principal_holds(&who, (st_perm_t)p), ST_HOLDS_NONE);
    CU_ASSERT_STRING_EQUAL(st_perm_name(ST_PERM_DEAD_LETTERS_OPERATE), "dead-letters:operate");
    st_auth_free(auth);
    unlink(path);
}

static void test_bad_roles(void)
{
    const char *tokens = "\"tokens\":[{\"token\":\"0123456789abcdef\",\"principal\":\"a\",\"roles\":[]}]";
    char doc[512];
    snprintf(doc, sizeof doc, "{\"roles\":[], %s}", tokens);
    expect_bad(doc, "\"roles\" must be an object");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":\"tasks:read\"}, %s}", tokens);
    expect_bad(doc, "/roles/x must be an array");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"tasks:reed\"]}, %s}", tokens);
    expect_bad(doc, "unknown permission \"tasks:reed\"");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"tasks:read\", 3]}, %s}", tokens);
    expect_bad(doc, "/roles/x/1 must be a string");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"dead-letters:read@orders\"]}, %s}", tokens);
    expect_bad(doc, "cannot be limited to a definition");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"admin@orders\"]}, %s}", tokens);
    expect_bad(doc, "cannot be limited");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"instances:start@\"]}, %s}", tokens);
    expect_bad(doc, "is not a permission");
    snprintf(doc, sizeof doc, "{\"roles\":{\"operator\":[\"admin\"]}, %s}", tokens);
    expect_bad(doc, "cannot be redefined");
    snprintf(doc, sizeof doc, "{\"roles\":{\"x\":[\"*\"]}, %s}", tokens);
    expect_bad(doc, "unknown permission");
}

/* A principal looked up by name (the executor's later check on an importer's behalf):
 * every token of that name counts, a name the file does not hold has nothing, and with
 * authentication off everything is allowed. */
static void test_principal_may_by_name(void)
{
    const char *doc =
        "{\"roles\":{\"a-starter\":[\"instances:start@A\"],\"b-starter\":[\"instances:start@B\"]},"
        "\"tokens\":[{\"token\":\"imp-one-0123456789\",\"principal\":\"imp\",\"roles\":[\"a-starter\"]},"
        "{\"token\":\"imp-two-0123456789\",\"principal\":\"imp\",\"roles\":[\"b-starter\"]},"
        "{\"token\":\"root-token-0123456789\",\"principal\":\"root\",\"roles\":[\"admin\"]}]}";
    char *path = write_file(doc);
    st_auth_t *auth = NULL;
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_auth_load(path, &auth, &eb), ST_OK);
    CU_ASSERT_TRUE(st_auth_principal_may(auth, "imp", ST_PERM_INSTANCES_START, "A"));
    CU_ASSERT_TRUE(st_auth_principal_may(auth, "imp", ST_PERM_INSTANCES_START, "B"));   /* 2nd token */
    CU_ASSERT_FALSE(st_auth_principal_may(auth, "imp", ST_PERM_INSTANCES_START, "C"));
    CU_ASSERT_FALSE(st_auth_principal_may(auth, "imp", ST_PERM_INSTANCES_OPERATE, "A"));
    CU_ASSERT_TRUE(st_auth_principal_may(auth, "root", ST_PERM_INSTANCES_START, "C"));
    CU_ASSERT_FALSE(st_auth_principal_may(auth, "gone", ST_PERM_INSTANCES_START, "A"));
    st_auth_free(auth);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(st_auth_load("", &auth, &eb), ST_OK);
    CU_ASSERT_TRUE(st_auth_principal_may(auth, "anyone", ST_PERM_INSTANCES_START, "A"));
    st_auth_free(auth);
}

ST_TEST_MAIN("auth", ST_TEST(test_tokens_map_to_principals), ST_TEST(test_off_without_file),
             ST_TEST(test_bearer_header), ST_TEST(test_bad_files), ST_TEST(test_roles_grant_permissions),
             ST_TEST(test_bad_roles), ST_TEST(test_principal_may_by_name))
