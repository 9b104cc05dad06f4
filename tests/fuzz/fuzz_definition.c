/*
 * fuzz_definition.c - libFuzzer harness for the definition parser and validator, and
 * for the interpreter on what they accept: any bytes must be refused with problems or
 * compiled, and a compiled definition must run its START without crashing.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

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
        if (st_interp_run(defn, NULL, event, "00000000-0000-4000-8000-000000000000",
                          1795400000000LL, &run, &eb) == ST_OK)
            st_run_result_close(&run);
        json_decref(event);
        st_defn_free(defn);
    } else if (json_array_size(problems) == 0) {
        abort();       /* a refusal always says why */
    }
    json_decref(problems);
    json_decref(doc);
    return 0;
}
