/* instance_store.c - the owner of strand.instances and strand.runtime_states (see
 * instance_store.h). */
#include "strand/instance_store.h"

#include <stdlib.h>

#include "strand/pg.h"
