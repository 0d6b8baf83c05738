/*
 * ddpsim_impl.h - the contract between ddpsim and a DDP implementation
 * under test, built in or loaded from a shared object (--impl ./libmine.so).
 * This header is installed; it needs nothing else from ddpsim.
 *
 * An implementation is a table of callbacks (ddpsim_impl_ops). A shared
 * object exports one function,
 *
 *     const ddpsim_impl_ops *ddpsim_impl_get(void);
 *
 * whose table's api_version is DDPSIM_IMPL_API_VERSION (10), 9, 8, 7, 6, 5, 4, 3, 2 or 1:
 * ddpsim loads plugins built against any of them. A plugin sees the parts of
 * both structures of its version and nothing changes for it; what it cannot
 * see it is not given (a model with buffers needs version 3, which added
 * them; a schedule with join{...} needs version 4, a sharded run (--shard)
 * version 5; an optimizer_step that owns the update under --optimizer
 * momentum version 6, which says the momentum, and under --optimizer adamw
 * version 7, which says AdamW's hyperparameters; a sharded run that clips
 * version 8, whose clip_grads clips the shards; a sharded run with
 * --loss-scale version 9, whose scaler_scale and scaler_unscale scale the
 * loss and unscale the shards; version 10's loss_factor is the trainer's
 * loss normalization on the token model, lm).
 *
 * On every rank ddpsim gives the implementation its own model replica (the
 * parameter and gradient views below) and drives it through the schedule:
 *
 *   fwd    forward_begin(no_sync_active), then the model's forward
 *   bwd    the model's backward, last layer first: the moment a parameter's
 *          gradient of this micro-step is complete ddpsim ADDS it to that
 *          parameter's .grad (PyTorch's AccumulateGrad) and calls
 *          grad_ready(p), while the rest of the backward still computes
 *          (under --chaos an event may come later, never earlier); after
 *          the last one, backward_end(), which must leave every reduction
 *          finished
 *   enter  no_sync_enter()          exit  no_sync_exit()
 *   zero   ddpsim zeroes every .grad (or, with --zero-grad none, makes it
 *          None: see grad_defined), then zero_grad()
 *   step   optimizer_step() (version 2; it may own the update), then
 *          ddpsim's SGD unless it did (p += -lr * grad, or with momentum
 *          torch.optim.SGD's buffer b = m * b + grad, p += -lr * b; or
 *          torch.optim.AdamW, see services->adamw), then step()
 *   clip   clip_grads(max_norm, inf_norm, &coef) (version 8), or when the
 *          table has none (plain DDP only) ddpsim's clip_grad_norm_ of
 *          every .grad
 *   --loss-scale (version 9): before every backward scaler_scale(&scale),
 *          the scale its loss is multiplied by; at the first clip or step
 *          of a window scaler_unscale(&found_inf); a step the reference
 *          skips (an inf or NaN) skips optimizer_step and ddpsim's SGD
 *          (step() still runs: GradScaler.update's place)
 *   join{  join_enter(divide_by_initial_world_size) on every rank (version 4)
 *   }      join_exit() on every rank, once every rank has run out
 *
 * Uneven inputs: in "[4, -1:2]*( ... )" the last rank runs out after two
 * iterations and is given nothing of the rest, except, inside join{...}, a
 * join_shadow() for each forward its peers still make: PyTorch's Join runs
 * the DDP join hook's main_hook once per such forward, and the
 * implementation must match its peers' collectives there (zeros for their
 * backward's reductions) without touching its own .grad. At join_exit every
 * rank must end with the last joiner's parameters and buffers.
 *
 * Before the first op, create() is called; it should broadcast the
 * parameters from rank 0 as DDP's constructor does (or not: ddpsim checks).
 * The implementation may call the collectives in the services from any
 * callback, or from its own threads while a callback is running, one at a
 * time per rank; every rank must make the same collective calls in the same
 * order. Callbacks return 0 on success; anything else fails the run, with
 * the message the implementation wrote through services->set_error.
 *
 * ddpsim compares the .grad views with its reference at every grab, and
 * the parameters after every step and at the end; after every syncing
 * backward all ranks must hold the same bits.
 */
#ifndef DDPSIM_IMPL_H
#define DDPSIM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#define DDPSIM_IMPL_API_VERSION 10
/* The oldest version ddpsim still loads. */
#define DDPSIM_IMPL_API_MIN_VERSION 1

