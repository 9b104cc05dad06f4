/*
 * outcome.h - what one wake-up did with its signal (the executor's metric label and the
 * processed_signals outcome): wakeup.c and pause.c answer it, executor_loop.c counts it.
 */
#ifndef STRAND_EXECUTOR_OUTCOME_H
#define STRAND_EXECUTOR_OUTCOME_H

typedef enum {
    ST_WAKE_APPLIED = 1,   /* the signal ran and its effects committed */
    ST_WAKE_DUPLICATE,     /* this signal id was processed before: nothing changed */
    ST_WAKE_STALE,         /* wrong version/token or instance ended: dropped with a notice */
    ST_WAKE_UNKNOWN,       /* no such instance: dropped with a notice */
    ST_WAKE_BUFFERED,      /* a named signal the instance does not wait for yet: kept */
} st_wake_outcome_t;

#endif
