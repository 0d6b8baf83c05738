/*
 * ops.h - what every op of a schedule means for a verification, written
 * once (internal to engine/verify). Both ways of running one use it:
 *
 *   - a live run (rank.c): the implementation is a plugin, driven here op
 *     by op beside the reference;
 *   - a replay (check.c, `ddpsim check DIR`): the implementation's values
 *     come from a recording, and the reference is replayed on the local
 *     gradients it recorded.
 *
 * The reference's side of each op, its bookkeeping (syncs, the order
 * tolerance's bound, the reference's own check, uneven inputs and join) and
 * every check's comparison live here; a driver says only where the
 * implementation's values come from and what its plugin is told, through a
 * table of callbacks (verify_side). That is the whole difference between the
 * two drivers, so a rule added here holds for both (tests/check.sh replays
 * live runs and compares the records check by check).
 */
#ifndef DDPSIM_OPS_H
#define DDPSIM_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "agreement.h"
#include "budget.h"
#include "checker.h"
#include "clock.h"
#include "coll.h"
#include "ddp_ref.h"
#include "model.h"
#include "record.h"
#include "refcheck.h"
#include "schedule.h"
#include "explain.h"
#include "faults.h"
#include "scaler.h"
#include "shard_ref.h"
#include "verify.h"

/*
 * How the parameters are judged, the one place the drivers differ in rule:
 *   PARAMS_LIVE   under the run's tolerance; a passing check that is not bitwise puts the reference's
 *                 parameters into the implementation's replica (checker_rebases);
 *   PARAMS_REPLAY each step alone: the reference's update of the recorded parameters within its own rounding
 *                 (the recording's optimizer is not ddpsim's), then the reference takes the recorded ones; the
 *                 end exactly.
 */
typedef enum verify_params_rule { PARAMS_LIVE, PARAMS_REPLAY } verify_params_rule;

/*
 * The implementation's side of a run. ctx is the driver's; any callback may
 * be NULL (nothing to do there). They are called at these points of an op:
 */
typedef struct verify_side {
    ddp_status (*before_op)(void *ctx, size_t i, sched_op op); /* op i, before anything of it */
    ddp_status (*after_op)(void *ctx, size_t i);                /* ... after it ran or was shadowed */
    void (*participants)(void *ctx);           /* who runs the op at hand is known (verify_ops.nactive ...) */
    ddp_status (*no_sync)(void *ctx, int enter);
    /* forward: the batch is filled (into verify_ops.batch), then forward_begin runs after the reference's
     * forward_begin, forward_end after the reference's forward */
    ddp_status (*batch)(void *ctx, model_batch *batch);
    ddp_status (*forward_begin)(void *ctx);
    ddp_status (*forward_end)(void *ctx);
    /* backward: backward_begin, then the reference's local backward calling grad_ready after its own hook of
     * each parameter, then backward_end before the reference syncs, after_backward once it has */
    void (*backward_begin)(void *ctx);
    void (*grad_ready)(void *ctx, int p);
    ddp_status (*backward_end)(void *ctx);
    /* ... after backward_end: how many reductions (and bytes, and how many of them were reduce-scatters) the
     * implementation made in backward `micro` (this rank's, from 0); known = 0 when nobody counted. What counts
     * against a backward that does not sync is the mode's rule (ops.c check_comm). */
    ddp_status (*backward_comm)(void *ctx, uint64_t micro, record_comm_counts *counts);
    ddp_status (*after_backward)(void *ctx, int synced);
    ddp_status (*zero_grad)(void *ctx);
    ddp_status (*step)(void *ctx); /* after the reference's step */
    /* clip: the implementation clips its gradients as clip_grad_norm_(max_norm, norm_type) and says by which
     * coefficient (NULL: this run cannot clip) */
    ddp_status (*clip)(void *ctx, const sched_clip *c, float *coef);
    /* --loss-scale: before a backward, the scale the implementation multiplies this rank's loss by (ref_scale: the
     * reference's, which a driver without a scaler of its own gives back); at the first clip or step since the
     * last step, its unscale_ and whether it found an inf or NaN (NULL: it is the reference's finding) */
    ddp_status (*loss_scale)(void *ctx, float ref_scale, float *scale);
    ddp_status (*unscale)(void *ctx, int *found_inf);
    /* the token loss (--loss-norm): before a backward, the factor the implementation multiplies its summed loss by
     * (ref: the intended one, which a driver without a trainer of its own gives back); the driver sets it on the
     * implementation's replica, whose own backward takes it */
    ddp_status (*loss_factor)(void *ctx, const ddpsim_loss_window *w, float ref, float *factor);
    ddp_status (*join_enter)(void *ctx, int divide_by_initial_world_size);
    ddp_status (*join_exit)(void *ctx, int last_joiner);
    ddp_status (*join_shadow)(void *ctx);      /* a forward of the peers, shadowed by this rank */
    ddp_status (*shadow_synced)(void *ctx);    /* a sync of the peers this rank contributed zeros to */
    /* The implementation's values of check k of a kind (its gradients at a grab, its parameters after a step or
     * at the end) and its buffers (NULL: compared as the forwards went, verify_ops_forward_buffers); required. */
    ddp_status (*values)(void *ctx, record_values kind, uint64_t k, const float **actual, const float **buffers);
    /* after a grab's checks (held: what this rank held there, NULL: everything) */
    ddp_status (*grabbed)(void *ctx, verify_record *rec, const float *actual, const held_mask *held);
    /* Grab k's layout: which .grad were None (none[p] = 1; *none NULL: not known, None is not checked) and what
     * this rank held (*held: verify_ops.held when called; NULL: everything). */
    ddp_status (*grab_layout)(void *ctx, uint64_t k, const unsigned char **none, const held_mask **held);
    /* after a check's comparison (sharded runs): what the padding of the shards just read held, into rec */
    void (*padding)(void *ctx, record_values kind, verify_record *rec);
} verify_side;