typedef struct ddpsim_param_view {
    const char *name; /* PyTorch's name: "0.weight", "head_a.bias", ... */
    int ndim;         /* 1 or 2 */
    int shape[2];     /* [out, in] for a linear weight */
    size_t count;     /* elements */
    float *data;      /* the parameter (contiguous, C order) */
    float *grad;      /* its .grad (never NULL: zeros until a backward writes it) */
} ddpsim_param_view;

/* A module buffer (BatchNorm's running statistics): state without a gradient. */
typedef struct ddpsim_buffer_view {
    const char *name; /* "bn.running_mean", ... */
    size_t count;
    float *data;      /* contiguous; PyTorch's int64 num_batches_tracked is a float here */
} ddpsim_buffer_view;

typedef struct ddpsim_services {
    int rank, world_size;
    int nparams;
    const ddpsim_param_view *params; /* registration order; params[i].grad of consecutive i are contiguous */
    float *all_grads;                /* every .grad as one buffer (params[0].grad), total_count floats */
    size_t total_count;

    /* DDP options the user chose (an implementation may ignore what it does not model). */
    size_t bucket_cap, first_bucket_cap; /* bytes */
    int find_unused, bucket_view;

    /*
     * Collectives over all ranks, blocking, deterministic (the run's --algo
     * order). Return 0 on success, non-zero when the world is failing.
     */
    int (*allreduce_sum)(void *env, float *buf, size_t count);
    int (*broadcast)(void *env, void *buf, size_t bytes, int root);
    int (*allgather)(void *env, const void *send, void *recv, size_t bytes_per_rank);
    /* Record why the implementation fails (shown in the report); returns -1. */
    int (*set_error)(void *env, const char *message);
    void *env;

    /* ---- version 2 (a version-1 plugin never reads past here) ---- */
    uint32_t version;      /* the interface version these services follow: 3 */
    float lr;              /* the learning rate of step's SGD (what an optimizer_step that owns the update uses) */
    int zero_to_none;      /* zero makes every .grad None (PyTorch's zero_grad(set_to_none=True), --zero-grad none) */
    /*
     * [nparams]: 0 while params[p].grad is None. A None .grad holds zeros in
     * its buffer and reads as zeros everywhere, the checker included; it is
     * what a rank contributes for a parameter it did not use. ddpsim keeps
     * these flags: None at the start (as a fresh PyTorch parameter), a
     * tensor from the first gradient added to it, or from a sync that gives
     * it a value (a parameter this rank did not use but another did), None
     * again after a zero with zero_to_none. The first gradient into a None
     * .grad is copied, not added, so a -0 stays -0.
     */
    const unsigned char *grad_defined;
    int chaos;             /* 1 under --chaos (shake timing, never values); chaos_seed is then the run's seed */
    uint64_t chaos_seed;
    /*
     * Under --chaos a seeded pause of up to 200 us (nothing otherwise), for
     * the implementation's own threads: call it where a different timing
     * could matter (site: any number naming the place; the pauses at one
     * site follow the seed). ddpsim pauses in every collective of these
     * services the same way. Under --sched it is a scheduling point instead:
     * another of the implementation's threads may run there (mark a window
     * between two plain memory accesses, which the scheduler cannot see).
     */
    void (*chaos_point)(void *env, uint32_t site);
    /* Why this rank's last failed collective failed, in ddpsim's words ("" when none has failed). */
    const char *(*last_error)(void *env);
    /*
     * PyTorch's bucket assignment with this run's caps. order == NULL: the
     * constructor's. Without find_unused that is one bucket holding every
     * parameter in registration order (PyTorch 1.12 on buckets only once it
     * has seen the order of backward); with find_unused the caps fill the
     * registration order and the buckets are reversed, so bucket 0 holds the
     * last-registered parameters. Otherwise the rebuilt one over the n
     * parameters of order, the order their gradients became ready in the
     * first syncing backward (reducer.cpp rebuild_buckets: the caps, filled
     * in that order, not reversed; PyTorch rebuilds only without
     * find_unused). members gets each bucket's parameters in bucket order,
     * one bucket after another; sizes[k] bucket k's count (both with room
     * for nparams). Returns the number of buckets, -1 for a bad order.
     */
    int (*bucket_layout)(void *env, const int *order, int n, int *members, int *sizes);
    /*
     * The communication hook the user registered (--comm-hook), one of
     * PyTorch's built-ins: 0 none (copy each gradient into its bucket times
     * fl(1/N), then sum), 1 allreduce_hook (copy unscaled; the bucket / N;
     * sum), 2 fp16_compress_hook, 3 bf16_compress_hook (copy unscaled; round
     * to float16 or bfloat16, to nearest even; divide by N in float and
     * round again; sum in the format, each partial sum rounded, in rank
     * order; back to float). An implementation that does not model a hook
     * fails such a run, which is the right verdict.
     */
    int comm_hook;

    /* ---- version 3 (a version-1 or -2 plugin never reads past here; version 4 added nothing here) ---- */
    /*
     * The module's buffers (--model bn: BatchNorm1d's running_mean,
     * running_var, num_batches_tracked; none for the other models), in
     * registration order, contiguous from all_buffers. Every forward moves
     * them, each rank with its own data. DDP broadcasts them from rank 0 in
     * its constructor, with the parameters, and with broadcast_buffers (1,
     * PyTorch's default; --broadcast-buffers off makes it 0) at the start of
     * a forward, which is forward_begin here, when the forward before it ran
     * outside no_sync or it is the first one (PyTorch 1.13 distributed.py
     * forward: require_forward_param_sync). So the first forward inside
     * no_sync still broadcasts; the next ones inside, and the first one
     * after the exit, do not. ddpsim compares them bitwise with the
     * reference's at every check.
     */
    int nbuffers;
    const ddpsim_buffer_view *buffers;
    float *all_buffers;
    size_t buffers_count;
    int broadcast_buffers;

    /* ---- version 5 (a plugin of version 4 or less never reads past here) ---- */
    /*
     * Sharded data parallelism (--shard MODE, --mesh RxS). shard_mode is the
     * mode the user asked ddpsim to check (DDPSIM_SHARD_NONE: plain DDP, and
     * nothing below applies). The world is a mesh of mesh_replicas x
     * mesh_shards ranks, rank = replica_index * mesh_shards + shard_index
     * (torch's DeviceMesh of shape (R, S)): the shard group is the
     * mesh_shards ranks of one replica, the replica group the mesh_replicas
     * ranks of one shard index. Without --mesh, 1 x world_size.
     *
     * The group collectives below are blocking and deterministic like the
     * others, and every rank of the world calls each one at the same time
     * (all groups of a kind reduce together). A reduce_scatter_sum sends
     * count_per_rank * (group size) floats and receives this rank's slice
     * (its index in the group) of their sum over the group: for the world
     * group bit for bit that slice of allreduce_sum; over a smaller group
     * summed in group order. allreduce_group over the world is allreduce_sum.
     * ddpsim counts reduce-scatters and all-reduces apart (communication
     * conformance: which a mode may issue in a micro-step that does not sync).
     */
    int shard_mode;        /* ddpsim_shard_mode */
    int mesh_replicas, mesh_shards, replica_index, shard_index;
    int (*reduce_scatter_sum)(void *env, int group, const float *send, float *recv, size_t count_per_rank);
    int (*allreduce_group)(void *env, int group, float *buf, size_t count);
    int (*allgather_group)(void *env, int group, const void *send, void *recv, size_t bytes_per_rank);

    /* ---- version 6 (a plugin of version 5 or less never reads past here) ---- */
    /*
     * The step's SGD momentum (--optimizer momentum[:M]; 0: plain SGD), for
     * an optimizer_step that owns the update: torch.optim.SGD's, dampening 0,
     * the buffer a copy of .grad at a parameter's first step with one, then
     * b = (m * b) + grad, each operation rounded to float, p += -lr * b; a
     * parameter whose .grad is None is skipped. ddpsim keeps the buffers of
     * its own steps only: under momentum own every step's update or none.
     * ddpsim refuses a run with momentum for an older plugin that has an
     * optimizer_step.
     */
    float momentum;

    /* ---- version 7 ---- */
    /*
     * --optimizer adamw: the step is torch.optim.AdamW's (adamw_on = 1;
     * momentum is then 0), for an optimizer_step that owns the update. Per
     * element, with t the parameter's own count of steps (a parameter
     * whose .grad is None is skipped and not counted) and every scalar
     * computed in double, then rounded to float (doc/SEMANTICS.md):
     *   p = p * (float)(1 - lr wd)
     *   m = (b1 * m) + (1 - b1) * g          (moments start at zero)
     *   v = (b2 * v) + ((1 - b2) * g) * g
     *   d = sqrtf(v) / (float)sqrt(1 - b2^t) + (float)eps
     *   p = p + ((float)(-lr / (1 - b1^t)) * m) / d
     * Those roundings give ddpsim's own steps' bits; another order of the
     * same rule (a fused multiply-add, torch 2.x's lerp) passes the order
     * tolerance. ddpsim refuses a run with AdamW for an older plugin that
     * has an optimizer_step.
     */
    int adamw_on;
    double beta1, beta2, eps, weight_decay;

    /* ---- version 9 ---- */
    /*
     * --loss-scale: torch's GradScaler (doc/SEMANTICS.md "Loss scaling").
     * loss_scale_on 0: none. Else the scale starts at loss_scale_init and,
     * with loss_scale_dynamic, after every step becomes scale * backoff
     * when the step was skipped (the growth tracker to 0), or scale *
     * growth when loss_scale_interval steps in a row were taken (kept when
     * finite; the tracker to 0); each product in double, rounded to float.
     * Without loss_scale_dynamic it never changes. Scales and factors are
     * powers of two.
     */
    int loss_scale_on, loss_scale_dynamic;
    float loss_scale_init;
    double loss_scale_growth, loss_scale_backoff;
    int loss_scale_interval;
} ddpsim_services;

