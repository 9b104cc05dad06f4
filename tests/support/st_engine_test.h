/*
 * st_engine_test.h - helpers shared by the engine's unit tests (test_interp,
 * test_process, test_engine_limits): parse JSON, compile a definition, and run one
 * event through the interpreter with the snapshot round trip the executor does.
 *
 * Header-only (static inline) so that each test program takes what it uses; include
 * it after st_test.h.
 */
#ifndef STRAND_ST_ENGINE_TEST_H
#define STRAND_ST_ENGINE_TEST_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_test.h"
#include "strand/engine.h"

/* Parses JSON test text; prints the parse error and stops the test if it is not JSON.
 * Returns a new reference (caller decrefs). */
static inline json_t *st_et_load(const char *text)
{
    json_error_t jerr;
    json_t *doc = json_loads(text, 0, &jerr);
    if (doc == NULL)
        fprintf(stderr, "\nbad test JSON: %s\n", jerr.text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    return doc;
}

/* Compiles a whole definition document (JSON text); prints the problems and stops the
 * test if it does not compile. Returns the definition (caller frees it with
 * st_defn_free). */
static inline st_defn_t *st_et_compile_doc(const char *text)
{
    json_t *doc = st_et_load(text);
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    if (st_defn_compile(doc, &defn, &problems) != ST_OK) {
        char *p = json_dumps(problems, 0);
        fprintf(stderr, "\ncompile failed: %s\n", p);
        free(p);
    }
    json_decref(problems);
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(defn);
    return defn;
}

/* Compiles flow "t" version 1 with `steps` (a JSON array text) as st_et_compile_doc. */
static inline st_defn_t *st_et_compile_steps(const char *steps)
{
    size_t cap = strlen(steps) + 128;
    char *text = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    snprintf(text, cap, "{\"kind\":\"flow\",\"name\":\"t\",\"version\":1,\"steps\":%s}", steps);
    st_defn_t *defn = st_et_compile_doc(text);
    free(text);
    return defn;
}

/* Runs `event` (taken) on instance `id` at `now`; returns the run status, or -err when
 * the interpreter refused the event. Replaces *snap with the new snapshot after a round
 * trip through text, as the executor stores it, and asserts that the text reads back
 * equal and stays within max_state_bytes. If `effects` is not NULL, *effects is
 * replaced by the run's effects (caller decrefs both). */
static inline int st_et_run(const st_defn_t *defn, json_t **snap, json_t *event, const char *id,
                            long long now, json_t **effects)
{
    st_run_result_t r;
    st_errbuf_t eb;
    st_err_t err = st_interp_run(defn, *snap, event, id, now, &r, &eb);
    json_decref(event);
    if (err != ST_OK)
        return -(int)err;
    char *text = json_dumps(r.snapshot, JSON_COMPACT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    json_error_t jerr;
    json_t *reloaded = json_loads(text, 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL(reloaded);   /* what is stored can always be read back */
    CU_ASSERT_TRUE(json_equal(reloaded, r.snapshot));   /* and resumes identically */
    CU_ASSERT_TRUE(strlen(text) <= (size_t)st_engine_limits()->max_state_bytes);
    free(text);
    json_decref(*snap);
    *snap = reloaded;
    if (effects) {
        json_decref(*effects);
        *effects = json_incref(r.effects);
    }
    int status = (int)r.status;
    st_run_result_close(&r);
    return status;
}

#endif
