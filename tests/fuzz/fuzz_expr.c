/*
 * fuzz_expr.c - libFuzzer harness for the expression parser and evaluator: any text
 * must parse or be refused with a message, and evaluate or fail within the bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strand/expr.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *scope;
    if (scope == NULL) {
        json_error_t jerr;
        scope = json_loads("{\"input\":{\"name\":\"ada\",\"n\":42,\"items\":[1,2,3],"
                           "\"o\":{\"a\":{\"b\":null}}},\"state\":{\"s\":\"x\"},\"event\":null,"
                           "\"now_ms\":1795400000000}", 0, &jerr);
    }
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    st_expr_t *expr = NULL;
    st_errbuf_t eb;
    eb.msg[0] = '\0';
    if (st_expr_parse(text, &expr, &eb) == ST_OK) {
        json_t *value = NULL;
        if (st_expr_eval(expr, scope, &value, &eb) == ST_OK)
            json_decref(value);
        else if (eb.msg[0] == '\0')
            abort();   /* a failure always says why */
        st_expr_free(expr);
    } else if (eb.msg[0] == '\0') {
        abort();
    }
    free(text);
    return 0;
}