/*
 * The sharding modes ddpsim checks (--shard), each with its accumulation
 * rule (ddpsim's reference, doc/SEMANTICS.md "Sharded data parallelism"):
 *   ZERO1  gradients accumulate locally and unsharded in .grad while no_sync
 *          is on (DeepSpeed stage 1 reduces only at the accumulation
 *          boundary); a syncing backward reduces them and each rank keeps its
 *          shard; every rank holds every parameter
 *   ZERO2  every backward reduces (DeepSpeed stage 2 reduces every
 *          micro-step, no_sync or not) and each rank adds its slice into its
 *          gradient shard; every rank holds every parameter
 *   FSDP   ZERO1's gradients with the parameters sharded too (FSDP's no_sync /
 *          set_requires_gradient_sync(False), DeepSpeed stage 3): gathered
 *          before a forward, each rank steps its own shard
 *   HSDP   FSDP on the shard group; every backward reduce-scatters into a
 *          partial sum, and only a syncing backward all-reduces it over the
 *          replica group into the gradient shard (FSDP2's
 *          set_requires_all_reduce(False) on the other micro-steps)
 */
typedef enum ddpsim_shard_mode {
    DDPSIM_SHARD_NONE = 0,
    DDPSIM_SHARD_ZERO1,
    DDPSIM_SHARD_ZERO2,
    DDPSIM_SHARD_FSDP,
    DDPSIM_SHARD_HSDP,
} ddpsim_shard_mode;