typedef struct verify_ops {
    const tolerance *tol;
    const sched *schedule;
    world_rank *wr;
    int rank, n;
    void *user;               /* the shared user area: the records' stream (stream.h) */
    model *m;                 /* the reference's replica (not owned) */
    ddp_ref *ddp;             /* its DDP (not owned) */
    model_batch batch;
    float lr, momentum;
    ddp_adamw adamw;
    ddp_optim optim;          /* the reference's step (optim.h) */
    ddp_comm_hook comm_hook;
    verify_params_rule params_rule;
    verify_sabotage sabotage; /* ddpsim's own tests: a deliberately wrong reference */
    int bounded;              /* --tolerance order: the bound is carried (budget.h) */
    order_budget budget;
    float *param_allow;       /* the parameters' bound after a step */
    float *momentum_allow;    /* ... and the momentum buffers' (AdamW: exp_avg's), carried from step to step
                               * (budget_momentum, budget_adamw) */
    float *second_allow;      /* ... AdamW's exp_avg_sq's */
    ref_check refcheck;       /* the reference's own check (refcheck.h) */
    agreement_state agreement; /* the implementation's ranks agree (agreement.h) */
    verify_record buffers;    /* buffer divergences since the last check (replays), merged into its record */
    shard_ref *shard;         /* a sharded run's reference (--shard; not owned): the gradients, the step and the
                               * parameters follow it instead of DDP's, which still decides when a backward syncs */
    const held_mask *param_held; /* what this rank holds of the parameters (FSDP, HSDP), NULL: all; a driver may
                                  * set it in verify_side.values for the check at hand (a replay's held.json) */
    float *shard_allow;       /* --shard under the order tolerance: the bound of the gradients (budget_sharded) */
    double *shard_abs;        /* ... and its scratch */
    double shard_unscale;     /* ... times this (--loss-scale): the unscales since zero_grad multiply it, and a
                               * backward's scaled terms added after one lift it back to at least 1 */
    int set_to_none;          /* zero_grad makes every .grad None (the sharded reference's L follows it) */
    const held_mask *held;    /* what this rank holds of the gradients (sharded DP), NULL: all (the driver's), unless
                               * a grab's layout says otherwise (verify_side.grab_layout) */
    size_t op;                /* the op at hand */
    size_t bwd_op;            /* the op of the last backward: where its sync happened, for the report */
    size_t next_check;        /* checks so far (sched_checks) */
    uint64_t micro;           /* backwards this rank ran so far */
    int allow_unsynced_comm;  /* --allow-unsynced-comm */
    uint64_t unsynced_reductions, unsynced_bytes, unsynced_op; /* since the last check (verify_record's) */
    verify_clip_check clip_failure; /* the first clip since the last check that failed its check */
    int clipped;              /* a clip since zero_grad: the gradients are the clipped ones */
    float *clip_allow;        /* ... and under the order tolerance their bound (clip_bound_after) */
    float *clip_gather;       /* [2 n]: every rank's coefficient and the reference's */
    /* --loss-scale (scaler.h): the reference's GradScaler on this rank */
    scaler_config scaler_cfg;
    scaler_state scaler;
    int unscaled;             /* unscale_ ran since the last step (the first clip or step after it runs it) ... */
    int found_inf;            /* ... and the reference found an inf or NaN: its step is skipped */
    int step_skipped;         /* the step at hand was skipped (the parameters' check then allows nothing) */
    int impl_found_inf;       /* ... and the implementation's finding on this rank */
    int unscaled_since_zero;  /* the gradients are unscaled ones: the reference's own check (of scaled sums) is off */
    const verify_fault *faults; /* --fault: an inf or NaN planted into a backward (faults_planted) */
    int nfaults;
    int plants_recorded;      /* verify_ops_config's */
    int planted;              /* the backward at hand plants plant_value into this rank's gradient */
    float plant_value;
    int fault_window;         /* some rank's planted inf or NaN since zero_grad (every rank knows: a sync spreads it) */
    long fault_op;            /* ... the first such backward, and its rank */
    int fault_rank;
    tolerance tol_planted;    /* the run's tolerance with match_planted, where tol points when a fault plants */
    verify_scale_check scale_failure; /* the first loss-scale check since the last check that failed */
    loss_norm loss_norm;      /* the token loss's normalization (LOSS_NORM_NONE: no token loss) ... */
    loss_windows lw;          /* ... this rank's windows and counts (loss_norm.h) */
    uint64_t seed;            /* ... of the data they count */
    const loss_tokens *tokens; /* ... or the counts as given (a recording's; NULL: generated from the seed) */
    size_t bwd_index;
    int mixed_sequence;       /* ... set by a side's loss_factor when its micro-batch had no one factor: this
                               * sequence's tokens got mixed_factor, the first's the factor returned (-1: one) */
    float mixed_factor;         /* ... the backward at hand, in op order */
    verify_norm_check norm_failure; /* ... the first failing factor since the last check, */
    long norm_window;         /* ... its window (-1: none open), whose later factors narrow its matches */
    uint64_t grab, step;      /* grabs and steps so far */
    int last_synced;          /* the last backward synced, and none since zero_grad ... */
    int bwd_since_zero;       /* ... a backward ran since the start or the last zero_grad */
    /* uneven inputs (schedule.h) */
    uint32_t *counts;         /* sched_resolve's: every rank's count of every uneven repetition */
    unsigned char *active;    /* [n]: which ranks run the op at hand */
    int nactive, highest;     /* how many, and the highest of them */
    int in_join;              /* inside a join block */
    int peer_depth;           /* no_sync depth of the ranks still running (what a joined rank shadows by) */
    int uneven_window;        /* some rank ran out since the last zero_grad every rank ran (verify_record.uneven) */
    uint64_t *cost_ns;        /* [COST_N]: where the checks' time goes (verify_rank_figures.cost_ns), or NULL */
    verify_rank_figures *fig; /* this rank's figures (the implementation's reductions), or NULL */
    explain_state explain;    /* what a failing check's pattern is looked for in (explain.h) */
    int explain_across_ranks; /* verify_ops_config's */
    int params_averaged;      /* verify_ops_config's */
    double *abs_local;        /* ... the sum of |local gradient| on this rank since zero_grad, and [n] its micro-steps;
                               * [n + 1 ..] the sums over ranks (budget_averaged_params) */
} verify_ops;

