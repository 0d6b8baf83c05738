/*
 * trace.h - the JSON-lines event log of a run (--trace FILE) and reading it
 * back to force the same interleaving (--replay FILE).
 *
 * Line 1 is a header: {"ddpsim_trace": 3, "run": "<key>", ...}; the key
 * names what the trace belongs to (ranks, seed, model, batch, schedule,
 * implementation), and a replay of another run is refused. Every other line
 * is one event of one rank, in that rank's logical time t (its own event
 * counter, 0, 1, 2, ...), with us, the machine's CLOCK_MONOTONIC in
 * microseconds when it was written (one clock for every rank of a run):
 *   {"t": 12, "rank": 1, "op": 4, "ev": "bwd", "us": 5120.3}  an op starts
 *   {"t": 13, "rank": 1, "op": 4, "ev": "ready", "us": ..., "param": 3, "name": "2.bias"}
 *   {"t": 20, "rank": 1, "op": 4, "ev": "arrive", "us": ..., "pos": 2}
 *                                  a barrier inside a collective: 2 ranks were there first
 *   {"t": 90, "rank": 1, "op": 40, "ev": "end", "us": ..., "ready": 24, "arrivals": 41}
 *                                  the rank finished: how many of each it wrote
 *   {"t": 33, "rank": 2, "op": 9, "ev": "end", "us": ..., "ready": 10, "arrivals": 12, "how": "stopped"}
 *                                  the rank did not finish: its supervisor's end (trace_merge), with
 *                                  how it ended (failed, signaled, stopped by the supervisor, not-started)
 * and, for the timeline of the HTML page, what the implementation did
 * (written by whichever of its threads did it; "thread": k > 0 names a
 * thread other than the rank's main one, numbered as they first wrote;
 * op is the op the main thread was at):
 *   {..., "ev": "coll", "us": ..., "kind": "allreduce", "group": "world", "bytes": 4096, "dur_us": 12.5}
 *                                  a collective it called ended after dur_us ("ok": false: it failed);
 *                                  bytes: its whole buffer (an allgather's output, a reduce-scatter's input)
 *   {..., "ev": "launch", "us": ..., "what": "bucket", "item": 2}
 *                                  a built-in queued bucket (or unit) 2 to its communication thread
 *   {..., "ev": "reduced", "us": ..., "what": "bucket", "item": 2, "dur_us": 40.1, "thread": 1}
 *                                  the thread finished it after dur_us of work
 * Replay forces, per rank, the recorded order of ready events and the
 * recorded arrival positions at every barrier. Before anything runs a trace
 * must be whole and consistent: every rank present and ended, its event
 * times without a gap, its counts what its end says, every rank at the same
 * number of barriers, and at each barrier the ranks' positions 0..N-1 once
 * each. Otherwise forcing it could only deadlock. A trace of a run that did
 * not finish (some end has "how") replays up to where it stopped: the
 * barriers every rank passed are forced, and each rank's recorded ready
 * events; after them the run goes free, to fail again as it did.
 */
#ifndef DDPSIM_TRACE_H
#define DDPSIM_TRACE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"
#include "world.h"

/* A recorded interleaving to force (--replay): per rank, ready-event order and barrier arrival positions. */
typedef struct verify_replay {
    int nranks;
    int stopped;     /* the run did not finish: forced up to where it stopped, free after */
    char how[WORLD_MAX_RANKS][16]; /* per rank: its end's "how" ("": it finished) */
    char failure[WORLD_ERROR_LEN];  /* the header's "failure": how the recorded run failed ("": not said) */
    int32_t *ready[WORLD_MAX_RANKS];
    size_t nready[WORLD_MAX_RANKS];
    uint32_t *arrivals[WORLD_MAX_RANKS];
    size_t narrivals[WORLD_MAX_RANKS];
} verify_replay;

/* ---- writing, on a rank: <path>.rank<r>, merged by the parent ---- */

#define TRACE_MAX_THREADS 16 /* threads told apart in "thread"; more share the last number */

typedef struct trace_writer {
    int on;       /* set by trace_open, never changed after: 0 and every call does nothing */
    int rank;
    pthread_mutex_t mu; /* the implementation's own threads write too (trace_event_here) */
    FILE *f;      /* under mu: NULL once closed */
    size_t op;    /* under mu: the op the main thread is at */
    pthread_t threads[TRACE_MAX_THREADS]; /* under mu: [0] the main thread, then in order of first event */
    int nthreads;
    uint64_t t;   /* logical time: this rank's event counter */
    uint64_t nready, narrivals;
} trace_writer;

/* Open <path>.rank<rank> and start recording barrier arrivals (path NULL: off). */
ddp_status trace_open(trace_writer *w, const char *path, int rank, world_rank *wr);
/* One event of op `op` (from the main thread); extra is more JSON members ("\"param\": 3") or NULL. */
void trace_event(trace_writer *w, size_t op, const char *ev, const char *extra);
/* One event from any thread of the rank, at the op the main thread is at (impl_env.trace: the implementation's). */
void trace_event_here(void *w, const char *ev, const char *extra);
/* What was written so far onto the file (at each op: a rank killed later still shows where it was). */
void trace_flush(trace_writer *w);
/* The barrier arrivals since the last call, as "arrive" events of op `op`. */
ddp_status trace_arrivals(trace_writer *w, size_t op, world_rank *wr);
/*
 * Close after an "end" event at op `op` when the rank finished (complete);
 * DDP_ERR_SYSTEM when it could not be written. A thread's later event is
 * dropped; trace_release, once the implementation's threads are gone, frees
 * the rest.
 */
ddp_status trace_close(trace_writer *w, size_t op, int complete);
void trace_release(trace_writer *w);

/* ---- the parent ---- */

/*
 * Concatenate the ranks' files <path>.rank<r> into <path> after a header
 * line {"ddpsim_trace": 3, "run": run_key, <extra>}, and remove them. A
 * rank's last line cut mid-write is dropped, and a rank without an end
 * event of its own gets one with how it ended in w's last run (world_fate;
 * "unknown" for w NULL), so the trace of a failed run replays.
 */
ddp_status trace_merge(const char *path, int nranks, const char *run_key, const char *extra_json, const world *w);

/* Remove leftover <path>.rank<r> files (after a failed run). */
void trace_discard(const char *path, int nranks);

/*
 * Read a trace recorded for run_key into out and check it is whole and
 * consistent (above). DDP_ERR_INVALID with a message naming the file and,
 * where there is one, the line.
 */
ddp_status trace_load(const char *path, const char *run_key, int nranks, verify_replay *out);
void trace_free(verify_replay *r);

#endif