typedef enum ddpsim_group { DDPSIM_GROUP_WORLD = 0, DDPSIM_GROUP_SHARD, DDPSIM_GROUP_REPLICA } ddpsim_group;

/*
 * A flat unit of a sharded layout (FSDP's flat parameter, a ZeRO partition
 * group, a Megatron bucket): parameters first_param .. first_param +
 * nparams - 1, consecutive in registration order, one after another, padded
 * with zeros to `padded` elements, a multiple of the shard group's size S
 * (at least the parameters' count, and less than S * max(128, the unit's
 * widest row) past it). Shard index j owns elements [j * padded / S,
 * (j + 1) * padded / S) of the unit: grad_shard and param_shard point at
 * this rank's padded / S of them, the padding included (it must stay exactly
 * zero). param_shard is NULL where every rank holds every parameter (ZERO1,
 * ZERO2). The units cover every parameter once, in order.
 */
typedef struct ddpsim_flat_unit {
    int first_param, nparams;
    size_t padded;
    float *grad_shard;
    float *param_shard;
} ddpsim_flat_unit;

/* What a trainer normalizes by (ddpsim_impl_ops.loss_factor, version 10). */
enum { DDPSIM_LOSS_NORM_GLOBAL_TOKENS = 1, DDPSIM_LOSS_NORM_MICRO_BATCH_MEAN = 2, DDPSIM_LOSS_NORM_SUM = 3 };
typedef struct ddpsim_loss_window {
    int norm;          /* DDPSIM_LOSS_NORM_*: what the trainer intends (--loss-norm) */
    int micro_steps;   /* the backwards of this window (from one zero_grad to the next), this one included */
    int micro;         /* this backward's place in the window, 0 .. micro_steps - 1 */
    int rows;          /* sequences per micro-batch */
    const int *tokens; /* [micro_steps * rows]: each sequence's valid tokens in each of the window's micro-batches
                        * on this rank (a sequence may have none, a micro-batch too) */
    int accumulation;  /* the run's longest window: what a trainer is configured with (gradient_accumulation_steps),
                        * which a shorter window at an epoch's end does not reach */
} ddpsim_loss_window;

