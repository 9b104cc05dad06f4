/*
 * result_schema.h - the JSON Schema subset a task step's `result_schema` may use to
 * describe the result its completion must carry (docs/definitions.md). Pure.
 *
 * Keywords: type (a name or an array of names: object, array, string, number,
 * integer, boolean, null), enum, const, required, properties, additionalProperties
 * (boolean or a schema), items, minItems, maxItems, minLength, maxLength, minimum,
 * maximum. Other keywords (title, description, ...) are ignored. Nesting is bounded.
 */
#ifndef STRAND_RESULT_SCHEMA_H
#define STRAND_RESULT_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#define ST_SCHEMA_MAX_DEPTH 32

/* Checks that `schema` is a well-formed schema of the subset. Returns 1 if so; else 0
 * with a message and the JSON pointer (relative to the schema) of the first problem. */
int st_schema_check(const json_t *schema, char *pointer, size_t pointer_len, char *msg,
                    size_t msg_len);

/* Validates `value` against a well-formed `schema` (both borrowed). Returns 1 if it
 * conforms; else 0 with a message and the JSON pointer into `value`, prefixed with
 * `base` (e.g. "/result"), of the first violation. */
int st_schema_validate(const json_t *schema, const json_t *value, const char *base,
                       char *pointer, size_t pointer_len, char *msg, size_t msg_len);

#endif
