/*
 * fuzz_result_schema.c - libFuzzer harness for task result schemas: a JSON array
 * [schema, value] from outside (the schema from an imported definition, the value from
 * a task completion). The schema is checked; a well-formed one validates the value.
 * Never a crash, unbounded recursion or a leak; messages and pointers stay
 * NUL-terminated.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strand/result_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *doc = json_loadb((const char *)data, size, JSON_DECODE_ANY, &jerr);
    if (doc == NULL)
        return 0;
    char pointer[512], msg[300];
    const json_t *schema = json_is_array(doc) ? json_array_get(doc, 0) : doc;
    const json_t *value = json_is_array(doc) ? json_array_get(doc, 1) : NULL;
    if (schema != NULL && st_schema_check(schema, pointer, sizeof pointer, msg, sizeof msg) &&
        value != NULL) {
        if (!st_schema_validate(schema, value, "/result", pointer, sizeof pointer, msg, sizeof msg) &&
            (strlen(pointer) >= sizeof pointer || strncmp(pointer, "/result", 7) != 0))
            abort();   /* a violation always points into the result */
    }
    json_decref(doc);
    return 0;
}
