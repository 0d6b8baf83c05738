/*
 * verify.h - one verification run: every rank executes the schedule on a
 * reference DDP and on the implementation under test (each with its own
 * model replica, the same data), compares their gradients at every grab as
 * they are taken, and writes a small record per (grab, rank) into the
 * shared segment. The parent gets the records and judges; it never computes
 * a gradient.
 *
 * Also per grab: a hash of each rank's reference gradients (so the parent
 * can check that ranks agree after a sync and differ under no_sync) and,
 * after a syncing backward, the reference against the exact average over
 * ranks of every local gradient since zero_grad, each rank a slice
 * (checker.h).
 */
#ifndef DDPSIM_VERIFY_H
#define DDPSIM_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#include "ddp_ref.h"
#include "ddpsim_impl.h"
#include "faults.h"
#include "interleave.h"
#include "loss_norm.h"
#include "mesh.h"
#include "nccl_comm.h"
#include "schedule.h"
#include "shard_ref.h"
#include "status.h"
#include "tolerance.h"
#include "trace.h"
#include "world.h"

struct verify_record;
/*
 * Where the parent puts the records as the ranks write them (stream.h):
 * always into the run's tally (verify_tally, what the verdict is judged
 * from); into verify_result.records too with keep_records (memory in
 * proportion to the checks: ddpsim's own tests read them back); and to
 * on_check, check by check in schedule order, N records in rank order (the
 * report's per-check lines).
 */
typedef void (*verify_check_fn)(void *arg, const sched_check *check, const struct verify_record *recs, int nranks);
typedef struct verify_sink {
    int keep_records;
    verify_check_fn on_check;
    void *arg;
} verify_sink;

/*
 * Deliberately wrong references, for ddpsim's own tests of its sanity
 * checks (each check must be seen firing): never set by the program.
 */
typedef enum verify_sabotage {
    SABOTAGE_NONE = 0,
    SABOTAGE_RANK_DISAGREES,  /* rank 1's reference flips a bit of its gradient after every sync */
    SABOTAGE_DROPS_MICROSTEPS, /* the reference forgets the accumulated gradient before every syncing backward */
    SABOTAGE_SAME_DATA,       /* every rank trains on rank 0's batches */
} verify_sabotage;

/* Where the implementation under test's reductions run (the reference always runs on the CPU). */
typedef enum verify_backend { VERIFY_BACKEND_CPU, VERIFY_BACKEND_NCCL } verify_backend;

typedef struct verify_config {
    int nranks;
    const char *model_spec;
    int batch;
    uint64_t seed;
    const sched *schedule;
    double clip_max;        /* --clip: > 0 puts clip:clip_max before every step a training loop clips
                             * (sched_clip_steps), in single runs and the battery's scenarios alike */
    int clip_inf;           /* ... with norm_type inf */
    ddp_config ddp;
    tolerance tol;
    const char *impl;       /* the implementation under test: its name (or plugin path) ... */
    const ddpsim_impl_ops *impl_ops; /* ... and its callbacks (impl_open) */
    const char *dump_dir;   /* NULL: no dump */
    int dump_force;         /* replace an earlier ddpsim dump (or recording) in dump_dir or record_dir */
    const char *record_dir; /* NULL: not recorded; else the run as a recorded run (record.h) for `ddpsim check` */
    const char *schedule_text; /* the schedule as written, for the dump's manifest (NULL: not recorded) */
    const char *inputs_dir; /* NULL: seeded init and data; else init and batches from this dump layout */
    double timeout_s;
    verify_fault faults[VERIFY_MAX_FAULTS];
    int nfaults;
    int chaos;              /* shake timing with chaos_seed (never semantics) */
    uint64_t chaos_seed;
    interleave_config interleave; /* --sched: a plugin's threads one at a time, in chaos_seed's interleaving */
    const char *trace_path; /* write the JSON-lines event log here */
    const verify_replay *replay;
    verify_backend backend;
    int ngpus;              /* NCCL: GPUs the parent's probe found (>= 1) */
    int nccl_avg;           /* NCCL: built-ins leave buckets unscaled and reduce with ncclAvg */
    int nccl_ring_check;    /* NCCL: also reduce each call's input on the CPU in ring order, counting the elements
                             * NCCL matched bit for bit (--nccl-ring-check) */
    verify_sabotage sabotage; /* tests only */
    verify_sink sink;
    int allow_unsynced_comm; /* --allow-unsynced-comm: reductions in a backward that does not sync are not a
                              * divergence */
    shard_mode shard;       /* --shard: sharded data parallelism checked against the sharded reference (shard_ref.h) */
    mesh mesh;              /* --mesh RxS (HSDP); {0, 0}: 1 x nranks */
    int rank_cpu;           /* count each rank's CPU time inside collectives too (verify_rank_cpu_outside_s): two
                             * system calls per collective, so only the benchmarks that report it ask */
    loss_norm loss_norm;    /* --loss-norm on the token model (loss_norm.h); LOSS_NORM_NONE: lm's default,
                             * global-tokens, or no token loss at all */
} verify_config;

