/*
 * comm_worker.h - a rank's communication thread for the built-in
 * implementations (bucketed.c, sharded.c): the main thread queues items
 * (bucket or unit numbers) as the backward makes them ready, the thread
 * hands each to the work function in queue order, overlapping the rest of
 * the backward, and the main thread waits for all before it talks to the
 * world itself. Internal to engine/impls.
 */
#ifndef DDPSIM_COMM_WORKER_H
#define DDPSIM_COMM_WORKER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "impl.h"
#include "model.h"

/* Item's work on the thread: 0, or non-zero with why in err (len bytes). */
typedef int (*comm_work_fn)(void *ctx, int item, char *err, size_t len);

typedef struct comm_worker {
    comm_work_fn work;
    void *ctx;
    const char *what; /* what an item is ("bucket", "unit"), as the trace says it */
    void (*trace_fn)(void *trace, const char *ev, const char *extra); /* impl_env's: NULL, not traced */
    void *trace;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int queue[MODEL_MAX_PARAMS];
    uint64_t qhead, qtail, done;
    int stop, failed;
    char error[512]; /* the first failure's reason */
} comm_worker;

/*
 * Start the thread: 0, or -1 when it cannot be started (w is then safe to
 * stop). Under --trace (env's trace_fn) each item queued is a "launch"
 * event and each item worked a "reduced" one, items called `what`.
 */
int comm_worker_start(comm_worker *w, comm_work_fn work, void *ctx, const char *what, const impl_env *env);
/* Queue an item (from the main thread; at most MODEL_MAX_PARAMS outstanding). */
void comm_worker_push(comm_worker *w, int item);
/* Wait until every queued item is done: 0, or -1 when one failed (its reason in w->error). */
int comm_worker_wait(comm_worker *w);
/* Finish the queue and join the thread (nothing for a zeroed worker never started). */
void comm_worker_stop(comm_worker *w);

#endif