/* What verify_ops_init needs besides the reference (m, ddp: built by the driver, not owned). */
typedef struct verify_ops_config {
    const tolerance *tol;
    const sched *schedule;
    float lr, momentum; /* the step: torch.optim.SGD (optim.h) */
    ddp_adamw adamw;    /* ... or torch.optim.AdamW */
    ddp_comm_hook comm_hook;
    verify_params_rule params_rule;
    verify_sabotage sabotage;
    verify_agreement *agree; /* this rank's, in the shared segment */
    verify_rank_figures *fig; /* this rank's figures, or NULL */
    int explain_across_ranks; /* a failing grab's pattern may use sums over ranks (a collective at every grab) */
    int allow_unsynced_comm;
    int set_to_none;
    int params_averaged; /* the implementation averages parameters, not gradients (record.h): a step's bound is
                          * budget_averaged_params (with PARAMS_REPLAY) */
    scaler_config scaler; /* --loss-scale (on 0: none) */
    const verify_fault *faults; /* --fault's, for the inf and NaN planted into backwards */
    int nfaults;
    int plants_recorded;        /* the local gradients carry them already (a recording's "planted"): the window's
                                 * checks follow them, the reference's backward plants nothing */
    loss_norm loss_norm;        /* verify_loss_norm's: the token loss's normalization, checked at every backward */
    uint64_t seed;              /* the data's, whose token counts the windows hold */
    const loss_tokens *tokens;  /* the counts as a recording gives them (NULL: generated from the seed) */
} verify_ops_config;

