/*
 * test_request - idempotency keys (libs/common request.c) against the real server: a
 * request id is claimed once per (scope, owner, name), so the same message id on two
 * instances or two signal names is two requests (issue 16: one scope for all
 * instances); a key migrated from before 0012 (no signal name) still covers every name
 * of its instance; a repeat reports the instance the first claim recorded. Everything
 * runs in one transaction that is rolled back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "st_test.h"
#include "strand/pg.h"
#include "strand/request.h"
#include "strand/schema.h"
#include "strand/util.h"

static PGconn *conn;

/* 1 fresh, 0 repeat, -1 error; `prior` gets the earlier claim's instance. */
static int claim(const char *scope, const char *owner, const char *name, const char *rid,
                 const char *instance, char *prior)
{
    int fresh = -1;
    st_errbuf_t eb;
    if (st_request_claim_tx(conn, scope, owner, name, rid, instance, &fresh, prior, &eb) != ST_OK) {
        fprintf(stderr, "claim %s/%s/%s/%s: %s\n", scope, owner, name, rid, eb.msg);
        return -1;
    }
    return fresh;
}

static void test_scopes(void)
{
    st_errbuf_t eb;
    CU_ASSERT_EQUAL_FATAL(st_pg_connect(getenv("STRAND_PG_DSN"), "test_request", &conn, &eb), ST_OK);
    CU_ASSERT_EQUAL_FATAL(st_schema_migrate(conn, &eb), ST_OK);
    CU_ASSERT_EQUAL_FATAL(st_pg_begin(conn, &eb), ST_OK);
    char a[37], b[37], rid[64], prior[37];
    st_uuid_new(a);
    st_uuid_new(b);
    snprintf(rid, sizeof rid, "msg-%s", a);
    /* a message id per (instance, signal name) */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, a, "go", rid, a, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, a, "go", rid, a, prior), 0);
    CU_ASSERT_STRING_EQUAL(prior, a);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, b, "go", rid, b, NULL), 1);       /* another instance */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, a, "other", rid, a, NULL), 1);    /* another name */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_CANCEL, a, "", rid, a, NULL), 1);         /* another scope */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_CANCEL, a, "", rid, a, NULL), 0);
    /* an rpc per (instance, rpc); a trigger per (definition, reference) */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_RPC, a, "verify", rid, a, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_RPC, b, "verify", rid, b, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_TRIGGER, "order", a, rid, a, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_TRIGGER, "order", b, rid, b, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_TRIGGER, "order", a, rid, NULL, prior), 0);
    CU_ASSERT_STRING_EQUAL(prior, a);
    int found = -1;
    char instance[37];
    CU_ASSERT_EQUAL(st_request_find(conn, ST_REQUEST_TRIGGER, "order", b, rid, &found, instance, &eb), ST_OK);
    CU_ASSERT_EQUAL(found, 1);
    CU_ASSERT_STRING_EQUAL(instance, b);
    CU_ASSERT_EQUAL(st_request_find(conn, ST_REQUEST_TRIGGER, "invoice", b, rid, &found, instance, &eb), ST_OK);
    CU_ASSERT_EQUAL(found, 0);
    /* a signal key from before migration 0012 (scope_name '') covers every name */
    char old_rid[64];
    snprintf(old_rid, sizeof old_rid, "old-%s", b);
    const char *params[] = {b, old_rid, b};
    CU_ASSERT_EQUAL(st_pg_exec(conn, "INSERT INTO strand.requests (scope, scope_owner, scope_name, request_id,"
                                     " instance_id) VALUES ('signal', $1, '', $2, $3::uuid)",
                               3, params, NULL, &eb), ST_OK);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, b, "go", old_rid, b, prior), 0);
    CU_ASSERT_STRING_EQUAL(prior, b);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_SIGNAL, a, "go", old_rid, a, NULL), 1);  /* not another instance */
    /* starts stay one per request id */
    CU_ASSERT_EQUAL(claim(ST_REQUEST_START, "", "", rid, a, NULL), 1);
    CU_ASSERT_EQUAL(claim(ST_REQUEST_START, "", "", rid, b, prior), 0);
    CU_ASSERT_STRING_EQUAL(prior, a);
    st_pg_rollback(conn);
    PQfinish(conn);
}

int main(void)
{
    if (!it_init("test_request"))
        return 1;
    static const it_case_t cases[] = {
        {"request ids are scoped per instance, name, reference", test_scopes},
    };
    return it_run_suite("request", cases, (int)(sizeof cases / sizeof cases[0]));
}