/* The normalization a run of cfg checks: cfg->loss_norm, global-tokens on the token model when none was given,
 * LOSS_NORM_NONE for a model without a token loss. */
loss_norm verify_loss_norm(const verify_config *cfg);

#define VERIFY_DEFAULT_RANKS 2
#define VERIFY_DEFAULT_BATCH 4

/*
 * The run `ddpsim` makes with no option, the one place its defaults are
 * written: VERIFY_DEFAULT_RANKS ranks, the built-in reference, the default
 * model at VERIFY_DEFAULT_BATCH, seed 1, bitwise, ddp_config_default(),
 * WORLD_DEFAULT_TIMEOUT_S; no schedule (the caller parses one).
 */
void verify_config_defaults(verify_config *cfg);


/* verify_record.first_none: the implementation's .grad is None where DDP's holds a tensor, or the reverse. */
enum { VERIFY_NONE_NO = 0, VERIFY_NONE_ACTUAL, VERIFY_NONE_EXPECTED };
/* ... as a report says it: "`.grad` is None, DDP's holds a tensor", ... */
const char *verify_none_text(int first_none);

/* What rank r found at check k (sched_checks: the gradients at a grab, the parameters after a step or at the end). */
/* What a diverging tensor's values are (pattern.h), looked for at the first diverging tensor of a failing record. */
typedef enum verify_pattern_kind {
    PATTERN_NONE = 0,   /* not looked for: the record passed, or diverged otherwise (None, padding, a buffer) */
    PATTERN_NOT_FOUND,  /* looked for, none fits */
    PATTERN_ZERO,       /* every element zero: dropped (of a step: the update was not applied) */
    PATTERN_LOCAL,      /* this rank's own local gradient since zero_grad: never reduced */
    PATTERN_LAST_MICRO, /* the last micro-step's local gradient alone: the accumulation lost */
    PATTERN_REDUCED_UNSYNCED, /* where DDP holds the local sum: the average over ranks of it (synced too early) */
    PATTERN_LAST_REDUCED, /* the average over ranks of the last micro-step alone: the earlier ones dropped */
    PATTERN_LAST_REDUCED_EARLIER_LOCAL, /* the last micro-step averaged, the earlier ones added unreduced */
    PATTERN_EARLIER_REDUCED_LAST_LOCAL, /* the earlier micro-steps averaged, the last added unreduced */
    PATTERN_ONTO_STEPPED, /* the reference's plus the gradient the last step took: zero_grad missed */
    PATTERN_STALE,      /* the reference's values at an earlier check */
    PATTERN_UNCHANGED,  /* the implementation's own values at an earlier check: nothing moved since */
    PATTERN_FACTOR,     /* a constant times the reference's (of a step: times its update) */
    PATTERN_ROUNDING,   /* the reference's values rounded otherwise: another order of the same sums */
    PATTERN_NO_MOMENTUM, /* of a momentum step: the update along the gradient alone, the buffer not applied */
    PATTERN_SGD_UPDATE  /* of an AdamW step: plain SGD's update, -lr times the gradient */
} verify_pattern_kind;

/* A factor's name (pattern.h pattern_factor_name). */
typedef enum verify_pattern_name {
    PNAME_NONE = 0, PNAME_NEG, PNAME_N, PNAME_INV_N, PNAME_K, PNAME_INV_K, PNAME_R, PNAME_INV_R, PNAME_S, PNAME_INV_S,
    PNAME_SQRT_N, PNAME_INV_SQRT_N, PNAME_POW2, PNAME_N_OVER_RUNNING, PNAME_RUNNING_OVER_N, PNAME_SQRT_R,
    PNAME_INV_SQRT_R, PNAME_SQRT_S, PNAME_INV_SQRT_S, PNAME_GROWTH, PNAME_INV_GROWTH, PNAME_LOSS_SCALE,
    PNAME_INV_LOSS_SCALE
} verify_pattern_name;

