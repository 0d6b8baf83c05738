/*
 * trace.h - the JSON-lines event log of a run (--trace FILE) and reading it
 * back to force the same interleaving (--replay FILE).
 *
 * Line 1 is a header: {"ddpsim_trace": 1, "run": "<key>", ...}; the key
 * names what the trace belongs to (ranks, seed, model, batch, schedule,
 * implementation), and a replay of another run is refused. Every other line
 * is one event of one rank, in that rank's logical time t (its own event
 * counter):
 *   {"t": 12, "rank": 1, "op": 4, "ev": "bwd"}                an op starts
 *   {"t": 13, "rank": 1, "op": 4, "ev": "ready", "param": 3, "name": "2.bias"}
 *   {"t": 20, "rank": 1, "op": 4, "ev": "arrive", "pos": 2}   a barrier inside a
 *                                                               collective: 2 ranks were there first
 * Replay forces, per rank, the recorded order of ready events and the
 * recorded arrival positions at every barrier.
 */
#ifndef DDPSIM_TRACE_H
#define DDPSIM_TRACE_H

#include "status.h"
#include "verify.h"

/*
 * Concatenate the ranks' files <path>.rank<r> into <path> after a header
 * line {"ddpsim_trace": 1, "run": run_key, <extra>}, and remove them.
 */
ddp_status trace_merge(const char *path, int nranks, const char *run_key, const char *extra_json);

/* Remove leftover <path>.rank<r> files (after a failed run). */
void trace_discard(const char *path, int nranks);

/* Read a trace recorded for run_key into out. DDP_ERR_INVALID with the line on any problem. */
ddp_status trace_load(const char *path, const char *run_key, int nranks, verify_replay *out);
void trace_free(verify_replay *r);

#endif
