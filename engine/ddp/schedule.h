/*
 * schedule.h - the schedule language: what each rank does, in order.
 *
 *   schedule := item*
 *   item     := op | count '*' '(' schedule ')' | 'nosync' '{' schedule '}'
 *             | 'join' [ '(' 'divide_by_initial_world_size' '=' bool ')' ] '{' schedule '}'
 *   count    := INT | '[' INT ( RANK ':' INT )* ']'      RANK := INT | '-' INT
 *   op       := fwd | bwd | grab | zero | step | enter | exit | clip
 *   clip     := 'clip:' MAX [ ':inf' | ':2' ]     MAX := a positive finite number
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
 * Uneven inputs (PyTorch's Join context manager, torch 1.13
 * torch/distributed/algorithms/join.py and distributed.py _DDPJoinHook):
 * "[4, -1:2]*( body )" runs body 4 times on every rank but the last, which
 * runs it twice (a negative rank counts from the last; "[4, 1:3, -1:0]"
 * names several). A rank that has run out does nothing for the rest of the
 * repetition. Inside "join{ ... }" it shadows its peers' collectives, as
 * model.join() does, and at the end of the block every rank takes the last
 * joiner's parameters and buffers; without join, its peers wait for it
 * forever, which ddpsim reports as a named deadlock.
 *
 * clip:MAX is torch.nn.utils.clip_grad_norm_(parameters, max_norm=MAX,
 * norm_type=2 or inf) on every rank, where the schedule says (before a
 * step, as a training loop does): the reference clips its gradients by the
 * coefficient of their global norm and checks the implementation's
 * (doc/SEMANTICS.md "Clipping"). It needs the gradients of a syncing
 * backward (the last backward since zero_grad synced), no backward may
 * follow it before a zero, and it may not stand inside join{...} (a rank
 * that ran out would have to shadow the norm's collective). join{} expands to
 * join_enter ... join_exit. What join requires (sched_parse refuses the
 * rest, saying why): an uneven repetition inside join ends its block (a rank
 * that runs out goes on to what follows it, so only from the end of the
 * with-block can it shadow); each iteration is whole (no_sync balanced, no
 * forward waiting for its backward across an iteration's edge); and inside
 * join every forward outside no_sync is followed by its own backward before
 * the next forward (a joined rank shadows the backward's allreduces when
 * its peers' forward announces them, so the sync must belong to the
 * forward just announced). join does not nest.
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
#include <stdint.h>
#include <sys/types.h>

#include "status.h"

#define SCHED_MAX_COUNT 100000
#define SCHED_MAX_OPS 10000000
#define SCHED_MAX_DEPTH 64
#define SCHED_DEFAULT "2*( 2*( nosync{fwd bwd} grab ) fwd bwd grab step zero fwd bwd grab step zero )"

typedef enum sched_op { OP_FWD, OP_BWD, OP_GRAB, OP_ZERO, OP_STEP, OP_ENTER, OP_EXIT, OP_JOIN_ENTER, OP_JOIN_EXIT,
                       OP_CLIP } sched_op;

#define SCHED_MAX_OVERRIDES 64

/* An uneven repetition, "[C, r:c ...]*( body )": its expansion, iterations x body_ops ops from first_op. */
typedef struct sched_uneven {
    size_t first_op, body_ops;
    uint32_t iterations;   /* the largest count: what the expansion holds */
    uint32_t count;        /* every rank's count but the named ones' */
    int nover;
    int over_rank[SCHED_MAX_OVERRIDES]; /* negative: from the last rank (-1 is the last) */
    uint32_t over_count[SCHED_MAX_OVERRIDES];
    int join;              /* the join block it ends, or -1 */
    int line, col;         /* where it was written, for errors */
} sched_uneven;

/* A join{...} block: join_enter at enter_op, join_exit at exit_op. */
typedef struct sched_join {
    size_t enter_op, exit_op;
    int divide_by_initial_world_size; /* 1: PyTorch's default */
    int uneven;            /* the uneven repetition ending it, or -1 */
} sched_join;

/* A clip op's arguments (clip_grad_norm_'s max_norm and norm_type). */
typedef struct sched_clip {
    size_t op;         /* the op it is */
    double max_norm;   /* > 0, finite */
    int inf_norm;      /* 1: norm_type=inf (the largest |g|); 0: the L2 norm */
} sched_clip;

typedef struct sched {
    unsigned char *ops; /* a sched_op each, in a byte: a schedule of a million grabs takes a few MB */
    size_t nops;
    size_t nfwd;   /* forwards: batches are numbered 0..nfwd-1 in order */
    size_t ngrabs; /* grabs: numbered 0..ngrabs-1 */
    size_t nsteps; /* steps: numbered 0..nsteps-1 */
    size_t nsyncs; /* backwards the reducer is armed for: the ones DDP syncs (descriptive) */
    sched_uneven *uneven; /* in order of first_op */
    size_t nuneven;
    sched_join *joins;    /* in order of enter_op */
    size_t njoins;
    sched_clip *clips;    /* one per clip op, in op order */
    size_t nclips;
} sched;

