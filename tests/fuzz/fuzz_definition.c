/*
 * fuzz_definition.c - libFuzzer harness for the definition parser and validator, and
 * for the interpreter on what they accept: any bytes must be refused with problems or
 * compiled, and a compiled definition must run its START without crashing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strand/engine.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, 0, &jerr);
    if (doc == NULL)
        return 0;
    st_defn_t *defn = NULL;
    json_t *problems = NULL;
    if (st_defn_compile(doc, &defn, &problems) == ST_OK) {
        if (problems != NULL)
            abort();   /* success never comes with problems */
        json_t *event = json_pack("{s:s, s:{s:i, s:s}}", "type", "START", "input", "n", 3, "name", "x");
        st_run_result_t run;
        st_errbuf_t eb;
        json_t *snap = NULL;
        long long now = 1795400000000LL;
        /* START, then answer up to 6 waits the way services would (a call answered
         * with {"next": <the document's start states>} exercises process decisions). */
        for (int round = 0; round < 7 && event != NULL; round++) {
            if (st_interp_run(defn, snap, event, "00000000-0000-4000-8000-000000000000", now,
                              &run, &eb) != ST_OK)
                break;
            if (run.snapshot == NULL || run.effects == NULL || !json_is_array(run.effects))
                abort();   /* success always fills the result */
            if (st_snapshot_check(defn, run.snapshot, &eb) != ST_OK)
                abort();   /* and never a snapshot the interpreter would refuse */
            json_decref(snap);
            snap = json_incref(run.snapshot);
            st_run_result_close(&run);
            json_decref(event);
            event = NULL;
            const json_t *w = json_object_get(snap, "waiting");
            const char *kind = json_string_value(json_object_get(w, "kind"));
            const char *token = json_string_value(json_object_get(w, "token"));
            if (kind == NULL || token == NULL)
                break;
            now += 1000;
            const char *type = strcmp(kind, "task") == 0     ? "TASK_COMPLETED"
                               : strcmp(kind, "signal") == 0 ? "SIGNAL"
                               : strcmp(kind, "call") == 0   ? "CALL_RESULT"
                               : strcmp(kind, "child") == 0  ? "CHILD_COMPLETED"
                                                             : "TIMER_DUE";
            json_t *start = json_object_get(doc, "start");
            event = json_pack("{s:s, s:s, s:{s:{s:b, s:{s:O}}, s:s, s:{}}}", "type", type, "token", token,
                              "payload", "result", "ok", round % 2 == 0, "body", "next",
                              start ? start : json_null(), "status", "completed", "output");
        }
        json_decref(event);
        json_decref(snap);
        st_defn_free(defn);
    } else if (json_array_size(problems) == 0) {
        abort();       /* a refusal always says why */
    }
    json_decref(problems);
    json_decref(doc);
    return 0;
}
