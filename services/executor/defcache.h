/*
 * defcache.h - the executor's cache of compiled definitions: a definition version is
 * immutable, so it is loaded and compiled once per process (wakeup.c, pause.c).
 */
#ifndef STRAND_EXECUTOR_DEFCACHE_H
#define STRAND_EXECUTOR_DEFCACHE_H

#include <libpq-fe.h>

#include "strand/engine.h"
#include "strand/err.h"

typedef struct st_defcache st_defcache_t;

/* A cache of compiled definitions keyed by (name, version); definitions are
 * immutable, so entries never go stale. Not thread-safe: one per worker thread. */
st_defcache_t *st_defcache_new(void);
void st_defcache_free(st_defcache_t *cache);

/* The compiled definition (name, version), loaded inside the caller's transaction on a
 * miss. Borrowed; valid until st_defcache_free(). ST_ERR_NOT_FOUND: not imported. */
st_err_t st_defcache_get_tx(st_defcache_t *cache, PGconn *conn, const char *name, int version,
                            const st_defn_t **out, st_errbuf_t *eb);

#endif