typedef struct ddpsim_impl_ops {
    uint32_t api_version; /* DDPSIM_IMPL_API_VERSION */
    const char *name;
    const char *description; /* one line */
    int (*create)(const ddpsim_services *svc, void **state);
    void (*destroy)(void *state);
    /* no_sync_active: some no_sync context is open (they nest: each enter has
     * its exit). PyTorch's rule, which ddpsim checks: a forward outside no_sync
     * arms the next backward's sync, a forward inside leaves the arming as it
     * is, and the backward that syncs disarms it; so "fwd nosync{fwd bwd}"
     * syncs. A forward may follow a forward without a backward. */
    int (*forward_begin)(void *state, int no_sync_active);
    int (*no_sync_enter)(void *state);
    int (*no_sync_exit)(void *state);
    int (*grad_ready)(void *state, int param);
    int (*backward_end)(void *state);
    int (*zero_grad)(void *state);
    int (*step)(void *state);

    /* ---- version 2 (ddpsim reads these only from a table whose api_version is 2 or more; version 3 added
     * nothing here, only to the services) ---- */
    /*
     * At step, before ddpsim's SGD, with services->lr: set *owned = 1 when
     * the implementation updated the parameters itself (a sharded
     * optimizer, say), and ddpsim applies no SGD of its own. NULL: ddpsim's
     * SGD. The parameters are checked against the reference's after every
     * step either way.
     */
    int (*optimizer_step)(void *state, int *owned);

    /* ---- version 4 (ddpsim reads these only from a table whose api_version is 4 or more) ---- */
    /*
     * Uneven inputs, PyTorch 1.13's model.join() (torch/distributed/algorithms/join.py, distributed.py
     * _DDPJoinHook), the rule ddpsim's reference follows and checks:
     *  - join_enter: the with-block starts, on every rank. From here on (also after the block: 1.13 never
     *    resets it) a forward that broadcasts the buffers does so from the highest rank still running, and
     *    with divide_by_initial_world_size = 0 a sync divides by the number of ranks that ran its forward
     *    instead of world_size;
     *  - join_shadow: this rank has run out; its peers still running make a forward. Broadcast the buffers
     *    as that forward does when this rank's own rule says the forward broadcasts (the rule of
     *    broadcast_buffers above, where a shadowed forward counts as outside no_sync when some peer's
     *    forward is); when the peers' backward syncs (some forward ran outside no_sync), contribute zeros
     *    to every reduction of it. This rank's .grad stays as it is;
     *  - join_exit: every rank has run out; every rank takes the parameters and buffers of the last
     *    joiner: the highest rank among those that shadowed nothing.
     * NULL in a version-4 table: the implementation does not support join, and a schedule with join{...}
     * fails its run at join_enter.
     */
    int (*join_enter)(void *state, int divide_by_initial_world_size);
    int (*join_shadow)(void *state);
    int (*join_exit)(void *state);

    /* ---- version 5 (ddpsim reads this only from a table whose api_version is 5 or more) ---- */
    /*
     * A sharded run (services->shard_mode set): the layout, asked once after
     * create; *units stays valid, and its shards stay where they are, until
     * destroy. What ddpsim reads at each check (ddpsim_shard_mode):
     *  - gradients at a grab: each unit's grad_shard, except with ZERO1 and
     *    FSDP when the last backward did not sync (or none has since
     *    zero_grad): then the unsharded .grad, every element;
     *  - parameters after a step and at the end: param_shard where it is
     *    set, else the parameters.
     * A shard is compared with the same slice of the reference's sharded
     * gradient (or parameters); the rest of .grad is never read. The
     * implementation steps its own shards (optimizer_step sets *owned) and
     * clears them at zero_grad (ddpsim clears .grad only).
     * NULL, or a table older than version 5, in a sharded run: the run
     * fails at create with that reason.
     */
    int (*shard_layout)(void *state, int *nunits, const ddpsim_flat_unit **units);

    /* ---- version 8 (ddpsim reads this only from a table whose api_version is 8 or more) ---- */
    /*
     * A clip op (clip:MAX in the schedule, --clip MAX): clip the gradients
     * as torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type = inf
     * when inf_norm, else 2) does over the whole model, and set *coef to
     * the coefficient applied: min(max_norm / (total_norm + 1e-6), 1),
     * total_norm the global norm of every gradient element once (a sharded
     * implementation sums its shards' squares over the shard group: the
     * right group). ddpsim checks that every rank's *coef has the same bits,
     * and that it lies within the bound its exact norm proves for any
     * summation order (doc/SEMANTICS.md "Clipping"). NULL: ddpsim clips
     * every .grad itself on each rank, torch's way (right for DDP, where
     * .grad holds the synced gradient); a sharded run that clips refuses
     * an implementation without it.
     */
    int (*clip_grads)(void *state, double max_norm, int inf_norm, float *coef);

    /* ---- version 9 (ddpsim reads these only from a table whose api_version is 9 or more) ---- */
    /*
     * Loss scaling (--loss-scale; services->loss_scale_on), GradScaler's
     * three places:
     *  - scaler_scale, before every backward: *scale is what this rank
     *    multiplies its loss by (GradScaler.scale); ddpsim computes that
     *    backward's gradients times it, and checks it is the reference's
     *    scale, bit for bit, on every rank;
     *  - scaler_unscale, at the first clip or step of a window
     *    (GradScaler.unscale_): multiply the gradients it holds (a sharded
     *    implementation its shards) by (float)(1 / (double)scale), and set
     *    *found_inf when any gradient element of the model was inf or NaN
     *    (a sharded one reduces its shards' finding over the shard group).
     *    ddpsim checks every rank's *found_inf is the reference's, whose
     *    inf is any rank's (--fault inf:rank=R,op=K);
     *  - the step: when the reference found an inf or NaN, every rank skips
     *    optimizer_step and ddpsim's SGD (an implementation whose *found_inf
     *    says otherwise has failed the check already; following its own
     *    decision would leave a sharded step's collectives unpaired); step()
     *    runs either way, and is where the implementation updates its scale
     *    from its own finding (GradScaler.update).
     * Both NULL: ddpsim runs a GradScaler for the implementation on each
     * rank over .grad (right for DDP, where .grad is synced); a sharded run
     * with --loss-scale refuses an implementation without them. One
     * without the other is refused when the plugin is loaded.
     */
    int (*scaler_scale)(void *state, float *scale);
    int (*scaler_unscale)(void *state, int *found_inf);

    /* ---- version 10 (ddpsim reads this only from a table whose api_version is 10 or more) ---- */
    /*
     * The trainer's loss normalization (the token model, lm: --loss-norm),
     * before every backward: *factor is what this rank multiplies the
     * micro-batch's SUMMED token loss by, from what a trainer can know (w:
     * its window's micro-batches, prefetched, and what it gathers from the
     * other ranks through the services, say an allreduce_sum of its count).
     * ddpsim computes that backward's gradients with it, and checks it is
     * the factor w->norm intends, up to the roundings of computing it
     * (doc/SEMANTICS.md "Loss normalization"): with DDP averaging over N
     * ranks, N / (the window's valid tokens on every rank) for
     * DDPSIM_LOSS_NORM_GLOBAL_TOKENS, 1 / (micro_steps * this micro-batch's
     * valid tokens) for _MICRO_BATCH_MEAN, N for _SUM; any factor for a
     * micro-batch without a valid token. NULL: ddpsim's trainer
     * multiplies by the intended factor.
     */
    int (*loss_factor)(void *state, const struct ddpsim_loss_window *w, float *factor);
} ddpsim_impl_ops;

/* What a plugin exports (declared here, so a plugin's definition is checked against it). */
const ddpsim_impl_ops *ddpsim_impl_get(void);
typedef const ddpsim_impl_ops *(*ddpsim_impl_get_fn)(void);
#define DDPSIM_IMPL_ENTRY "ddpsim_impl_get"

#endif
