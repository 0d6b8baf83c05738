/*
 * ddp_ref.h - the reference DDP: PyTorch DistributedDataParallel's
 * gradient-synchronization semantics on one rank of a world, over one model
 * replica. This is the ground truth every implementation is compared with.
 *
 *  - construction broadcasts the parameters and the buffers from rank 0;
 *  - with broadcast_buffers (the default), a forward first broadcasts rank
 *    0's buffers when the forward before it ran outside no_sync, or it is
 *    the first (require_forward_param_sync, distributed.py 1.13);
 *  - whether a backward syncs is the reducer's ARMING (distributed.py
 *    forward, reducer.cpp prepare_for_backward and finalize_backward): a
 *    forward outside no_sync arms it, a forward inside no_sync leaves it as
 *    it is, a backward syncs when it is armed and disarms it. So a forward
 *    inside no_sync yields a backward that does not sync unless a forward
 *    outside no_sync armed the reducer since the last sync
 *    ("fwd nosync{fwd bwd}" syncs); exiting no_sync does nothing by itself;
 *    no_sync nests, an exit restoring what its enter found;
 *  - a syncing backward reduces the ACCUMULATED gradient (every unsynced
 *    micro-step since the last sync plus this one) and overwrites it with
 *    the average: each gradient is multiplied by 1/N while copied into its
 *    bucket (gradient_as_bucket_view: from the second sync on, once the
 *    grad is its bucket's view, divided by N in place), then the bucket is
 *    sum-allreduced; with a communication hook registered the gradient goes
 *    into the bucket unscaled and the hook divides, compresses and reduces
 *    (comm_hook.h);
 *  - buckets (buckets.h): without find_unused the first iteration reduces
 *    one bucket holding every parameter (PyTorch >= 1.12 does not bucket
 *    before it knows the order of backward); at the first forward after the
 *    first sync the buckets are rebuilt (reducer.cpp rebuild_buckets): the
 *    parameters in the order their gradients became ready, rank 0's order,
 *    filled with a limit of first_bucket_cap for the first bucket and
 *    bucket_cap after, not reversed. With find_unused the constructor fills
 *    the registration order with those limits, reversed (bucket 0 holds the
 *    last-registered parameters), and never rebuilds. Buckets are reduced in
 *    index order. With ordered or exact reduction the layout changes no
 *    value; with ring, or on NCCL, it changes bits;
 *  - find_unused: a parameter used in any forward of the window (since the
 *    last sync) on any rank is synced, ranks that did not use it
 *    contributing their current gradient; a parameter unused everywhere
 *    keeps its local gradient untouched. (Before PyTorch 2.4,
 *    find_unused_syncing_backward: used by the syncing backward itself.) Without find_unused every
 *    parameter must be used by every syncing forward (PyTorch would fail
 *    otherwise), and ddp_ref_backward says so with DDP_ERR_INVALID;
 *  - a .grad starts as None, and zero_grad fills zeros or, with
 *    set_to_none, makes every .grad None again (model_grad_defined); a sync
 *    gives a value to every parameter it reduces, None or not, and a
 *    parameter no rank used keeps its .grad as it was; with
 *    gradient_as_bucket_view a None .grad is no longer its bucket's view, so
 *    the next sync multiplies it again; ddp_ref_step is plain SGD, p = p + (-lr) * g
 *    (the benchmarks'; a verification steps through optim.h, momentum included).
 *
 * Not here: scheduling, comparison, implementations under test.
 */
#ifndef DDPSIM_DDP_REF_H
#define DDPSIM_DDP_REF_H

#include <stddef.h>

#include "buckets.h"
#include "comm_hook.h"
#include "coll.h"
#include "model.h"
#include "scaler.h"
#include "optim.h"
#include "status.h"
#include "world.h"