typedef struct verify_pattern {
    int kind;           /* verify_pattern_kind */
    int on_update;      /* a parameter check: the pattern is of the update (after - before the step) */
    int name, exponent; /* PATTERN_FACTOR: verify_pattern_name, and 2's exponent for PNAME_POW2 */
    double factor;      /* PATTERN_FACTOR */
    uint64_t check;     /* PATTERN_STALE, PATTERN_UNCHANGED: the earlier check's number (sched_checks) */
    uint64_t window;    /* PNAME_K: k */
} verify_pattern;

/*
 * A clip op's check (doc/SEMANTICS.md "Clipping"): every rank's coefficient must be the same bits where the
 * reference's are, and lie in the interval the reference's norm proves for a correct implementation.
 */
enum { VERIFY_CLIP_OK = 0, VERIFY_CLIP_BOUND, VERIFY_CLIP_RANKS };
typedef struct verify_clip_check {
    int failed;             /* VERIFY_CLIP_RANKS: the ranks' coefficients differ where the reference's agree (every
                             * rank's record names the first rank whose bits differ from its own); else
                             * VERIFY_CLIP_BOUND: this rank's lies outside [lo, hi] */
    uint64_t op;            /* the clip's op */
    float coef;             /* this rank's coefficient (the implementation's) */
    float ref_coef;         /* the reference's, from its norm rounded to float */
    double ref_norm;        /* the reference's global norm */
    double lo, hi;
    int outside;            /* coef lies outside [lo, hi] (with VERIFY_CLIP_RANKS too) */
    verify_pattern norm;    /* when both clipped: the implementation's norm over the reference's (ref_coef / coef),
                             * PATTERN_FACTOR and its name among the run's constants (pattern.h); else PATTERN_NONE */
    int other_rank;
    float other_coef;
} verify_clip_check;

/*
 * Loss scaling's checks (--loss-scale, doc/SEMANTICS.md "Loss scaling"): the scale the implementation multiplied a
 * backward's loss by must be the reference's, and its finding of an inf or NaN at the unscale (its decision to skip
 * the step) the reference's, on every rank.
 */
enum { VERIFY_SCALE_OK = 0, VERIFY_SCALE_APPLIED, VERIFY_SCALE_SKIP };
typedef struct verify_scale_check {
    int failed;          /* VERIFY_SCALE_APPLIED: scale is not ref_scale at backward op `op`; VERIFY_SCALE_SKIP: at the
                          * unscale of op `op` (a clip or a step) found_inf is not ref_found_inf */
    uint64_t op;
    float scale, ref_scale;
    int found_inf, ref_found_inf;
    long fault_op;       /* VERIFY_SCALE_SKIP: the backward whose planted inf or NaN the reference found (-1: none) */
    int fault_rank;
} verify_scale_check;

/*
 * The trainer's loss normalization (the token model, lm; loss_norm.h): the factor the implementation multiplied a
 * backward's summed token loss by must be the one its --loss-norm intends, within two roundings.
 */
typedef struct verify_norm_check {
    int failed;            /* the first backward since the check before whose factor did not hold: */
    loss_norm norm;        /* what the run intends */
    uint64_t op;
    int micro, micro_steps; /* its place in its window, and the window's backwards */
    float factor, ref_factor; /* the implementation's, and the intended one rounded */
    uint64_t tokens, window_tokens, rank_window_tokens; /* valid tokens: this micro-batch's on this rank, the
                                                          * window's on every rank, and on this rank */
    unsigned matches;      /* the mistakes (1u << LOSS_CAND_...) that give every factor of the window from the failing
                            * one on, */
    int backwards;         /* ... over how many backwards (those with valid tokens) */
    double ratio;          /* ... the first one's factor over the intended one, */
    int constant;          /* ... and every later one's the same (a constant factor) */
    int mixed_sequence;    /* >= 0: not one factor for the micro-batch: this sequence's valid tokens got */
    float mixed_factor;    /* ... this one, the first sequence's `factor` (a recording's, record.h) */
} verify_norm_check;

