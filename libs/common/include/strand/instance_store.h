/*
 * instance_store.h - the owner of strand.instances and strand.runtime_states: an
 * instance's row (status, input, output, error) and its runtime state (snapshot,
 * state_version, what it waits for, last error). Every write to either table is a
 * function here, taking the caller's open transaction (_tx); callers pass structs and
 * values, never SQL. Reads may stay near their handlers (docs/architecture.md).
 */
#ifndef STRAND_INSTANCE_STORE_H
#define STRAND_INSTANCE_STORE_H

#include <jansson.h>
#include <libpq-fe.h>

#include "strand/err.h"

#endif
