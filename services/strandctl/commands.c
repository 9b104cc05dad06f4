/*
 * commands.c - THE command table of strandctl (commands.h): every command, its
 * arguments, flags, summary and handler. Parsing (parse.c), help (help.c) and the
 * bash completion (completion.c) are generated from it; nothing else lists commands.
 *
 * Rows are in help order and a group's rows are contiguous. Every flag of a command
 * takes a value (`--dry-run true`, not `--dry-run`), as strandctl always parsed them.
 */
#include "commands.h"

#include <string.h>

/* A row: group, verb (NULL for a group alone), arguments, summary, handler, flags. */
#define CMD(group_, verb_, args_, summary_, run_, ...)                                   \
    {.group = group_, .verb = verb_, .args = args_, .summary = summary_, .run = run_,    \
     .flags = {__VA_ARGS__}}

#define OPT ST_CTL_OPTIONAL
#define REQ ST_CTL_REQUIRED
#define API ST_CTL_API_NEEDS

/* Flags that several commands share. */
#define F_LIMIT {"limit", "N", OPT, "at most N items on a page"}
#define F_CURSOR {"cursor", "C", OPT, "the next page: the previous answer's next_cursor"}
#define F_REASON {"reason", "TEXT", OPT, "why: kept with the command (history, audit log)"}
#define F_EXPECTED {"expected-version", "N", REQ, "the state_version that 'instances get' shows"}
#define F_REQUEST_ID {"request-id", "ID", OPT, "idempotency key: retries with the same ID act once"}
#define F_SINCE {"since", "T", OPT, "at or after time T (2026-11-24, 2026-11-24T10:00:00Z)"}
#define F_INSTANCE_ID {"instance-id", "ID", OPT, "only those of instance ID"}
#define F_CREATED_AFTER {"created-after", "T", OPT, "created at or after time T (ISO 8601)"}
#define F_CREATED_BEFORE {"created-before", "T", OPT, "created before time T (ISO 8601)"}
#define F_BUSINESS_REF {"business-ref", "R", OPT, "only instances with business reference R"}