typedef struct verify_record {
    int done;
    int joined;             /* this rank had run out of an uneven repetition: it had nothing to check here */
    int uneven;             /* some rank ran out since the last zero_grad every rank ran: the ranks' gradients may
                             * differ, as the reference's do */
    int synced;             /* gradients: the reference's last backward synced: 1, 0; -1 no backward since zero_grad
                             * (and -1 for parameters) */
    double max_abs;         /* largest |impl - ref| over finite pairs */
    uint32_t max_ulp;
    double bound_ratio;     /* order tolerance: the largest |impl - ref| over its element's bound (<= 1 passes) */
    uint64_t ndiff;         /* elements outside the tolerance */
    uint64_t nonfinite;     /* elements where either side is NaN or infinite */
    int has_first;          /* the first differing element: */
    int first_param;        /* ... of this parameter, or with first_buffer of this buffer (model_buffer_at) */
    int first_buffer;
    int first_none;         /* the first difference is whether the .grad is None: VERIFY_NONE_ACTUAL, _EXPECTED */
    int first_padding;      /* ... is a padding element of a sharded layout, not zero: first_param is the flat unit,
                             * first_index the element's offset in the padded unit */
    uint64_t first_index;
    float first_expected, first_actual;
    uint32_t first_ulp;
    uint64_t ulp_hist[TOL_ULP_BINS]; /* ulp distances of the finite pairs (tol_ulp_bin) */
    uint64_t nonzero;       /* elements where either side is not zero: what the grab could tell apart */
    uint64_t ref_hash;      /* of the reference's gradient (or parameter) bits */
    uint64_t ref_sync_hash; /* after a sync: of the parameters it reduced, which every rank must hold alike (a
                             * parameter left out keeps its local gradient, as find_unused's rule before
                             * PyTorch 2.4 leaves one used earlier in the window) */
    uint64_t impl_hash;     /* of the implementation's (to see order dependence across chaos seeds) */
    uint64_t unsynced_reductions; /* communication: the implementation reduced in a backward that does not sync
                                   * (PyTorch DDP reduces nothing there), since the check before: how often, */
    uint64_t unsynced_bytes, unsynced_op; /* ... how much, and the first such backward's op */
    verify_clip_check clip; /* the first clip since the check before that failed its check (failed 0: none) */
    verify_scale_check scale; /* the first loss-scale check since the check before that failed (failed 0: none) */
    verify_norm_check norm; /* the first loss-normalization check since the check before that failed (0: none) */
    uint64_t planted;       /* non-finite elements matched where the reference's are (a planted inf or NaN) */
    verify_pattern pattern; /* a failing record: what the first diverging tensor's values are (pattern.h) */
    int global_checked;     /* after a syncing backward: this rank's slice of the reference checked (checker.h) */
    double global_ratio;    /* the largest |reference - exact average| over its proven rounding bound (<= 1) */
    /* Per parameter, what the report's heatmap shows (--html; 0 for a parameter not compared or the same bits): */
    uint8_t param_ulp[MODEL_MAX_PARAMS];   /* the largest ulp distance u as 1 + floor(log2(u)) (1..32); 255: a
                                            * non-finite element on one side alone */
    uint8_t param_bound[MODEL_MAX_PARAMS]; /* the order tolerance: the largest |difference| over its bound, in
                                            * 1/200ths, 255 for 1.275 and above (or an infinite ratio) */
    uint8_t param_bad[MODEL_MAX_PARAMS];   /* VERIFY_PARAM_COMPARED, | VERIFY_PARAM_BAD: an element outside the
                                            * tolerance, or .grad None on one side */
} verify_record;

#define VERIFY_PARAM_BAD 1u
#define VERIFY_PARAM_COMPARED 2u

/*
 * The implementation's ranks against each other: after every syncing
 * backward all of them must hold the same bits for every parameter the sync
 * reduced, whatever the tolerance against the reference. The first
 * disagreement, from the side of a rank that differs from rank 0.
 */
typedef struct verify_agreement {
    uint64_t syncs;         /* syncing backwards checked */
    int differs;            /* this rank differed from rank 0 (the first time any rank did) */
    size_t op;              /* the backward's op */
    int param;
    uint64_t index;
    int base;               /* the rank compared with: 0, or under join the first rank still running */
    float rank0, mine;      /* the element on rank `base` and here */
} verify_agreement;

/* What one rank measured of its own run. */
/* Where a rank's time goes besides the model's math (verify_rank_figures.cost_ns): each check, and the
 * implementation's own callbacks. Wall time, waiting in the check's collectives included. */
