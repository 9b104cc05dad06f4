/* engine_int.h - limits shared by the engine's modules (private). */
#ifndef STRAND_ENGINE_INT_H
#define STRAND_ENGINE_INT_H

#define ST_MAX_LOOP 100000          /* iterations of one while/repeat */
#define ST_MAX_STEPS_PER_RUN 100000 /* steps one run may execute before failing */
#define ST_MAX_THREADS 256          /* parallel branches alive in one instance */
#define ST_MAX_POINTER 400          /* longest step pointer of an accepted definition */

#endif
