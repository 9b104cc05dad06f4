/*
 * fuzz_diagram.c - libFuzzer harness for definition diagrams (libs/diagram): any JSON
 * object as a stored canonical definition (a flow, lifecycle or process, with its
 * `__snapshot` and `__done_tasks` as an instance overlay) must give DOT text that
 * Graphviz reads (every user string escaped), or a clean refusal; never a crash, a
 * hang or a leak.
 */
#include <gvc.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "strand/diagram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet) {
        agseterr(AGMAX);
        quiet = 1;
    }
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, 0, &jerr);
    if (doc == NULL)
        return 0;
    json_t *snapshot = json_incref(json_object_get(doc, "__snapshot"));
    json_t *done = json_incref(json_object_get(doc, "__done_tasks"));
    char *dot = NULL;
    st_errbuf_t eb;
    if (st_diagram_dot(doc, snapshot, done, &dot, &eb) == ST_OK) {
        Agraph_t *g = agmemread(dot);
        if (g == NULL)
            abort();   /* the generated DOT must always parse */
        agclose(g);
        free(dot);
    }
    json_decref(snapshot);
    json_decref(done);
    json_decref(doc);
    return 0;
}
