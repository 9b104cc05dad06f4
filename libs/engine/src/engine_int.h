/* engine_int.h - limits shared by the engine's modules (private). */
#ifndef STRAND_ENGINE_INT_H
#define STRAND_ENGINE_INT_H

#define ST_MAX_LOOP 100000          /* iterations of one while/repeat */
#define ST_MAX_THREADS 256          /* parallel branches alive in one instance */
#define ST_MAX_DURATION_MS (10LL * 365 * 86400000)  /* longest delay, timeout or deadline */
#define ST_MAX_EPOCH_MS 4102444800000LL              /* 2100-01-01: latest timer "until" */
#define ST_MAX_BACKOFF_MS (30LL * 86400000)        /* a retry never waits longer */
#define ST_MAX_POINTER 400          /* longest step pointer of an accepted definition */

#include <jansson.h>

#include "strand/engine.h"

/* lifecycle.c: validation of a blueprint (problems appended) and its run. */
void st_lifecycle_validate(const json_t *doc, json_t *problems);
st_err_t st_lifecycle_run(const json_t *doc, const json_t *snapshot, const json_t *event,
                          const char *instance_id, long long now_ms, st_run_result_t *result,
                          st_errbuf_t *eb);

/* process.c: validation of a process document (problems appended) and its canonical
 * step form (new reference), which the flow interpreter runs. */
void st_process_validate(const json_t *doc, json_t *problems);
json_t *st_process_canonical(const json_t *doc);
/* The states the live threads of a process's snapshot stand in (st_run_result_t's
 * waiting_in). Caller decrefs the new array. */
json_t *st_process_waiting_in(const json_t *snapshot);

/* limits.c: the JSON size of `v` (about the length of its compact JSON text) and its
 * nesting depth, measured until either passes its limit. Each value visited costs one
 * unit of *work (NULL: not counted). Returns 1 when within both limits, 0 when not;
 * *too_deep tells which (may be NULL). */
int st_value_fits(const json_t *v, long long max_bytes, int max_depth, long long *work,
                  int *too_deep);

/* interp.c, for repair.c: runs a snapshot a repair prepared (status running, threads
 * made runnable) until it waits or ends, or, with `fail_error` (taken), fails it with
 * that error. Takes `snap` and `effects`. `budget` may be NULL (a fresh one). */
st_err_t st_interp_continue(const st_defn_t *defn, json_t *snap, json_t *effects, json_t *fail_error,
                            const char *instance_id, long long now_ms, st_run_budget_t *budget,
                            st_run_result_t *result, st_errbuf_t *eb);

/* lifecycle.c, for repair.c: the repair verbs on a lifecycle instance (st_repair_run()). */
st_err_t st_lifecycle_repair(const json_t *doc, const json_t *snapshot, const st_repair_t *repair,
                             const char *instance_id, long long now_ms, st_run_result_t *result,
                             st_errbuf_t *eb);

#endif