const st_ctl_cmd_t st_ctl_commands[] = {
    /* definitions: cmd_definitions.c */
    CMD("definitions", "import", "FILE|-", "import a definition (flow, lifecycle, process)",
        st_ctl_definitions_import),
    CMD("definitions", "validate", "FILE|-", "validate a definition without importing it",
        st_ctl_definitions_import),
    CMD("definitions", "list", "", "the imported definitions, by name and version",
        st_ctl_definitions_list,
        {"kind", "K", OPT, "only definitions of kind K: flow, lifecycle or process"},
        F_LIMIT, F_CURSOR),
    CMD("definitions", "get", "NAME [VERSION]", "a definition: its newest version, or VERSION",
        st_ctl_definitions_get),
    CMD("definitions", "diagram", "NAME VERSION", "the definition drawn as SVG, on stdout",
        st_ctl_definitions_diagram,
        {"instance", "ID", OPT, "overlay where instance ID stands"}),
    CMD("definitions", "schema", "", "the JSON Schema of definition documents",
        st_ctl_definitions_schema),
    CMD("definitions", "pause", "NAME VERSION", "keep every wake-up of the version's instances",
        st_ctl_definitions_pause,
        F_REASON),
    CMD("definitions", "resume", "NAME VERSION", "apply what its instances kept, in order",
        st_ctl_definitions_pause,
        F_REASON),

    /* instances: cmd_instances.c */
    CMD("instances", "start", "DEFINITION", "start an instance of DEFINITION",
        st_ctl_instances_start,
        {"version", "N", OPT, "definition version N (default: the newest)"},
        {"input", "JSON", OPT, "the instance's input, a JSON object"},
        {"business-ref", "R", OPT, "the instance's business reference (signals find it by R)"},
        F_REQUEST_ID),
    CMD("instances", "get", "ID", "an instance: status, error, state_version, output",
        st_ctl_instances_get),
    CMD("instances", "list", "", "instances, newest first",
        st_ctl_instances_list,
        {"definition", "D", OPT, "only instances of definition D"},
        {"status", "S", OPT, "only instances in status S (running, waiting, completed, ...)"},
        F_BUSINESS_REF, F_LIMIT, F_CREATED_AFTER, F_CREATED_BEFORE, F_CURSOR),
    CMD("instances", "history", "ID", "what happened to an instance, oldest first",
        st_ctl_instances_history,
        {"after", "ENTRY", OPT, "entries after history entry ENTRY (the next page)"},
        F_LIMIT),
    CMD("instances", "runtime", "ID", "why it waits: snapshot, tasks, calls, ACKs",
        st_ctl_instances_runtime),
    CMD("instances", "wait", "ID", "wait until the instance ends; exit 1 if it has not",
        st_ctl_instances_wait,
        {"timeout", "SECONDS", OPT, "give up after SECONDS (default 60)"}),
    CMD("instances", "signal", "ID NAME", "send signal NAME to the instance",
        st_ctl_instances_signal,
        {"payload", "JSON", OPT, "the signal's payload"},
        F_REQUEST_ID),
    CMD("instances", "rpc", "ID NAME", "call a process's RPC NAME and print its output",
        st_ctl_instances_rpc,
        {"input", "JSON", OPT, "the RPC's input"},
        F_REQUEST_ID),
    CMD("instances", "notices", "ID", "the notices naming the instance, newest first",
        st_ctl_instances_notices,
        {"code", "C", OPT, "only notices with code C (StaleSignal, DispatchFailure, ...)"},
        F_SINCE, F_LIMIT, F_CURSOR),
    CMD("instances", "task-events", "ID", "the events of every task of the instance",
        st_ctl_instances_task_events,
        F_LIMIT, F_CURSOR),
    CMD("instances", "stuck", "", "instances nothing can wake, or whose last wake-up failed",
        st_ctl_instances_stuck,
        {"reason", "R", OPT, "only reason R: no_pending_wakeup or last_wakeup_failed"},
        F_LIMIT, F_CURSOR),
    CMD("instances", "cancel", "ID", "cancel the instance",
        st_ctl_instances_cancel,
        F_REASON),
    CMD("instances", "terminate", "ID", "end the instance at once (admin)",
        st_ctl_instances_cancel,
        F_REASON),

    /* instances, the operator verbs: cmd_instances_repair.c */
    CMD("instances", "retry", "ID", "retry a failed instance, or redeliver a dead letter",
        st_ctl_instances_repair,
        F_EXPECTED,
        {"step", "S", OPT, "run from step S (a step id, a JSON pointer or a state name)"},
        F_REASON),
    CMD("instances", "fail", "ID", "end the instance as failed, with the error --code C",
        st_ctl_instances_repair,
        F_EXPECTED,
        {"code", "C", API, "the error's code"},
        {"message", "M", OPT, "the error's message (with --code)"},
        F_REASON),
    CMD("instances", "patch-variables", "ID", "change the variables with a JSON Merge Patch",
        st_ctl_instances_repair,
        F_EXPECTED,
        {"patch", "JSON", API, "the merge patch (RFC 7386), a JSON object"},
        F_REASON),
    CMD("instances", "fire-timer", "ID", "fire the current wait's timer now",
        st_ctl_instances_repair,
        F_EXPECTED, F_REASON),
    CMD("instances", "skip-wait", "ID", "complete the current wait as if its event came",
        st_ctl_instances_repair,
        F_EXPECTED,
        {"payload", "JSON", OPT, "the event's data, a JSON object"},
        F_REASON),
    CMD("instances", "pause", "ID", "hold the instance: wake-ups are kept, not applied",
        st_ctl_instances_pause,
        F_EXPECTED, F_REASON),
    CMD("instances", "resume", "ID", "apply what a paused instance kept, in arrival order",
        st_ctl_instances_pause,
        F_EXPECTED, F_REASON),
    CMD("instances", "rewind", "ID", "take the instance back to an earlier state_version",
        st_ctl_instances_pause,
        F_EXPECTED,
        {"to-version", "M", REQ, "the state_version to go back to, from 'instances history'"},
        F_REASON),

    /* signals, triggers, acks: cmd_signals.c, cmd_triggers.c, cmd_acks.c */
    CMD("signals", "send", "NAME", "send signal NAME to an instance by business reference",
        st_ctl_signals_send,
        {"business-ref", "R", REQ, "the instance's business reference"},
        {"definition", "D", OPT, "the instance's definition, when several have reference R"},
        {"payload", "JSON", OPT, "the signal's payload"}),
    CMD("triggers", "send", "DEFINITION EXTERNAL_REF EVENT", "send EVENT to a lifecycle's instance",
        st_ctl_triggers_send,
        {"request-id", "ID", REQ, "idempotency key: retries with the same ID act once"},
        {"actor", "A", OPT, "who caused the event"},
        {"payload", "JSON", OPT, "the event's payload"},
        {"version", "N", OPT, "definition version N"}),
    CMD("acks", "send", "ACK_GUID CONSUMER delivered|processed", "a consumer's ACK of a work event",
        st_ctl_acks_send,
        {"outcome", "ok|failed", OPT, "processed: how it ended"},
        {"message", "M", OPT, "processed: a message, kept in the history"},
        {"error", "E", OPT, "processed, failed: what went wrong"},
        {"retry-at-ms", "MS", OPT, "processed, failed: raise it again at MS (epoch milliseconds)"},
        {"result", "JSON", OPT, "processed: the result, a JSON object (a call's answer)"}),

    /* tasks: cmd_tasks.c */
    CMD("tasks", "list", "", "human tasks",
        st_ctl_tasks_list,
        {"role", "R", OPT, "only tasks for role R"},
        {"assignee", "A", OPT, "only tasks assigned to A"},
        {"status", "S", OPT, "only tasks in status S: open, assigned, completed, cancelled"},
        F_INSTANCE_ID, F_LIMIT, F_CURSOR),
    CMD("tasks", "get", "ID", "a task",
        st_ctl_tasks_get),
    CMD("tasks", "assign", "ID", "assign the task",
        st_ctl_tasks_act,
        {"assignee", "A", OPT, "assign it to A (default: you; someone else: admin)"}),
    CMD("tasks", "release", "ID", "give an assigned task back",
        st_ctl_tasks_act),
    CMD("tasks", "complete", "ID", "complete the task",
        st_ctl_tasks_act,
        {"result", "JSON", OPT, "the task's result, a JSON object"}),
    CMD("tasks", "events", "ID", "what happened to the task",
        st_ctl_tasks_events,
        F_LIMIT, F_CURSOR),

    /* dead-letters: cmd_dead_letters.c */
    CMD("dead-letters", "list", "", "messages Strand could not process",
        st_ctl_dead_letters_list,
        {"status", "S", OPT, "only status S: open, replayed or discarded"},
        F_LIMIT, F_CURSOR),
    CMD("dead-letters", "get", "ID", "a dead letter, its payload included",
        st_ctl_dead_letters_get),
    CMD("dead-letters", "replay", "ID", "put the message back on its topic (admin)",
        st_ctl_dead_letters_resolve),
    CMD("dead-letters", "discard", "ID", "give the message up (admin)",
        st_ctl_dead_letters_resolve),
    CMD("dead-letters", "edit", "ID", "replace a dead-lettered signal's payload",
        st_ctl_dead_letters_edit,
        {"payload", "JSON", REQ, "the new payload, a JSON object"}),

    /* notices, audit: cmd_notices.c, cmd_audit.c */
    CMD("notices", "list", "", "what Strand refused or gave up on, newest first",
        st_ctl_notices_list,
        F_INSTANCE_ID,
        {"code", "C", OPT, "only code C (StaleSignal, IngressRejected, ...)"},
        F_SINCE, F_LIMIT, F_CURSOR),
    CMD("audit", "list", "", "who did what: commands requested, applied, rejected",
        st_ctl_audit_list,
        F_INSTANCE_ID,
        {"actor", "A", OPT, "only actor A"},
        {"action", "A", OPT, "only action A"},
        {"outcome", "O", OPT, "only outcome O: requested, applied or rejected"},
        F_SINCE, F_LIMIT, F_CURSOR),

    /* retention: cmd_retention.c */
    CMD("retention", "run", "", "delete what ended long ago (admin)",
        st_ctl_retention_run,
        {"older-than-days", "N", OPT, "what ended N days ago or more (or --older-than-s)"},
        {"older-than-s", "N", OPT, "what ended N seconds ago or more (or --older-than-days)"},
        {"limit", "N", OPT, "at most N instances, N notices, N batches per run"},
        {"dry-run", "true|false", OPT, "true: only count"}),

    /* batch: cmd_batch.c */
    CMD("batch", "create", "ACTION",
        "ACTION on every instance a filter selects: cancel, terminate, signal, retry, "
        "pause, resume",
        st_ctl_batch_create,
        {"definition", "D", OPT, "instances of definition D"},
        {"version", "N", OPT, "of version N (with --definition)"},
        {"status", "S", OPT, "in status S"},
        F_BUSINESS_REF, F_CREATED_AFTER, F_CREATED_BEFORE,
        {"waiting-kind", "K", OPT, "waiting on K, as waiting.kind in 'instances get'"},
        F_REASON,
        {"name", "SIGNAL", OPT, "signal: the signal's name"},
        {"payload", "JSON", OPT, "signal: the signal's payload"}),
    CMD("batch", "list", "", "batch jobs, newest first",
        st_ctl_batch_list,
        {"status", "S", OPT, "only status S: running, completed, failed, cancelled"},
        F_LIMIT, F_CURSOR),
    CMD("batch", "get", "ID", "a batch job: progress and the first failures",
        st_ctl_batch_get),
    CMD("batch", "cancel", "ID", "stop a batch job; what was done stays done",
        st_ctl_batch_cancel),

    /* the API server itself: cmd_server.c */
    CMD("health", NULL, "", "the API's readiness", st_ctl_health),
    CMD("metrics", NULL, "", "the API's Prometheus metrics", st_ctl_metrics),
    CMD("openapi", NULL, "", "the API's OpenAPI document", st_ctl_openapi),

    /* completion.c */
    CMD("completion", "bash", "", "bash completion: source <(strandctl completion bash)",
        st_ctl_completion_bash),
};