typedef enum verify_cost {
    COST_IMPL,        /* the implementation's callbacks: its own DDP (a second replica's reductions) */
    COST_SHARED_TEST, /* each forward: are the implementation's parameters and buffers the reference's? */
    COST_REF_SUMS,    /* each backward: the reference's own check, the exact sums of every local gradient */
    COST_REF_CHECK,   /* each synced grab: those sums reduced across ranks and compared with the reference */
    COST_AGREEMENT,   /* each sync: the implementation's ranks hash and compare their gradients */
    COST_COMPARE,     /* each grab and parameter check: element by element, with the digests */
    COST_BOUND,       /* --tolerance order: the bound carried through accumulations and syncs */
    COST_OUTPUT,      /* --dump, --record, --trace: writing */
    COST_N
} verify_cost;
const char *verify_cost_name(verify_cost c);

/* Bytes a recording did not count (record.h RECORD_BYTES_UNCOUNTED: torch's CommDebugMode counts calls only). */
#define VERIFY_BYTES_UNCOUNTED UINT64_MAX
struct verify_rank_figures;
/* A backward's reductions into a rank's figures: all of them (bytes may be VERIFY_BYTES_UNCOUNTED, and then the
 * total is), and those held against a backward that does not sync (ops.c check_comm). */
void verify_count_comm(struct verify_rank_figures *fig, uint64_t reductions, uint64_t bytes, uint64_t unsynced);

typedef struct verify_rank_figures {
    uint64_t compute_ns;           /* forward and backward math */
    uint64_t cost_ns[COST_N];      /* verify_cost */
    uint64_t impl_comm_hidden_ns;  /* the implementation's collectives while backward was still computing */
    uint64_t impl_comm_exposed_ns; /* ... and after it, until its backward_end returned */
    uint64_t cpu_ns;               /* the rank process's CPU time (clock_cpu_ns) before it tears down */
    uint64_t setup_cpu_ns;         /* ... when its setup ended (both replicas built and broadcast), before its
                                    * first op */
    uint64_t setup_coll_cpu_ns;    /* the CPU time inside collectives by then (world_coll_cpu_ns) */
    long pss_kib, private_kib, shared_kib; /* the rank's memory before it tears down (machine_memory_self; -1:
                                            * the kernel does not say) */
    int comm_known;                /* the implementation's reductions were counted (live, or a recording's comm.json) */
    uint64_t impl_reductions, impl_reduced_bytes, impl_unsynced_reductions; /* ... in every backward, and in the
                                                                              * ones that do not sync, held against
                                                                              * them (a sharded mode's own allowed) */
    int ref_comm_known;            /* the reference's traffic below is this run's */
    uint64_t ref_reductions, ref_reduced_bytes; /* ... so far: what PyTorch's DDP moves (ddp_ref_comm_counts), or a
                                                 * sharded run's mode (shard_required_bytes; reductions 0) */
    uint64_t clips, clips_failed;  /* clip ops checked on this rank, and how many failed (verify_clip_check) */
    double clip_worst;             /* the passing ones' largest distance from the reference's coefficient, over
                                    * what the bound allows on that side (<= 1) */
    float clip_ref_min, clip_ref_max; /* the reference's coefficients, smallest and largest (1: nothing clipped) */
    uint64_t unscales, skips;      /* --loss-scale: unscales checked on this rank, and how many the reference skipped */
    uint64_t scale_checks;         /* ... backwards whose scale was checked */
    uint64_t scales_failed;        /* ... loss-scale checks that failed (verify_scale_check) */
    float scale_min, scale_max;    /* ... the reference's scales, smallest and largest */
    uint64_t planted;              /* ... non-finite elements matched where a planted inf or NaN made the reference's */
    uint64_t norm_checks, norms_failed; /* --loss-norm: backwards whose factor was checked, and how many failed */
    interleave_figures sched;      /* --sched: what the rank's scheduler did */
} verify_rank_figures;

/*
 * The records of a run folded as they arrive (judge_take_check): everything
 * judge_run decides from, in memory that does not grow with the checks.
 */
typedef struct verify_tally {
    size_t checks_taken;
    size_t checks_failed, joined_records, grabs_failed, params_failed, params_checked;
    int failed;                 /* some check failed: */
    verify_record first;        /* the first failing record (schedule order, then rank) */
    sched_check first_where;    /* its check */
    size_t first_check;
    int first_rank;
    size_t synced_grabs, synced_disagree, local_grabs, local_identical, global_checked, global_failed;
    double global_worst, bound_worst;
    size_t informative_grabs;
    size_t steps_checked;           /* parameter checks after a step (not the end's) */
    uint64_t ulp_hist[TOL_ULP_BINS]; /* over every gradient record */
    uint32_t max_ulp;
    uint64_t ref_fingerprint, impl_fingerprint; /* every record's ref_hash (impl_hash), in check then rank order; */
    size_t ref_checks;          /* ... ref_hash of the checks up to the first failing one: after it the reference
                                 * goes on from the implementation's parameters (ops.c do_params) */
} verify_tally;

