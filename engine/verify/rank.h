/*
 * rank.h - what one rank of a verification run holds (internal to
 * engine/verify): its reference replica and DDP, the implementation under
 * test with its replica and services, and the chaos, fault and trace
 * state; rank.c is the implementation's side of the ops (ops.h) for a live
 * plugin.
 */
#ifndef DDPSIM_RANK_H
#define DDPSIM_RANK_H

#include <stddef.h>
#include <stdint.h>

#include "chaos.h"
#include "ddp_ref.h"
#include "events.h"
#include "impl.h"
#include "model.h"
#include "ops.h"
#include "scaler.h"
#include "shard_view.h"
#include "trace.h"
#include "verify.h"

/* The reference: a model replica and its DDP state. */
typedef struct ref_side {
    model *m;
    ddp_ref *ddp;
    shard_ref *shard;     /* --shard: the sharded reference beside DDP's */
} ref_side;

/* The implementation under test: its replica, driven through ddpsim_impl.h. */
typedef struct impl_side {
    model *m;
    const ddpsim_impl_ops *ops;
    void *state;
    impl_env env;
    ddpsim_services svc;
    ddpsim_param_view views[MODEL_MAX_PARAMS];
    int no_sync;     /* no_sync contexts open (nested ones count) */
    ddp_optim optim; /* ddpsim's step of its parameters, unless its optimizer_step owns the update */
} impl_side;

typedef struct rank_ctx {
    const verify_config *cfg;
    world_rank *wr;
    int rank, n;
    verify_ops v;         /* the ops' semantics and the checks (ops.h): the reference is v.m, v.ddp */
    ref_side ref;
    impl_side impl;
    uint64_t next_batch;
    nccl_figures *nccl_fig; /* this rank's, in the shared segment */
    verify_rank_figures *fig; /* this rank's, in the shared segment */
    int *refused;             /* this rank's verify_rank_area.refused */
    chaos_rank chaos;
    uint64_t nbwd;        /* backwards so far */
    uint64_t nclip;       /* clips so far (--record's clip<k>.json) */
    uint64_t nunscale;    /* unscales so far (--record's unscale<k>.json) */
    uint64_t nfwd_recorded; /* --record of a model with buffers: forwards whose buffers were written */
    int shared;           /* the implementation's parameters equal the reference's: one forward and backward serve both */
    scaler_state scaler;  /* --loss-scale: ddpsim's GradScaler for an implementation without its own, and */
    int impl_found_inf;   /* ... what its last unscale found */
    float scale;          /* ... the scale of the implementation's backward at hand, and over the reference's (what */
    float share_factor;   /* ... a shared backward's gradients are multiplied by on their way to its .grad) */
    ready_queue events;   /* this backward's ready events for the implementation */
    ddp_status bwd_status; /* the first failure inside this backward's callbacks */
    uint64_t bwd_t0, bwd_comm0; /* when this backward began, and the collectives' time by then */
    uint64_t bwd_red0, bwd_bytes0, bwd_rs0, bwd_rs_bytes0; /* the implementation's reductions by then (impl_env
                                                            * reductions, scatters) ... */
    record_comm_counts bwd_counts; /* ... and in this backward */
    shard_view view;      /* --shard: the implementation's declared layout and its shards */
    uint64_t fwd_t0;      /* when this forward began */
    uint64_t impl_t0;     /* when the implementation's callback at hand was called */
    trace_writer trace;
    size_t next_ready;    /* replay: next recorded ready event of this rank */
    char name[64];        /* the implementation's directory in dumps and recordings (verify_dump_name) */
} rank_ctx;

/* What each rank writes into the shared user area besides its records. */
typedef struct verify_rank_area {
    nccl_figures nccl;
    verify_rank_figures fig;
    verify_agreement agree;
    int refused;          /* the implementation's create() returned an error: it does not support this run */
    int bad_record;       /* ddpsim check: a recorded file could not be used (bad input, not a fault) */
} verify_rank_area;

/* The shared user area of a run of s on nranks: the records' stream, then a verify_rank_area per rank (stream.h). */
size_t verify_user_bytes(const sched *s, int nranks);

/*
 * The parent's side of a run's results (run.c): create the world of wc for
 * schedule s, its user area sized and its supervisor set to take the records
 * as the ranks write them (into out's tally, and as sink says); after
 * world_run, take what is left and copy the ranks' areas and their peak
 * memory into out.
 */
ddp_status verify_result_start(verify_result *out, world_config *wc, const sched *s, int with_nccl,
                               const verify_sink *sink);
void verify_result_collect(verify_result *out);

/* The rank main of a verification run (arg: the verify_config). */
ddp_status verify_rank_main(world_rank *wr, void *arg);

#endif