typedef struct ddp_config {
    coll_algo algo;
    size_t bucket_cap;       /* bytes, > 0 */
    size_t first_bucket_cap; /* bytes, > 0 */
    int find_unused;
    int bucket_view;         /* gradient_as_bucket_view: divide in place instead of multiply while copying */
    int set_to_none;         /* zero_grad(set_to_none=True): every .grad becomes None (PyTorch >= 2.0's default) */
    int find_unused_syncing_backward; /* PyTorch < 2.4: "used" means used by the syncing backward alone (before PR
                                       * #124193), not by any backward of the window */
    float lr;
    float momentum;          /* the step's SGD momentum (optim.h), 0: plain SGD */
    ddp_adamw adamw;         /* ... or the step is torch.optim.AdamW's (adamw.on; momentum is then 0) */
    scaler_config scaler;    /* --loss-scale: GradScaler's loss scaling around the step (scaler.h); on 0: none */
    ddp_comm_hook comm_hook; /* register_comm_hook with one of PyTorch's built-in hooks (comm_hook.h) */
    int static_graph;        /* static_graph=True: the same gradients; schedules and models it cannot run refused */
    int static_graph_first_iteration; /* PyTorch < 2.1: static_graph's delayed allreduce is queued by every
                                       * backward through a forward of the first iteration (before PR #103487),
                                       * not once, by the first backward */
    int no_broadcast_buffers; /* broadcast_buffers=False (0: PyTorch's default, True) */
} ddp_config;

/* optimizer lr when none is given: ddpsim's (PyTorch's SGD has no default). */
#define DDP_DEFAULT_LR 0.1f

/* PyTorch DDP's constructor defaults (bucket caps 25 MiB and 1 MiB, broadcast_buffers=True, no hook, the ordered
 * reference allreduce), zero_grad filling zeros, plain SGD with DDP_DEFAULT_LR: the one place they are written. */
ddp_config ddp_config_default(void);

typedef struct ddp_ref ddp_ref;

/* Build the reference over m (not owned) on this rank. No communication yet. */
/* The find_unused rule of cfg as manifests name it: "window" (PyTorch >= 2.4) or "syncing-backward" (< 2.4). */
const char *ddp_find_unused_rule_name(const ddp_config *cfg);
/* ... and as a report says it. */
const char *ddp_find_unused_rule_text(const ddp_config *cfg);

ddp_status ddp_ref_create(const ddp_config *cfg, model *m, world_rank *wr, ddp_ref **out);
void ddp_ref_destroy(ddp_ref *d);

/* DDP's constructor broadcast: every rank takes rank 0's parameters and buffers. */
ddp_status ddp_ref_broadcast_params(ddp_ref *d);

ddp_status ddp_ref_no_sync_enter(ddp_ref *d); /* no_sync nests */
ddp_status ddp_ref_no_sync_exit(ddp_ref *d);  /* DDP_ERR_INVALID when not inside */
/*
 * A forward: the arming, then the model's forward. With find_unused, a
 * backward synced by an earlier forward whose used parameters differ from
 * its own forward's is PyTorch's error, and ddp_ref_backward says so (known
 * only through ddp_ref_forward, which sees the arming forward's used set).
 */
ddp_status ddp_ref_forward(ddp_ref *d, const model_batch *b);
/* A backward: the model's backward, a ready event per used parameter (last first), backward_end. */
ddp_status ddp_ref_backward(ddp_ref *d);      /* DDP_ERR_INVALID without a forward */

/* The same as events, for a caller that runs the model itself (forward_begin may rebuild the buckets and broadcast
 * the buffers: collectives). */
ddp_status ddp_ref_forward_begin(ddp_ref *d);
void ddp_ref_forward_end(ddp_ref *d); /* after the model's forward: the arming forward's used parameters */
void ddp_ref_grad_ready(ddp_ref *d, int param);
/* The model's local backward with the reference's hooks: each completed gradient accumulated into .grad, then
 * grad_ready, then after(ctx, param) (NULL: nothing) for a caller that follows the backward (ddpsim's checks). */
void ddp_ref_backward_local(ddp_ref *d, model_ready_fn after, void *ctx);
ddp_status ddp_ref_backward_end(ddp_ref *d);  /* DDP_ERR_INVALID without a forward */
void ddp_ref_zero_grad(ddp_ref *d);
void ddp_ref_step(ddp_ref *d);

