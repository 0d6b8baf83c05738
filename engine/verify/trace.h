/*
 * trace.h - the JSON-lines event log of a run (--trace FILE) and reading it
 * back to force the same interleaving (--replay FILE).
 *
 * Line 1 is a header: {"ddpsim_trace": 2, "run": "<key>", ...}; the key
 * names what the trace belongs to (ranks, seed, model, batch, schedule,
 * implementation), and a replay of another run is refused. Every other line
 * is one event of one rank, in that rank's logical time t (its own event
 * counter, 0, 1, 2, ...):
 *   {"t": 12, "rank": 1, "op": 4, "ev": "bwd"}                an op starts
 *   {"t": 13, "rank": 1, "op": 4, "ev": "ready", "param": 3, "name": "2.bias"}
 *   {"t": 20, "rank": 1, "op": 4, "ev": "arrive", "pos": 2}   a barrier inside a
 *                                                               collective: 2 ranks were there first
 *   {"t": 90, "rank": 1, "op": 40, "ev": "end", "ready": 24, "arrivals": 41}
 *                                                             the rank finished: how many of each it wrote
 * Replay forces, per rank, the recorded order of ready events and the
 * recorded arrival positions at every barrier. Before anything runs a trace
 * must be whole and consistent: every rank present and ended, its event
 * times without a gap, its counts what its end says, every rank at the same
 * number of barriers, and at each barrier the ranks' positions 0..N-1 once
 * each. Otherwise forcing it could only deadlock.
 */
#ifndef DDPSIM_TRACE_H
#define DDPSIM_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"
#include "world.h"

/* A recorded interleaving to force (--replay): per rank, ready-event order and barrier arrival positions. */
typedef struct verify_replay {
    int nranks;
    int32_t *ready[WORLD_MAX_RANKS];
    size_t nready[WORLD_MAX_RANKS];
    uint32_t *arrivals[WORLD_MAX_RANKS];
    size_t narrivals[WORLD_MAX_RANKS];
} verify_replay;

/* ---- writing, on a rank: <path>.rank<r>, merged by the parent ---- */

typedef struct trace_writer {
    FILE *f;      /* NULL: tracing is off and every call does nothing */
    int rank;
    uint64_t t;   /* logical time: this rank's event counter */
    uint64_t nready, narrivals;
} trace_writer;

/* Open <path>.rank<rank> and start recording barrier arrivals (path NULL: off). */
ddp_status trace_open(trace_writer *w, const char *path, int rank, world_rank *wr);
/* One event of op `op`; extra is more JSON members ("\"param\": 3") or NULL. */
void trace_event(trace_writer *w, size_t op, const char *ev, const char *extra);
/* The barrier arrivals since the last call, as "arrive" events of op `op`. */
ddp_status trace_arrivals(trace_writer *w, size_t op, world_rank *wr);
/* Close after an "end" event at op `op` when the rank finished (complete); DDP_ERR_SYSTEM when it could not be written. */
ddp_status trace_close(trace_writer *w, size_t op, int complete);

/* ---- the parent ---- */

/*
 * Concatenate the ranks' files <path>.rank<r> into <path> after a header
 * line {"ddpsim_trace": 2, "run": run_key, <extra>}, and remove them.
 */
ddp_status trace_merge(const char *path, int nranks, const char *run_key, const char *extra_json);

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
