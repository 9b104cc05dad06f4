/*
 * print.h - the human-readable forms of the API's answers, one per kind of list (the
 * default output; --json prints the API's JSON instead). Each takes the answer,
 * borrowed, and writes one line per item to stdout, then the "next page" hint.
 */
#ifndef STRANDCTL_PRINT_H
#define STRANDCTL_PRINT_H

#include <jansson.h>

/* Definitions or instances: "name vN kind" or "id status name vN created_at" rows. */
void st_ctl_print_list(const json_t *answer);

/* An instance's history: "id at kind detail" rows, then "(more: --after N)". */
void st_ctl_print_history(const json_t *answer);

/* Notices, globally or of one instance. */
void st_ctl_print_notices(const json_t *answer);

/* Task events, of one task or of an instance's tasks. */
void st_ctl_print_task_events(const json_t *answer);

/* Audit rows. */
void st_ctl_print_audit(const json_t *answer);

/* Stuck instances and why. */
void st_ctl_print_stuck(const json_t *answer);

/* Tasks. */
void st_ctl_print_tasks(const json_t *answer);

/* Dead letters. */
void st_ctl_print_dead_letters(const json_t *answer);

/* Batch jobs and their progress. */
void st_ctl_print_batches(const json_t *answer);

#endif