const size_t st_ctl_ncommands = sizeof st_ctl_commands / sizeof st_ctl_commands[0];

const st_ctl_flag_t st_ctl_global_flags[] = {
    {"api", "URL", OPT, "the API's address (default: STRAND_API_URL)"},
    {"json", NULL, OPT, "print the API's JSON instead of the human-readable form"},
    {"help", NULL, OPT, "this help (also: GROUP --help, GROUP VERB --help)"},
};

const size_t st_ctl_nglobal_flags = sizeof st_ctl_global_flags / sizeof st_ctl_global_flags[0];

size_t st_ctl_flag_count(const st_ctl_cmd_t *cmd)
{
    size_t n = 0;
    while (n < ST_CTL_MAX_FLAGS && cmd->flags[n].name != NULL)
        n++;
    return n;
}

const st_ctl_flag_t *st_ctl_flag_find(const st_ctl_cmd_t *cmd, const char *name)
{
    for (size_t i = 0; i < st_ctl_flag_count(cmd); i++)
        if (strcmp(cmd->flags[i].name, name) == 0)
            return &cmd->flags[i];
    return NULL;
}

const st_ctl_cmd_t *st_ctl_group_find(const char *group)
{
    for (size_t i = 0; i < st_ctl_ncommands; i++)
        if (strcmp(st_ctl_commands[i].group, group) == 0)
            return &st_ctl_commands[i];
    return NULL;
}

int st_ctl_group_is_verbless(const char *group)
{
    const st_ctl_cmd_t *first = st_ctl_group_find(group);
    return first != NULL && first->verb == NULL;
}