/* The backward at hand plants an inf or NaN into this rank's gradient (*value): a driver computing the
 * implementation's own backward plants it there too. */
int verify_ops_planted(const verify_ops *v, float *value);

/* --loss-scale: this step is skipped (the reference found an inf or NaN at its unscale); the implementation skips
 * it too, whatever it found (a different finding failed the unscale's check). */
int verify_ops_impl_skips_step(const verify_ops *v);

/* The counts of the uneven inputs and the rank's checks' state; DDP_ERR_NOMEM. */
ddp_status verify_ops_init(verify_ops *v, const verify_ops_config *cfg, world_rank *wr, void *user);
/* The reference, once the driver built it: the sums and bounds sized by it. */
ddp_status verify_ops_attach(verify_ops *v, model *m, ddp_ref *ddp);
void verify_ops_free(verify_ops *v);

/*
 * Run the schedule on this rank, then (unless it ran out outside join, as
 * *ran_out says) the final parameter check. Stops at the first failure.
 */
ddp_status verify_ops_run(verify_ops *v, const verify_side *side, void *ctx, int *ran_out);

/*
 * A collective of ddpsim's checks, made as the checks' (coll_set_caller: a mismatch names whose call it was),
 * the rank's own thread back to the reference's after it.
 */
ddp_status verify_checks_returned(ddp_status s);
#define AS_CHECKS(call) verify_checks_returned((coll_set_caller(COLL_CALLER_CHECKS), (call)))

/* Run stmt and add its wall time to v's cost k (verify_cost). */
#define VERIFY_COSTED(v, k, stmt)                                                                                   \
    do {                                                                                                             \
        uint64_t costed_t0_ = clock_now_ns();                                                                        \
        stmt;                                                                                                        \
        if ((v)->cost_ns)                                                                                            \
            (v)->cost_ns[k] += clock_now_ns() - costed_t0_;                                                          \
    } while (0)

/* What a grab now records as synced: 1 the last backward synced, 0 it did not, -1 none since zero_grad. */
int verify_ops_grab_synced(const verify_ops *v);

/* A replay's forward: the recorded buffers the module saw (`seen`) against what the reference's rule gives. */
void verify_ops_forward_buffers(verify_ops *v, const float *seen);

#endif