/*
 * --clip: a clip op before every step of s (a schedule without clip ops of
 * its own) where a training loop clips: the last backward since zero_grad
 * synced, outside join, and no backward before the next zero_grad (a step
 * inside a window, before any gradient or inside join stays unclipped).
 * Re-validated. DDP_ERR_INVALID when s has clip ops or max_norm is not
 * positive and finite.
 */
ddp_status sched_clip_steps(sched *s, double max_norm, int inf_norm);
/* The arguments of the clip op at index op (NULL when op is not a clip). */
const sched_clip *sched_clip_at(const sched *s, size_t op);

/*
 * Every rank's count of every uneven repetition at nranks ranks, into
 * counts[u * nranks + r] (nuneven * nranks entries; NULL only checks).
 * DDP_ERR_INVALID naming the repetition's line and column when a rank named
 * does not exist, one is named twice, or a rank runs out before the run's
 * first syncing backward (DDP rebuilds its buckets after that backward, and
 * a joined rank's part in the rebuild is not modelled).
 */
ddp_status sched_resolve(const sched *s, int nranks, uint32_t *counts);
/* Whether `rank` runs op at all (0: it ran out of an uneven repetition), given sched_resolve's counts. */
int sched_runs(const sched *s, const uint32_t *counts, int nranks, size_t op, int rank);
/* Which ranks run op (active[r], may be NULL); returns how many, the highest of them into *highest. */
int sched_participants(const sched *s, const uint32_t *counts, int nranks, size_t op, unsigned char *active,
                       int *highest);
/*
 * The last joiner of join block k (distributed.py _sync_final_model): the highest rank that shadowed
 * nothing, i.e. ran the block's uneven repetition to its largest count (every rank, when it has none).
 */
int sched_last_joiner(const sched *s, const uint32_t *counts, int nranks, int k);
/* The join block op lies in (enter_op <= op <= exit_op), or -1. */
int sched_join_of(const sched *s, size_t op);
/* The uneven repetition op lies in, or -1; its iteration into *iteration. */
int sched_uneven_of(const sched *s, size_t op, uint32_t *iteration);

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
 * static_graph=True: the op of the first backward that DDP cannot run, or
 * -1. DDP wraps a forward's outputs in _DDPSink, whose backward queues the
 * reducer's delayed allreduce of the first iteration; in a backward the
 * reducer is not armed for (a no_sync micro-step) that trips reducer.cpp's
 * "expect_autograd_hooks_ INTERNAL ASSERT". Which backwards queue it
 * depends on the torch:
 *  - first_iteration (PyTorch < 2.1): every forward (no_sync's too) until
 *    the second one outside no_sync wraps its outputs, and each backward
 *    through one queues it (distributed.py forward, "static_graph and
 *    num_iterations == 1"): an unarmed backward through a forward taken
 *    after the first syncing forward fails. Observed on real 1.13 DDP.
 *  - else (PyTorch 2.1 on, PR #103487 "multiple forward support for static
 *    graph"): the first backward through a sink queues it, once
 *    (_static_graph_delay_allreduce_enqueued), and every forward before it
 *    has one: the schedule's first backward must be armed. Observed on
 *    real 2.15 DDP.
 * tests/python/static_graph_check.py checks both on the torch it runs on.
 */
ssize_t sched_static_graph_conflict(const sched *s, int first_iteration);

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

/* The checks one at a time, in order, for whoever takes them as a run makes them (memory flat in their number). */
typedef struct sched_check_iter {
    size_t op, grab, step;
    sched_arming arming;
    int last; /* 0: nothing yet, 1: a backward, 2: a zero_grad */
    int fwd_in, bwd_in, synced, stepped, ended;
    unsigned acc;
} sched_check_iter;

void sched_check_iter_init(sched_check_iter *it);
/* The next check into *out: 1, or 0 after the last (the end's). */
int sched_check_next(const sched *s, sched_check_iter *it, sched_check *out);
/* "grab 3", "step 2", "end": where a check is, in a few characters. */
const char *sched_check_name(const sched_check *c, char *buf, size_t len);

/* "fwd", "bwd", ... as written in the language. */
const char *sched_op_name(sched_op op);
/* The op of that name, or -1. */
int sched_op_from_name(const char *name);

/*
 * A schedule from ops already expanded (a recorded run's), validated as
 * sched_parse validates; uneven repetitions (resolved: one count per rank),
 * join blocks and the clip ops' arguments (one per clip op, in op order) as
 * recorded, copied (NULL, 0 when there are none).
 */
ddp_status sched_from_ops(const sched_op *ops, size_t n, const sched_uneven *uneven, size_t nuneven,
                          const sched_join *joins, size_t njoins, const sched_clip *clips, size_t nclips, sched *s);

#endif
