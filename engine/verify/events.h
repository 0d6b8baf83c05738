/*
 * events.h - the gradient-ready events of one backward, as the
 * implementation under test receives them. Backward produces an event the
 * moment a parameter's gradient is complete (model_backward_local); the
 * event is delivered at once, or, under chaos, held back for a seeded while
 * and delivered later in a seeded order (never before the gradient exists:
 * every delivered order is one a real backward with slow hooks could give),
 * or, under replay, in the order a trace recorded, each as soon as it exists
 * (past the end of a trace of a run that did not finish, as they come).
 */
#ifndef DDPSIM_EVENTS_H
#define DDPSIM_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "chaos.h"
#include "model.h"
#include "status.h"
#include "trace.h"

typedef struct ready_queue {
    int pending[MODEL_MAX_PARAMS]; /* produced, not yet delivered */
    int npending;
    uint64_t produced;             /* events produced so far in this backward */
    const chaos_rank *chaos;       /* NULL: deliver at once */
    uint64_t nbwd;                 /* which backward (the chaos stream) */
    const verify_replay *replay;   /* non-NULL: the recorded order */
    int rank;
    size_t *next_recorded;         /* replay: this rank's next recorded event */
} ready_queue;

/* Start the events of backward number nbwd on rank (chaos and replay may be NULL). */
void ready_begin(ready_queue *q, const chaos_rank *chaos, uint64_t nbwd, const verify_replay *replay, int rank,
                 size_t *next_recorded);

/*
 * Parameter p's gradient is complete: the events to deliver now, in order,
 * into out (at most MODEL_MAX_PARAMS); returns how many. DDP_ERR_INVALID
 * (and -1) when a replayed trace does not fit this backward.
 */
int ready_produce(ready_queue *q, int p, int *out);

/* The backward is over: every event still held back, in order, into out; -1 when a replay does not fit. */
int ready_finish(ready_queue *q, int *out);

#endif