/*
 * Hand this replica's reductions to another backend (--backend nccl runs the
 * implementation under test's side through NCCL; the checker's reference
 * never calls this). fn reduces count floats in place over all ranks; with
 * backend_avg the buckets are not scaled by 1/N here and fn is asked to
 * average (avg = 1) instead, as NCCL's ncclAvg does.
 */
typedef ddp_status (*ddp_reduce_fn)(void *ctx, float *buf, size_t count, int avg);
void ddp_ref_set_reducer(ddp_ref *d, ddp_reduce_fn fn, void *ctx, int backend_avg);

/*
 * Uneven inputs under model.join() (torch 1.13 torch/distributed/algorithms/join.py, distributed.py
 * _DDPJoinHook and forward, reducer.cpp set_divide_factor):
 *  - join_enter: Join() sets the DDP's _join_config (enable stays set after the block: no reset in
 *    __exit__) and divide_by_initial_world_size;
 *  - while join is enabled a forward broadcasts the buffers (when it broadcasts at all) from the
 *    highest rank still running (_find_common_rank), not rank 0, and without
 *    divide_by_initial_world_size the backward it arms divides by the number of ranks still running
 *    (the forward's notify_join_context allreduce); ddp_ref_participants says who runs the op;
 *  - a rank that has run out shadows each forward of its peers (main_hook): the rebuild when due, the
 *    buffer broadcast by its own require_forward_param_sync, then require_forward_param_sync = "some
 *    peer syncs", and when they sync zeros into every bucket's allreduce, its own .grad untouched;
 *    with find_unused, into the used map's allreduce the map of the last sync it saw (its own last,
 *    then each shadowed one's result: _match_unused_params_allreduce reduces the reducer's device copy
 *    of the map in place), so a parameter a peer used in one shadowed sync is reduced in the next too
 *    (observed on 2.15: a None .grad became a tensor); ddp_ref_join_shadow_forward announces,
 *    _backward reduces;
 *  - join_exit (post_hook, _sync_final_model): every rank takes the last joiner's parameters and
 *    buffers (the highest rank that ran the most iterations).
 */
void ddp_ref_join_enter(ddp_ref *d, int divide_by_initial_world_size);
void ddp_ref_participants(ddp_ref *d, int nactive, int highest);
ddp_status ddp_ref_join_shadow_forward(ddp_ref *d, int peers_sync);
ddp_status ddp_ref_join_shadow_backward(ddp_ref *d);
/* What the last sync divided by: the world size, or under join without divide_by_initial_world_size fewer. */
int ddp_ref_divisor(const ddp_ref *d);
/* 1 when the last shadowed backward synced (the peers' sync this rank contributed zeros to). */
int ddp_ref_join_shadow_synced(const ddp_ref *d);
ddp_status ddp_ref_join_exit(ddp_ref *d, int last_joiner);

/* 1 when the forward waiting for its backward decided that the backward syncs. */
int ddp_ref_pending_sync(const ddp_ref *d);
/* 1 when the last backward synced. */
int ddp_ref_last_synced(const ddp_ref *d);

/* After a syncing backward: flags[i] is 1 when parameter i was reduced (0: unused everywhere, kept local). */
const unsigned char *ddp_ref_reduced_params(const ddp_ref *d);
/* ... and on this rank which .grad took the allreduce's result: the reduced ones, and with
 * gradient_as_bucket_view a defined .grad that no rank used (its bucket's view). */
const unsigned char *ddp_ref_averaged_params(const ddp_ref *d);

/* Buckets, for tests and reports: the parameter indices of bucket k in bucket order (returns how many). */
int ddp_ref_nbuckets(const ddp_ref *d);
/*
 * The reductions this rank's reference made so far and the bytes it gave
 * them: what PyTorch's DDP moves for the same schedule (each bucket of each
 * sync, the used map's with find_unused, a joined rank's shadowed ones; not
 * a compressing hook's buckets, which travel as gathers here), beside which
 * a report puts the implementation's.
 */
void ddp_ref_comm_counts(const ddp_ref *d, uint64_t *reductions, uint64_t *bytes);
int ddp_ref_bucket(const ddp_ref *d, int k, int *members, int max);


#endif
