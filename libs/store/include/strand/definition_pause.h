/*
 * definition_pause.h - the owner of strand.definition_pauses (migration 0024): which
 * definition versions are paused. While a version is paused, the executor keeps every
 * wake-up of its instances (except cancel and terminate) and sends them again when the
 * version is resumed (docs/api.md, "Pause, resume and rewind").
 */
#ifndef STRAND_DEFINITION_PAUSE_H
#define STRAND_DEFINITION_PAUSE_H

#include <libpq-fe.h>

#include "strand/err.h"

/* Pauses `name` v`version` for `actor` (borrowed strings; `reason` may be NULL).
 * *changed is 1 when it was not paused before, 0 when it already was. The caller
 * checks that the definition exists. Expects the caller's open transaction. */
st_err_t st_definition_pause_add_tx(PGconn *conn, const char *name, int version,
                                    const char *actor, const char *reason, int *changed,
                                    st_errbuf_t *eb);

/* Resumes `name` v`version`: *changed is 1 when it was paused. The row is deleted
 * under its lock, so a wake-up that read it paused (st_definition_pause_lock_tx) has
 * committed its kept signal before this returns. Expects the caller's transaction. */
st_err_t st_definition_pause_remove_tx(PGconn *conn, const char *name, int version,
                                       int *changed, st_errbuf_t *eb);

/* *paused = 1 when `name` v`version` is paused, taking a share lock on the row for the
 * rest of the caller's transaction (a resume waits for it). Expects an open transaction. */
st_err_t st_definition_pause_lock_tx(PGconn *conn, const char *name, int version, int *paused,
                                     st_errbuf_t *eb);

/* *paused = 1 when `name` v`version` is paused (no lock; for reads). */
st_err_t st_definition_pause_get(PGconn *conn, const char *name, int version, int *paused,
                                 st_errbuf_t *eb);

#endif