typedef struct verify_result {
    int nranks;
    size_t ngrabs;
    size_t nchecks;         /* grabs, steps and the end (sched_nchecks) */
    int params_only;        /* only parameters are compared (a recording's model averaging, record.h): the steps'
                             * checks are what verifies it */
    loss_norm loss_norm;    /* the token loss's normalization the run checked (LOSS_NORM_NONE: no token loss) */
    verify_tally tally;     /* what the records said (judge.h) */
    sched_check *checks;    /* with keep_records: [nchecks], what each record is; else NULL */
    verify_record *records; /* with keep_records: [nchecks][nranks]; else NULL */
    nccl_figures *nccl;     /* [nranks] with the NCCL backend, else NULL */
    verify_rank_figures *figures; /* [nranks] */
    verify_agreement *agreement;  /* [nranks] */
    int impl_refused;       /* the implementation's create() returned an error on some rank (it refuses the run) */
    int bad_record;         /* ddpsim check: a rank found a recorded file it could not use (a value not finite) */
    world *w;               /* for world_describe() after a fault */
    double wall_s;
    long rank_peak_kib;     /* largest peak RSS of a rank process */
    long rank_total_kib;    /* the ranks' peaks added up (a page every rank maps counts once per rank) */
    long ranks_pss_kib;     /* the ranks' PSS at their end added up: every page counted once (-1: unknown) */
    long ranks_private_kib; /* ... of which pages no other process maps */
    long parent_peak_kib;
    /* while the run is under way: the records' way in (run.c) */
    const sched *sched;
    sched_check_iter check_iter;
    size_t taken;
    verify_sink sink;
    size_t ring;
} verify_result;

/*
 * Validate cfg (verify_check_config), prepare the dump directory (and write
 * its manifest.json, so that even a failed run's dump can be replayed),
 * create the world and run. Returns DDP_OK when the run completed (whatever
 * it found), DDP_ERR_INVALID for a bad configuration, a world status
 * otherwise; out is filled in every case once the world exists (free with
 * verify_result_free).
 */
ddp_status verify_run(const verify_config *cfg, verify_result *out);

/* --dump's directory, ready (dump_prepare) and with its manifest, before any rank writes into it. */
ddp_status verify_prepare_dump(const verify_config *cfg);
/* --record's directory, ready and with its manifest (record.h). */
ddp_status verify_prepare_record(const verify_config *cfg);
/*
 * --prepare DIR: the run's inputs without running it, in the dump layout
 * (dump.h) that --inputs reads: manifest.json (the model, the options, the
 * schedule and its ops), init/ (what every rank holds after the initial
 * broadcast) and every rank's batch of every forward (with the branch of
 * a model that has one).
 */
ddp_status verify_prepare_inputs(const verify_config *cfg, const char *dir);

/* The directory name of the implementation under test in a dump: its table's name, made safe. Returns buf. */
const char *verify_dump_name(const verify_config *cfg, char *buf, size_t len);

/*
 * The validation verify_run starts with, touching nothing (a sim front end
 * calls it first, before any output): DDP_ERR_INVALID with why, starting
 * with the option to blame ("--model: ...").
 */
ddp_status verify_check_config(const verify_config *cfg);
void verify_result_free(verify_result *r);

/*
 * Rank r's CPU time outside collectives, in seconds: its compute and checks,
 * not its waits, whose spinning depends on who arrives when. Of a run with
 * rank_cpu set that completed (else the whole CPU time, or 0). _setup_s is
 * the part before its first op (building both replicas and the checks'
 * state, which the ranks forked first do while the rest are being forked),
 * _ops_s the part over the schedule's ops: what makes a straggler, whom
 * every collective waits for.
 */
double verify_rank_cpu_outside_s(const verify_result *res, int r);
double verify_rank_cpu_setup_s(const verify_result *res, int r);
double verify_rank_cpu_ops_s(const verify_result *res, int r);

static inline verify_record *verify_at(const verify_result *r, size_t check, int rank)
{
    return &r->records[check * (size_t)r->nranks + (size_t)rank];
}

#endif
