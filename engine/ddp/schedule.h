/*
 * schedule.h - the schedule language: what each rank does, in order.
 *
 *   schedule := item*
 *   item     := op | INT '*' '(' schedule ')' | 'nosync' '{' schedule '}'
 *   op       := fwd | bwd | grab | zero | step | enter | exit
 *
 * Items are separated by whitespace or commas; '#' starts a comment that
 * runs to the end of the line (for schedule files). nosync{...} is
 * enter ... exit; enter/exit alone let a forward run inside no_sync and its
 * backward outside, or the reverse. no_sync nests (an exit restores the
 * state its enter found, as DDP's no_sync() does).
 *
 * Parsing expands repetitions into a flat list of ops and validates it as
 * PyTorch DDP runs it: bwd needs a forward whose graph it has not run
 * through (fwd bwd bwd is refused), a forward may follow a forward without
 * a backward (its graph is dropped), exit needs its enter, counts are
 * 0..SCHED_MAX_COUNT (0*(...) runs nothing) and the expansion at most
 * SCHED_MAX_OPS ops; an empty schedule is valid (it verifies nothing). Every
 * error names the line, column and what was expected.
 *
 * Which backward syncs is the reducer's ARMING (distributed.py forward,
 * reducer.cpp prepare_for_backward / finalize_backward): a forward outside
 * no_sync arms the reducer, a forward inside no_sync leaves it as it is,
 * and a backward syncs when it is armed, which disarms it. So
 * "fwd nosync{fwd bwd}" syncs the backward inside no_sync.
 */
#ifndef DDPSIM_SCHEDULE_H
#define DDPSIM_SCHEDULE_H

#include <stddef.h>
#include <sys/types.h>

#include "status.h"

#define SCHED_MAX_COUNT 100000
#define SCHED_MAX_OPS 1000000
#define SCHED_MAX_DEPTH 64
#define SCHED_DEFAULT "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab step zero )"

typedef enum sched_op { OP_FWD, OP_BWD, OP_GRAB, OP_ZERO, OP_STEP, OP_ENTER, OP_EXIT } sched_op;

typedef struct sched {
    sched_op *ops;
    size_t nops;
    size_t nfwd;   /* forwards: batches are numbered 0..nfwd-1 in order */
    size_t ngrabs; /* grabs: numbered 0..ngrabs-1 */
    size_t nsteps; /* steps: numbered 0..nsteps-1 */
    size_t nsyncs; /* backwards the reducer is armed for: the ones DDP syncs (descriptive) */
} sched;

/*
 * The reducer's arming as a schedule runs, op by op (distributed.py
 * forward, reducer.cpp finalize_backward): a forward outside no_sync arms,
 * one inside leaves the arming as it is, and the backward it arms syncs and
 * disarms. Every pass over a schedule that asks which backward syncs feeds
 * its ops to sched_arming_step; the reference applies the same rule live
 * (ddp_ref.c).
 */
typedef struct sched_arming {
    size_t depth;            /* no_sync contexts open */
    int armed;               /* the next backward syncs */
    size_t forwards;         /* forwards so far (batches 0..forwards-1) */
    size_t syncing_forwards; /* forwards outside no_sync so far: DDP's num_iterations */
    size_t arming_forward;   /* while armed: the last forward outside no_sync, the one whose graph DDP prepared */
    size_t forward_iteration; /* syncing_forwards when the last forward ran */
    int forward_in_no_sync;  /* the last forward ran inside no_sync */
} sched_arming;

/* Advance over op (start from a zeroed struct). For a bwd: 1 when it syncs (and is disarmed by it), else 0. */
int sched_arming_step(sched_arming *a, sched_op op);

/* Parse text into s. DDP_ERR_INVALID with "line L, column C: ..." on any error. */
ddp_status sched_parse(const char *text, sched *s);
void sched_free(sched *s);

/*
 * The op of a step between a forward and its backward while gradients
 * exist (a backward ran, and no zero_grad(set_to_none) since), or -1. The
 * step changes the parameters in place and PyTorch's autograd refuses that
 * backward (a variable needed for gradient computation was modified); with
 * no gradient the step changes nothing and the backward runs.
 */
ssize_t sched_step_conflict(const sched *s, int set_to_none);

/*
 * static_graph=True in PyTorch 1.13: the op of the first backward that
 * DDP cannot run, or -1. Until the second forward outside no_sync, every
 * forward (no_sync's too) wraps its outputs in _DDPSink, whose backward
 * queues the reducer's delayed allreduce of the first iteration
 * (distributed.py forward, "static_graph and num_iterations == 1"); in a
 * backward the reducer is not armed for (a no_sync micro-step after the
 * first syncing forward) that trips reducer.cpp's
 * "expect_autograd_hooks_ INTERNAL ASSERT". Observed on real 1.13 DDP.
 */
ssize_t sched_static_graph_conflict(const sched *s);

#define SCHED_LABEL_LEN 48

/*
 * Describe every grab by what came before it, for reports: "after fwd+bwd",
 * "after no_sync fwd+bwd", "after no_sync fwd, bwd outside", "after fwd, bwd
 * in no_sync", with " (k acc)" when k backwards accumulated since the last
 * zero_grad and ", step" after a step; "after zero_grad"; "before any
 * backward". Descriptive only: whether a grab is synced is the reference's
 * to say. labels has s->ngrabs entries.
 */
void sched_grab_labels(const sched *s, char (*labels)[SCHED_LABEL_LEN]);

/*
 * What a verification run compares, in schedule order: the gradients at
 * every grab, and the parameters after every step and once more at the end
 * of the run (a bug in the last step, or an optimizer that used unsynced
 * gradients, shows there even when no grab follows).
 */
typedef enum sched_check_kind { CHECK_GRADS, CHECK_PARAMS } sched_check_kind;

typedef struct sched_check {
    sched_check_kind kind;
    size_t op;      /* the op it follows (nops: the end of the run) */
    size_t index;   /* CHECK_GRADS: the grab's number; CHECK_PARAMS: the step's (nsteps: the end) */
    int at_end;     /* the parameters at the end of the run */
    char label[SCHED_LABEL_LEN]; /* the grab's label (sched_grab_labels), or "parameters after step" / "... at the end" */
} sched_check;

/* How many checks a run of s makes: ngrabs + nsteps + 1. */
size_t sched_nchecks(const sched *s);
/* Every check of s, in order, into out (sched_nchecks entries). */
void sched_checks(const sched *s, sched_check *out);
/* "grab 3", "step 2", "end": where a check is, in a few characters. */
const char *sched_check_name(const sched_check *c, char *buf, size_t len);

/* "fwd", "bwd", ... as written in the language. */
const char *sched_op_name(sched_op op);
/* The op of that name, or -1. */
int sched_op_from_name(const char *name);

/* A schedule from ops already expanded (a recorded run's), validated as sched_parse validates. */
ddp_status sched_from_ops(const sched_op *ops, size_t n, sched *s);

#endif
