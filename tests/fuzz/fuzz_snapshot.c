/*
 * fuzz_snapshot.c - libFuzzer harness for stored snapshots: any JSON given to the
 * interpreter as a snapshot (with a fixed definition that has loops, a parallel join,
 * a call with retries, a signal wait and a task) must be refused or run, never crash,
 * and whatever a run returns must pass st_snapshot_check().
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "strand/engine.h"

static const char *DEFINITION =
    "{\"kind\":\"flow\",\"name\":\"s\",\"version\":1,\"steps\":["
    "{\"id\":\"r\",\"type\":\"repeat\",\"times\":\"2\",\"body\":["
    " {\"id\":\"p\",\"type\":\"parallel\",\"join\":\"any\",\"branches\":["
    "  [{\"id\":\"c\",\"type\":\"call\",\"transport\":\"http\",\"request\":{},\"retry\":{\"max_attempts\":3},"
    "    \"on_failure\":[{\"id\":\"f\",\"type\":\"set\",\"values\":{\"failed\":true}}]}],"
    "  [{\"id\":\"w\",\"type\":\"wait_signal\",\"name\":\"go\",\"timeout\":\"'1m'\",\"on_timeout\":[]}],"
    "  [{\"id\":\"t\",\"type\":\"task\",\"name\":\"Check\"}]]}]},"
    "{\"id\":\"wl\",\"type\":\"while\",\"condition\":\"state.n < 2\",\"max_iterations\":5,\"body\":["
    " {\"id\":\"inc\",\"type\":\"set\",\"values\":{\"n\":\"(state.n ?? 0) + 1\"}}]},"
    "{\"id\":\"d\",\"type\":\"complete\",\"output\":{\"ok\":true}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static st_defn_t *defn;
    if (defn == NULL) {
        json_error_t jerr;
        json_t *doc = json_loads(DEFINITION, 0, &jerr);
        json_t *problems = NULL;
        if (doc == NULL || st_defn_compile(doc, &defn, &problems) != ST_OK)
            abort();
        json_decref(doc);
    }
    if (size < 1)
        return 0;
    json_error_t jerr;
    json_t *snap = json_loadb((const char *)data + 1, size - 1, 0, &jerr);
    if (snap == NULL)
        return 0;
    static const char *const types[] = {"SIGNAL", "CALL_RESULT", "TASK_COMPLETED", "RETRY_DUE",
                                        "TIMER_DUE", "CHILD_COMPLETED", "START", "BOGUS"};
    char token[80];
    snprintf(token, sizeof token, "00000000-0000-4000-8000-000000000000/%d", data[0] >> 3 & 7);
    json_t *event = json_pack("{s:s, s:s, s:s, s:{s:{s:b}}}", "type", types[data[0] & 7], "token", token,
                              "name", "go", "payload", "result", "ok", data[0] >> 6 & 1);
    st_run_result_t run;
    st_errbuf_t eb;
    if (st_interp_run(defn, snap, event, "00000000-0000-4000-8000-000000000000", 1795400000000LL, &run,
                      &eb) == ST_OK) {
        if (st_snapshot_check(defn, run.snapshot, &eb) != ST_OK)
            abort();   /* the interpreter never writes a snapshot it would refuse */
        st_run_result_close(&run);
    }
    json_decref(event);
    json_decref(snap);
    return 0;
}
