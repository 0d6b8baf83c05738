/*
 * bugs.c - the catalogue: real DDP gradient-synchronization bugs, each
 * reproduced as a built-in implementation that ddpsim must catch. BUGS
 * below is the catalogue itself, one row per bug: its identifier, the name
 * --impl takes, the mechanism, where it was reported, and whether only a
 * bitwise comparison can see it; everything else is generated from it.
 *
 * All mutants share one simple DDP (reduce the whole gradient buffer in one
 * allreduce after the backward) that is correct but for the one bug its
 * name says, so what catches a mutant is its bug and nothing else: with the
 * ordered algorithm the shared part gives the reference's bits. The shared
 * DDP asks each bug at fixed points (bug_hooks); a bug's behaviour is its
 * own block below, in the catalogue's order, named hooks_<ID>: adding a bug
 * is its row and its block, and the build fails without the block.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "impl.h"
#include "scaler.h"

/* X(ID, name, mechanism, source, bitwise_only) */
#define BUGS(X)                                                                                                      \
    X(SYNC_ON_EXIT, "sync-on-exit", "exiting no_sync syncs the accumulated gradients",                                \
      "lightning-thunder issue #1670", 0)                                                                            \
    X(LAST_MICROBATCH_ONLY, "last-microbatch-only",                                                                  \
      "a syncing backward averages only its own micro-batch and adds the local accumulation to it",                  \
      "a reading of lightning-thunder PR #2255", 0)                                                                  \
    X(PRIOR_NOT_CURRENT, "prior-not-current",                                                                        \
      "the accumulated earlier micro-steps are averaged, the current one stays local",                              \
      "DeepSpeed PR #7985 (the boundary micro-batch added after the allreduce)", 0)                                             \
    X(SYNC_EVERY_MICROSTEP, "sync-every-microstep", "no_sync is ignored: every backward syncs",                      \
      "no_sync wrapped around backward only: ClassyVision PR #706 and others", 0)                                    \
    X(NEVER_SYNC, "never-sync", "gradients are never reduced", "deepmd-kit PR #1104", 0)                             \
    X(DECIDE_AT_BACKWARD, "decide-at-backward", "whether to sync is read at backward instead of at forward",        \
      "build-nanogpt PR #30", 0)                                                                                     \
    X(DISARM_IN_NO_SYNC, "disarm-in-no-sync",                                                                        \
      "a forward inside no_sync cancels the sync an earlier forward outside it armed",                               \
      "PyTorch 1.13 distributed.py forward (prepare_for_backward outside no_sync only); ddpsim before issue 16", 0)   \
    X(SYNC_FIRST_NOT_LAST, "sync-first-not-last",                                                                    \
      "off by one in the accumulation window: each backward takes the previous forward's decision",                 \
      "FunASR PR #3472", 0)                                                                                          \
    X(FIRST_MICROBATCH_ONLY, "first-microbatch-only", "only the window's first micro-batch reaches the reduction",   \
      "InfiniTrain PR #213", 0)                                                                                      \
    X(OVERWRITE_NOT_ACCUMULATE, "overwrite-not-accumulate",                                                          \
      "a syncing backward replaces .grad with the average of its own gradient, dropping the accumulation",          \
      "PyTorch FSDP #73784; Megatron-LM PR #7186", 0)                                                                \
    X(SUM_NOT_AVERAGE, "sum-not-average", "gradients are summed instead of averaged", "Horovod #2654", 0)            \
    X(DOUBLE_AVERAGE, "double-average", "gradients are divided by N twice", "PyTorch PR #42399's original hook design", \
      0)                                                                                                             \
    X(POST_DIVIDE, "post-divide",                                                                                    \
      "sum, then divide by N, instead of multiplying by 1/N before the sum: same math, other bits",                 \
      "PyTorch PRs #59522 / #59576", 1)                                                                              \
    X(UNUSED_LAST_STEP_ONLY, "unused-last-step-only",                                                                \
      "find_unused decides 'used' from the last micro-step only, not the whole window",                             \
      "PyTorch #69031, fixed by PR #124193", 0)                                                                      \
    X(NO_INITIAL_BROADCAST, "no-initial-broadcast", "ranks keep their own initial parameters",                      \
      "DDP's constructor broadcast left out", 0)                                                                     \
    X(RANK_NEVER_SYNCS, "rank-never-syncs", "rank 1 skips every reduction the others wait in", "picotron PR #5", 0)  \
    X(SKIP_AVERAGE_TINY_TENSOR, "skip-average-tiny-tensor", "single-element tensors are summed, not averaged",        \
      "Horovod PR #2375", 0)                                                                                         \
    X(SELF_ADD_EACH_MICROSTEP, "self-add-each-microstep",                                                            \
      "each unsynced micro-step adds the accumulated gradient to itself again", "Megatron-LM #6660", 0)             \
    X(TAIL_WINDOW_DROPPED, "tail-window-dropped",                                                                    \
      "the engine counts its own window (the first one's length), not no_sync: a shorter tail window never syncs",  \
      "NVIDIA-NeMo/Automodel PR #2257", 0)                                                                           \
    X(REDUCED_AGAIN, "reduced-again",                                                                                \
      "a gradient already reduced at the last sync is summed across ranks again with the next one (grows N-fold)",  \
      "lodestone-rock/RamTorch #13", 0)                                                                              \
    X(SKIP_NONE_GRADS, "skip-none-grads",                                                                            \
      "parameters whose .grad is None are left out of the flat buffer, so ranks reduce different sizes",            \
      "DeepSpeed PR #291", 0)                                                                                        \
    X(REBUILD_DROPS_ACCUMULATION, "rebuild-drops-accumulation",                                                      \
      "the bucket rebuild after the first sync rebinds .grad and overwrites it: a gradient carried across is lost", \
      "InfiniTensor/InfiniTrain PR #183", 0)                                                                         \
    X(STALE_BUCKET, "stale-bucket",                                                                                  \
      "from the second sync on the gradients go into a view detached from the reduced buffer: each sync reduces "   \
      "the previous sync's result again",                                                                           \
      "PyTorch PR #43307 (DDP communication hook, bucket_views_in/out)", 0)                                          \
    X(UNSCALE_NEVER_SCALED, "unscale-never-scaled",                                                                  \
      "the optimizer divides the gradients by a loss scale (65536) that backward never applied",                    \
      "DeepSpeed PR #7839 (bug 1)", 0)                                                                               \
    X(NO_ZERO_AFTER_STEP, "no-zero-after-step",                                                                      \
      "zero_grad after a step is skipped: the next window accumulates onto the stepped gradients",                  \
      "DeepSpeed PR #7839 (bug 2)", 0)                                                                               \
    X(BOUNDARY_FALSE_IN_BACKWARD, "boundary-false-in-backward",                                                      \
      "the accumulation-boundary flag reads false during backward: the window is reduced at step, not by the "      \
      "syncing backward",                                                                                           \
      "DeepSpeed #3911", 0)                                                                                          \
    X(EVERY_BACKWARD_A_BOUNDARY, "every-backward-a-boundary",                                                        \
      "every backward is an accumulation boundary: each reduces its own micro-batch and replaces the accumulation", \
      "allenai/open-instruct PR #1498", 0)                                                                           \
    X(EVERY_BACKWARD_OVERWRITES, "every-backward-overwrites",                                                        \
      "every backward overwrites .grad instead of accumulating into it (overwrite_main_grad for every strategy)",    \
      "Megatron-LM PR #6357", 0)                                                                                     \
    X(SYNC_FLAG_STEPS, "sync-flag-steps",                                                                            \
      "the flag that makes a backward sync also gates the optimizer: every syncing backward steps the parameters",  \
      "huggingface/accelerate PR #2790", 0)                                                                          \
    X(NO_BUFFER_BROADCAST, "no-buffer-broadcast",                                                                    \
      "module buffers (BatchNorm's running statistics) are broadcast at construction but never before a forward: "  \
      "each rank's drift apart",                                                                                    \
      "facebookresearch/fairscale #68 (OssDdp had no broadcast_buffers; fixed by PR #112)", 0)                        \
    X(JOIN_IGNORES_NO_SYNC, "join-ignores-no-sync",                                                                  \
      "under join, a rank that ran out shadows every forward of its peers with their backward's allreduce, also "   \
      "when they run under no_sync: the collectives no longer pair up",                                             \
      "pytorch/pytorch #44425 (join() and no_sync(); fixed by announcing the peers' sync)", 0)                       \
    X(JOIN_DIVIDES_BY_RUNNING, "join-divides-by-running",                                                            \
      "under join, a sync divides by the ranks still running although divide_by_initial_world_size is True",        \
      "pytorch/pytorch PR #42577 (join's first design divided by the effective world size)", 0)                      \
    X(JOIN_FINAL_SYNC_SKIPS_BUFFERS, "join-final-sync-skips-buffers",                                                \
      "at the end of join every rank takes the last joiner's parameters but keeps its own buffers",                  \
      "pytorch/pytorch #111138 (the final join sync leaves the buffers out)", 0)                                     \
    X(REDUCES_IN_NO_SYNC, "reduces-in-no-sync",                                                                      \
      "no_sync only keeps the result from being written back: every backward reduces its gradients, one that "     \
      "does not sync then drops the sum (the numbers stay DDP's, the traffic is a sync per micro-step)",            \
      "NVIDIA/cosmos-framework #161 (the no-sync context silently did nothing: accumulation of 4 took 430.6 s "      \
      "against 110.2 s)", 0)                                                                                         \
    X(FIRST_HOOK_REDUCES, "first-hook-reduces",                                                                      \
      "a gradient that comes in pieces (a tied weight used on both sides of a reentrant checkpoint) is reduced at "  \
      "its first hook: the later pieces stay local",                                                                \
      "deepspeedai/DeepSpeed #8224 (missing one subgraph's contribution; #988: a hook per piece)", 0)              \
    X(MOMENTUM_PER_MICROSTEP, "momentum-per-microstep",                                                              \
      "the momentum buffer advances at every backward, with what that backward added to .grad, so a window of k "    \
      "micro-steps decays it k times: right for windows of one, and without momentum",                              \
      "deepspeedai/DeepSpeed #8443 (ZeRO-3 ran Muon's momentum per micro-batch; fixed by PR #8600)", 0)            \
    X(FOUND_INF_ALWAYS, "found-inf-always",                                                                          \
      "the loss scaler's unscale reports an inf or NaN at every step: no step is ever taken and the scale backs "   \
      "off each time (seen with --loss-scale)",                                                                    \
      "NVIDIA/Megatron-LM #663 (found_inf_flag always true with --overlap-param-gather and "                      \
      "--overlap-grad-reduce: the learning rate stays 0)", 0)                                                        \
    X(UNSCALE_AFTER_UPDATE, "unscale-after-update",                                                                  \
      "the step updates the loss scale before unscaling: on a step that grows the scale the gradients are divided " \
      "by the grown one (seen with --loss-scale dynamic)",                                                         \
      "deepspeedai/DeepSpeed #2686 (fixed by PR #2695; FP16_Optimizer's _update_scale before "                     \
      "unscale_and_clip_grads, PR #8588)", 0)                                                                          \
    X(NORM_MICRO_BATCH_MEAN, "norm-micro-batch-mean",                                                                \
      "each micro-batch's token mean divided by the accumulation steps (a mean of micro-batch means) where every "   \
      "token should weigh the same (seen on --model lm)",                                                           \
      "pytorch/torchtitan PR #2206 (per-rank/per-microbatch normalization replaced by global valid tokens); "       \
      "allenai/open-instruct PR #1137 (masked_mean / accumulation_steps)", 0)                                        \
    X(NORM_RANK_LOCAL, "norm-rank-local",                                                                            \
      "each rank divides by its own valid tokens of the window, then DDP averages: a token on a rank with few "     \
      "weighs more (seen on --model lm)",                                                                           \
      "PrimeIntellect-ai/prime-rl PR #1961 (a per-rank masked mean, then FSDP's average)", 0)                        \
    X(NORM_DROPPED, "norm-dropped",                                                                                  \
      "the token normalizer is dropped: the summed loss is backpropagated and DDP's average kept, gradients "       \
      "global tokens / N times too large (seen on --model lm)",                                                     \
      "radixark/miles PR #3231 (the FSDP backend discarded the normalizer: 9x in its test)", 0)                      \
    X(NORM_AFTER_BACKWARD, "norm-after-backward",                                                                    \
      "the division by the global valid tokens happens after backward (for the logged loss only) while the "        \
      "average over ranks is undone: gradients global tokens times too large (seen on --model lm)",                 \
      "pytorch/torchtitan #2972 (pipeline parallelism backwards the raw sum loss)", 0)                               \
    X(NORM_EMPTY_COUNTED, "norm-empty-counted",                                                                      \
      "the token count is clamped to at least 1 per sequence, so a fully padded sequence counts as a token "        \
      "(seen on --model lm)",                                                                                       \
      "radixark/miles PR #2796 (clamp_min(1) per sample: normalized by 5 instead of 4)", 0)                          \
    X(NORM_RESCALE_EACH_MICRO_STEP, "norm-rescale-each-micro-step",                                                  \
      "the accumulated gradient is divided by the micro-step count after every micro-step, an exponential moving "   \
      "average instead of a sum (modelled as the loss factor it amounts to; seen on --model lm)",                   \
      "pytorch/torchtitan #1733, fixed by PR #1732 (PipelineSchedule scale_grads=True with accumulation)", 0)        \
    X(NORM_LOCAL_WHEN_ONE_STEP, "norm-local-when-one-step",                                                          \
      "with one micro-step per window the global rescale is skipped, leaving each rank's local token mean: right "  \
      "only when every rank has as many tokens (seen on --model lm)",                                               \
      "meta-pytorch/torchtune PR #2980 (skip scale_grads when gradient_accumulation_steps == 1)", 0)                  \
    X(NORM_TAIL_CONFIGURED_STEPS, "norm-tail-configured-steps",                                                      \
      "each micro-batch's mean divided by the configured accumulation count, also in a shorter window at an "       \
      "epoch's end, whose gradient is then scaled by its length over the configured one (seen on --model lm)",      \
      "Lightning-AI/pytorch-lightning #19987 (scaled by accumulate_grad_batches instead of the actual number of "   \
      "accumulations)", 0)

#define AS_ENUM(id, name, mechanism, source, bitwise_only) BUG_##id,
typedef enum bug { BUGS(AS_ENUM) BUG_COUNT } bug;

typedef struct mutant mutant;

/*
 * Where a bug departs from the shared DDP. Every member may be left out (NULL or 0): the correct behaviour.
 * The callbacks return 0, or -1 when a collective failed (the services hold the message).
 */
typedef struct bug_hooks {
    int no_initial_broadcast;                   /* create: the parameters are not broadcast */
    void (*forward)(mutant *m, int no_sync_active); /* after the forward decided (m->fwd_sync) */
    int no_buffer_broadcast;                    /* a forward never broadcasts the buffers */
    int divide_by_running;                      /* under join, a sync divides by the ranks still running */
    int (*no_sync_exit)(mutant *m);
    /* backward_end, after the forward's decision is read into *sync: change it, or take the backward over
     * (return 1: done) */
    int (*backward)(mutant *m, int *sync);
    void (*not_syncing)(mutant *m);             /* a backward that does not sync */
    int (*not_syncing_comm)(mutant *m);         /* ... its collectives (-1: one failed) */
    int (*syncing)(mutant *m);                  /* a backward that syncs (NULL: reduce) */
    /* inside reduce */
    int (*skips_reduction)(mutant *m);          /* 1: this rank reduces nothing */
    int used_from_last_step;                    /* find_unused: "used" from the last micro-step alone */
    void (*before_scale)(mutant *m);
    void (*scale)(mutant *m, float *g);         /* NULL: DDP's 1/N per parameter */
    int (*allreduce)(mutant *m, float *g);      /* NULL: the whole buffer in one sum */
    void (*after_reduce)(mutant *m);
    void (*zero_grad)(mutant *m);
    void (*step)(mutant *m);
    int (*optimizer_step)(mutant *m, int *owned);
    /* --loss-scale: every mutant runs GradScaler over its .grad (scaler_scale, scaler_unscale); its departures: */
    int found_inf_always;                       /* unscale finds an inf or NaN every time */
    int update_before_unscale;                  /* the scale is updated before the unscale divides by it */
    int join_shadows_no_sync;                   /* a joined rank shadows the peers' no_sync forwards too */
    int final_sync_skips_buffers;               /* join's final sync leaves the buffers out */
    /* the token loss (--model lm): every mutant multiplies the summed loss by its window's intended factor from the
     * counts it gathers (m_loss_factor); its departure, a MISTAKE_ below: */
    int norm_mistake;
} bug_hooks;

struct mutant {
    const ddpsim_services *svc;
    const bug_hooks *h;    /* this mutant's bug */
    int n;
    int no_sync_depth;     /* nested no_sync contexts open */
    int armed;             /* a forward outside no_sync since the last syncing backward (PyTorch's arming) */
    int fwd_sync;          /* what the next backward does */
    int fwd_param_sync;    /* the next forward broadcasts the buffers (require_forward_param_sync) */
    int prev_armed;        /* sync-first-not-last: the arming after the forward before */
    int first_in_window;   /* the next backward is the first since the last sync */
    unsigned char used_now[MODEL_MAX_PARAMS];
    float window_used[MODEL_MAX_PARAMS];
    float dev_used[MODEL_MAX_PARAMS]; /* the global used map of the last sync, own or shadowed (ddp_ref.c) */
    float *g0;             /* .grad as it was when this forward began */
    float *first;          /* first-microbatch-only: the window's first accumulation */
    float *saved;          /* local values of parameters unused everywhere */
    unsigned char alias[MODEL_MAX_PARAMS]; /* gradient_as_bucket_view: reduced at least once */
    float *kept;           /* reduced-again: .grad after the last sync; stale-bucket: the reduced bucket;
                              no-zero-after-step: .grad at the last step */
    int have_kept;
    unsigned syncs;        /* syncs so far */
    unsigned since_sync;   /* tail-window-dropped: backwards since the last sync */
    unsigned window;       /* tail-window-dropped: the first window's length (0 until the first sync) */
    int rebind_pending;    /* rebuild-drops-accumulation: the next backward overwrites */
    float window_tokens[2]; /* the token loss: the window's valid tokens and fully padded sequences on every rank
                             * (gathered at its first micro-step) */
    int reduce_at_step;    /* boundary-false-in-backward: a window waits for the step to be reduced */
    float *momentum;       /* momentum-per-microstep: the buffer (zeros until the first backward) */
    impl_join join;        /* join (impl.h), as bucketed.c keeps it */
    int div;               /* what the next sync divides by: n, or under join the ranks running */
    scaler_config scaler_cfg; /* --loss-scale (services version 9), and this rank's GradScaler: */
    scaler_state scaler;
    int found_inf;         /* ... what its last unscale found */
    int updated;           /* ... unscale-after-update: the update of this step is done */
};

static int m_error(mutant *m, const char *msg)
{
    return m->svc->set_error(m->svc->env, msg);
}

/* ---- the shared DDP ---- */

/* DDP's 1/N for one parameter: gradient_as_bucket_view divides once the grad is its bucket's view (ddp_ref.c). */
static void scale_param(mutant *m, int p)
{
    const ddpsim_param_view *v = &m->svc->params[p];
    if (m->svc->bucket_view && m->alias[p])
        coll_div_n(v->grad, v->grad, v->count, m->div);
    else
        coll_mul_inv_n(v->grad, v->grad, v->count, m->div);
}

static void scale(mutant *m, float *g)
{
    if (m->h->scale) {
        m->h->scale(m, g);
        return;
    }
    for (int p = 0; p < m->svc->nparams; p++)
        scale_param(m, p);
}

/* g -= g0 (what this backward alone added) or g += g0, over the whole buffer. */
static void drop_g0(mutant *m)
{
    float *g = m->svc->all_grads;
    for (size_t i = 0; i < m->svc->total_count; i++)
        g[i] -= m->g0[i];
}

static void add_g0(mutant *m)
{
    float *g = m->svc->all_grads;
    for (size_t i = 0; i < m->svc->total_count; i++)
        g[i] += m->g0[i];
}

/* SGD on the implementation's own parameters, p += -lr * g / divisor (what ddpsim's step does when divisor is 1). */
static void sgd(mutant *m, float divisor)
{
    const ddpsim_services *svc = m->svc;
    float neg_lr = -svc->lr;
    for (int p = 0; p < svc->nparams; p++)
        for (size_t i = 0; i < svc->params[p].count; i++)
            svc->params[p].data[i] += neg_lr * (svc->params[p].grad[i] / divisor);
}

/* Average .grad across ranks, as DDP does, but for this mutant's bug. */
static int reduce(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    const bug_hooks *h = m->h;
    float *g = svc->all_grads;
    if (h->skips_reduction && h->skips_reduction(m))
        return 0;
    float global_used[MODEL_MAX_PARAMS];
    if (svc->find_unused) {
        for (int p = 0; p < svc->nparams; p++)
            global_used[p] = h->used_from_last_step ? (float)m->used_now[p] : m->window_used[p];
        if (svc->allreduce_sum(svc->env, global_used, (size_t)svc->nparams))
            return -1;
        memcpy(m->dev_used, global_used, (size_t)svc->nparams * sizeof *global_used);
        for (int p = 0; p < svc->nparams; p++)
            if (global_used[p] == 0.0f) {
                size_t off = (size_t)(svc->params[p].grad - g);
                memcpy(m->saved + off, svc->params[p].grad, svc->params[p].count * sizeof(float));
                memset(svc->params[p].grad, 0, svc->params[p].count * sizeof(float));
            }
    }
    if (h->before_scale)
        h->before_scale(m);
    scale(m, g);
    if (h->allreduce ? h->allreduce(m, g) : svc->allreduce_sum(svc->env, g, svc->total_count))
        return -1;
    m->syncs++;
    if (h->after_reduce)
        h->after_reduce(m);
    for (int p = 0; p < svc->nparams; p++) {
        if (svc->find_unused && global_used[p] == 0.0f) {
            size_t off = (size_t)(svc->params[p].grad - g);
            memcpy(svc->params[p].grad, m->saved + off, svc->params[p].count * sizeof(float));
        } else {
            m->alias[p] = (unsigned char)svc->bucket_view;
        }
    }
    memset(m->window_used, 0, sizeof m->window_used);
    m->first_in_window = 1;
    return 0;
}

static int broadcast_buffers(mutant *m, int src)
{
    const ddpsim_services *svc = m->svc;
    if (!svc->nbuffers)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), src) ? -1 : 0;
}

static int create_mutant(const ddpsim_services *svc, void **state, const bug_hooks *h)
{
    mutant *m = calloc(1, sizeof *m);
    if (!m)
        return svc->set_error(svc->env, "out of memory");
    m->svc = svc;
    m->h = h;
    m->n = m->div = svc->world_size;
    *state = m;
    if (svc->comm_hook)
        return m_error(m, "the catalogue's bugs are modelled on DDP without a communication hook");
    m->prev_armed = 1; /* as if a sync came before the run */
    m->first_in_window = 1;
    size_t bytes = svc->total_count * sizeof(float);
    m->g0 = malloc(bytes);
    m->first = malloc(bytes);
    m->saved = malloc(bytes);
    m->kept = malloc(bytes);
    m->momentum = calloc(svc->total_count ? svc->total_count : 1, sizeof(float));
    if (!m->g0 || !m->first || !m->saved || !m->kept || !m->momentum)
        return m_error(m, "out of memory");
    m->fwd_param_sync = 1;
    m->scaler_cfg = impl_scaler_config(svc);
    scaler_start(&m->scaler_cfg, &m->scaler);
    if (h->no_initial_broadcast)
        return 0;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    return broadcast_buffers(m, 0);
}

static void destroy_mutant(void *state)
{
    mutant *m = state;
    if (!m)
        return;
    free(m->g0);
    free(m->first);
    free(m->saved);
    free(m->kept);
    free(m->momentum);
    free(m);
}

static int m_forward_begin(void *state, int no_sync_active)
{
    mutant *m = state;
    int nrunning, any, src;
    if (impl_join_forward(m->svc, &m->join, !no_sync_active, &nrunning, &any, &src))
        return -1;
    m->div = m->join.on && (!m->join.divide_initial || m->h->divide_by_running) ? nrunning : m->n;
    /* distributed.py forward: the buffers when the forward before ran outside no_sync (broadcast_buffers) */
    if (m->fwd_param_sync && m->svc->broadcast_buffers && !m->h->no_buffer_broadcast && broadcast_buffers(m, src))
        return -1;
    m->fwd_param_sync = !no_sync_active;
    m->armed |= !no_sync_active; /* distributed.py forward: prepare_for_backward outside no_sync only */
    m->fwd_sync = m->armed;
    if (m->h->forward)
        m->h->forward(m, no_sync_active);
    memcpy(m->g0, m->svc->all_grads, m->svc->total_count * sizeof(float));
    memset(m->used_now, 0, sizeof m->used_now);
    return 0;
}

static int m_enter(void *state)
{
    ((mutant *)state)->no_sync_depth++;
    return 0;
}

static int m_exit(void *state)
{
    mutant *m = state;
    m->no_sync_depth--;
    return m->h->no_sync_exit ? m->h->no_sync_exit(m) : 0;
}

static int m_ready(void *state, int p)
{
    mutant *m = state;
    m->used_now[p] = 1;
    m->window_used[p] = 1.0f;
    return 0;
}

static int m_backward_end(void *state)
{
    mutant *m = state;
    const bug_hooks *h = m->h;
    int sync = m->fwd_sync;
    m->armed = 0; /* finalize_backward disarms (a backward that did not sync was not armed) */
    m->since_sync++;
    if (h->backward) {
        int rc = h->backward(m, &sync);
        if (rc)
            return rc < 0 ? -1 : 0;
    }
    if (!sync) {
        if (h->not_syncing)
            h->not_syncing(m);
        return h->not_syncing_comm ? h->not_syncing_comm(m) : 0;
    }
    int rc = h->syncing ? h->syncing(m) : reduce(m);
    m->since_sync = 0;
    return rc;
}

/* zero with set_to_none ends every gradient_as_bucket_view alias, as in the reference (ddp_ref.c). */
static int m_zero_grad(void *state)
{
    mutant *m = state;
    if (m->svc->zero_to_none)
        memset(m->alias, 0, sizeof m->alias);
    if (m->h->zero_grad)
        m->h->zero_grad(m);
    m->have_kept = 0;
    return 0;
}

static int m_step(void *state)
{
    mutant *m = state;
    if (m->h->step)
        m->h->step(m);
    if (!m->updated) /* GradScaler.update */
        scaler_update(&m->scaler_cfg, &m->scaler, m->found_inf);
    m->updated = 0;
    return 0;
}

/* GradScaler.scale: the loss times this rank's scale. */
static int m_scaler_scale(void *state, float *scale)
{
    *scale = ((mutant *)state)->scaler.scale;
    return 0;
}

/* GradScaler.unscale_ of .grad (synced: every rank finds the same), but for the bug's departures. */
static int m_scaler_unscale(void *state, int *found_inf)
{
    mutant *m = state;
    const ddpsim_services *svc = m->svc;
    if (m->h->update_before_unscale) {
        int found = 0;
        for (size_t i = 0; i < svc->total_count; i++)
            found |= !isfinite(svc->all_grads[i]);
        scaler_update(&m->scaler_cfg, &m->scaler, found);
        m->updated = 1;
    }
    m->found_inf = scaler_unscale(svc->all_grads, svc->total_count, scaler_inv_scale(m->scaler.scale));
    if (m->h->found_inf_always)
        m->found_inf = 1;
    *found_inf = m->found_inf;
    return 0;
}

/* The loss normalizations the mutants get wrong (norm_mistake), each as the factor it amounts to. */
enum { MISTAKE_NONE, MISTAKE_MICRO_BATCH_MEAN, MISTAKE_RANK_LOCAL, MISTAKE_DROPPED, MISTAKE_AFTER_BACKWARD,
       MISTAKE_EMPTY_COUNTED, MISTAKE_RESCALE_EACH_MICRO_STEP, MISTAKE_LOCAL_WHEN_ONE_STEP,
       MISTAKE_TAIL_CONFIGURED_STEPS };

/*
 * The token loss's factor as a trainer computes it: at the window's first micro-step it counts its prefetched
 * micro-batches and sums the counts over the ranks (one allreduce_sum, as torchtitan and open-instruct do), then
 * divides in float; the mistake, if any, in place of the intended factor.
 */
static int m_loss_factor(void *state, const ddpsim_loss_window *w, float *factor)
{
    mutant *m = state;
    const ddpsim_services *svc = m->svc;
    float here = 0, own = 0, padded = 0; /* this micro-batch's tokens, this rank's in the window, padded sequences */
    for (int k = 0; k < w->micro_steps; k++)
        for (int r = 0; r < w->rows; r++) {
            int t = w->tokens[k * w->rows + r];
            own += (float)t;
            padded += t == 0;
            if (k == w->micro)
                here += (float)t;
        }
    if (w->micro == 0) {
        m->window_tokens[0] = own;
        m->window_tokens[1] = padded;
        if (svc->allreduce_sum(svc->env, m->window_tokens, 2))
            return -1;
    }
    float n = (float)svc->world_size, total = m->window_tokens[0], steps = (float)w->micro_steps;
    float intended = w->norm == DDPSIM_LOSS_NORM_GLOBAL_TOKENS       ? n / total
                     : w->norm == DDPSIM_LOSS_NORM_MICRO_BATCH_MEAN ? 1.0f / (steps * here)
                                                                     : n;
    if (here == 0 && m->h->norm_mistake == MISTAKE_NONE)
        intended = 0; /* nothing to normalize: a careful trainer divides by no zero */
    switch (m->h->norm_mistake) {
    case MISTAKE_MICRO_BATCH_MEAN: *factor = 1.0f / (steps * here); break;
    case MISTAKE_RANK_LOCAL: *factor = 1.0f / own; break;
    case MISTAKE_DROPPED: *factor = 1.0f; break;
    case MISTAKE_AFTER_BACKWARD: *factor = n; break;
    case MISTAKE_EMPTY_COUNTED: *factor = n / (total + m->window_tokens[1]); break;
    case MISTAKE_RESCALE_EACH_MICRO_STEP: /* what is added at micro-step k is divided by M at k and every later one */
        *factor = intended * steps;
        for (int k = w->micro; k < w->micro_steps; k++)
            *factor = *factor / steps;
        break;
    case MISTAKE_LOCAL_WHEN_ONE_STEP: *factor = w->micro_steps == 1 ? 1.0f / here : intended; break;
    case MISTAKE_TAIL_CONFIGURED_STEPS: *factor = 1.0f / ((float)w->accumulation * here); break;
    default: *factor = intended;
    }
    return 0;
}

static int m_optimizer_step(void *state, int *owned)
{
    mutant *m = state;
    *owned = 0;
    return m->h->optimizer_step ? m->h->optimizer_step(m, owned) : 0;
}

static int m_join_enter(void *state, int divide_by_initial_world_size)
{
    mutant *m = state;
    impl_join_enter(&m->join, divide_by_initial_world_size);
    return 0;
}

/* A peer's forward after this rank ran out: the buffers, then zeros for the peers' one allreduce, and the used map
 * of the last sync (ddp_ref.c dev_used). */
static int m_join_shadow(void *state)
{
    mutant *m = state;
    const ddpsim_services *svc = m->svc;
    int any, src;
    if (impl_join_shadow(svc, &m->join, &any, &src) ||
        (m->fwd_param_sync && svc->broadcast_buffers && broadcast_buffers(m, src)))
        return -1;
    m->fwd_param_sync = any;
    if (!any && !m->h->join_shadows_no_sync)
        return 0;
    float *zeros = calloc(svc->total_count, sizeof *zeros);
    if (!zeros)
        return m_error(m, "out of memory");
    int rc = (svc->find_unused && svc->allreduce_sum(svc->env, m->dev_used, (size_t)svc->nparams)) ||
             svc->allreduce_sum(svc->env, zeros, svc->total_count);
    free(zeros);
    return rc ? -1 : 0;
}

static int m_join_exit(void *state)
{
    mutant *m = state;
    return impl_join_exit(m->svc, &m->join, !m->h->final_sync_skips_buffers);
}

/* ---- each bug's behaviour, in the catalogue's order ---- */

/* sync-on-exit */
static int sync_on_exit(mutant *m)
{
    return reduce(m);
}
static const bug_hooks hooks_SYNC_ON_EXIT = {.no_sync_exit = sync_on_exit};

/* last-microbatch-only: g0 + avg(current) */
static int last_microbatch_only(mutant *m)
{
    drop_g0(m);
    if (reduce(m))
        return -1;
    add_g0(m);
    return 0;
}
static const bug_hooks hooks_LAST_MICROBATCH_ONLY = {.syncing = last_microbatch_only};

/* prior-not-current: avg(g0) + current; the current part is parked in `first` */
static int prior_not_current(mutant *m)
{
    float *g = m->svc->all_grads;
    size_t n = m->svc->total_count;
    for (size_t i = 0; i < n; i++) {
        m->first[i] = g[i] - m->g0[i];
        g[i] = m->g0[i];
    }
    if (reduce(m))
        return -1;
    for (size_t i = 0; i < n; i++)
        g[i] += m->first[i];
    return 0;
}
static const bug_hooks hooks_PRIOR_NOT_CURRENT = {.syncing = prior_not_current};

/* sync-every-microstep */
static int always_sync(mutant *m, int *sync)
{
    (void)m;
    *sync = 1;
    return 0;
}
static const bug_hooks hooks_SYNC_EVERY_MICROSTEP = {.backward = always_sync};

/* never-sync */
static int never_sync(mutant *m, int *sync)
{
    (void)m;
    *sync = 0;
    return 0;
}
static const bug_hooks hooks_NEVER_SYNC = {.backward = never_sync};

/* decide-at-backward */
static int decide_at_backward(mutant *m, int *sync)
{
    *sync = m->no_sync_depth == 0;
    return 0;
}
static const bug_hooks hooks_DECIDE_AT_BACKWARD = {.backward = decide_at_backward};

/* disarm-in-no-sync: the latest forward decides alone */
static void disarm_in_no_sync(mutant *m, int no_sync_active)
{
    m->fwd_sync = !no_sync_active;
}
static const bug_hooks hooks_DISARM_IN_NO_SYNC = {.forward = disarm_in_no_sync};

/* sync-first-not-last: off by one, the previous micro-step's decision */
static void sync_first_not_last(mutant *m, int no_sync_active)
{
    (void)no_sync_active;
    m->fwd_sync = m->prev_armed;
    m->prev_armed = m->armed;
}
static const bug_hooks hooks_SYNC_FIRST_NOT_LAST = {.forward = sync_first_not_last};

/* first-microbatch-only: the window's first accumulation is what is reduced */
static int keep_first_microbatch(mutant *m, int *sync)
{
    (void)sync;
    if (m->first_in_window) {
        memcpy(m->first, m->svc->all_grads, m->svc->total_count * sizeof(float));
        m->first_in_window = 0;
    }
    return 0;
}
static int reduce_first_microbatch(mutant *m)
{
    memcpy(m->svc->all_grads, m->first, m->svc->total_count * sizeof(float));
    return reduce(m);
}
static const bug_hooks hooks_FIRST_MICROBATCH_ONLY = {.backward = keep_first_microbatch,
                                                      .syncing = reduce_first_microbatch};

/* overwrite-not-accumulate: the syncing backward's own gradient replaces the accumulation */
static int overwrite_not_accumulate(mutant *m)
{
    drop_g0(m);
    return reduce(m);
}
static const bug_hooks hooks_OVERWRITE_NOT_ACCUMULATE = {.syncing = overwrite_not_accumulate};

/* sum-not-average */
static void no_scaling(mutant *m, float *g)
{
    (void)m;
    (void)g;
}
static const bug_hooks hooks_SUM_NOT_AVERAGE = {.scale = no_scaling};

/* double-average */
static void scale_twice(mutant *m, float *g)
{
    coll_mul_inv_n(g, g, m->svc->total_count, m->n);
    coll_mul_inv_n(g, g, m->svc->total_count, m->n);
}
static const bug_hooks hooks_DOUBLE_AVERAGE = {.scale = scale_twice};

/* post-divide: sum, then divide */
static void divide_after_sum(mutant *m)
{
    float *g = m->svc->all_grads;
    coll_div_n(g, g, m->svc->total_count, m->div);
}
static const bug_hooks hooks_POST_DIVIDE = {.scale = no_scaling, .after_reduce = divide_after_sum};

/* unused-last-step-only */
static const bug_hooks hooks_UNUSED_LAST_STEP_ONLY = {.used_from_last_step = 1};

/* no-initial-broadcast */
static const bug_hooks hooks_NO_INITIAL_BROADCAST = {.no_initial_broadcast = 1};

/* rank-never-syncs: rank 1 skips every reduction */
static int rank1_skips(mutant *m)
{
    return m->svc->rank == 1;
}
static const bug_hooks hooks_RANK_NEVER_SYNCS = {.skips_reduction = rank1_skips};

/* skip-average-tiny-tensor: single-element tensors are summed, not averaged */
static void scale_but_tiny(mutant *m, float *g)
{
    (void)g;
    for (int p = 0; p < m->svc->nparams; p++)
        if (m->svc->params[p].count > 1)
            scale_param(m, p);
}
static const bug_hooks hooks_SKIP_AVERAGE_TINY_TENSOR = {.scale = scale_but_tiny};

/* self-add-each-microstep: an unsynced backward adds the accumulation to itself */
static const bug_hooks hooks_SELF_ADD_EACH_MICROSTEP = {.not_syncing = add_g0};

/* tail-window-dropped: the engine's own count, the first window's length */
static int count_window(mutant *m, int *sync)
{
    if (m->window)
        *sync = m->since_sync >= m->window; /* DeepSpeed-style (micro_steps + 1) % gas */
    return 0;
}
static int learn_window(mutant *m)
{
    if (!m->window)
        m->window = m->since_sync;
    return reduce(m);
}
static const bug_hooks hooks_TAIL_WINDOW_DROPPED = {.backward = count_window, .syncing = learn_window};

/* reduced-again: avg(what is new since the last sync) + sum over ranks of what it reduced */
static int reduce_again(mutant *m)
{
    float *g = m->svc->all_grads;
    size_t n = m->svc->total_count;
    if (m->have_kept)
        for (size_t i = 0; i < n; i++)
            g[i] -= m->kept[i];
    if (reduce(m))
        return -1;
    if (m->have_kept)
        for (size_t i = 0; i < n; i++)
            g[i] += (float)m->n * m->kept[i];
    memcpy(m->kept, g, n * sizeof(float));
    m->have_kept = 1;
    return 0;
}
static const bug_hooks hooks_REDUCED_AGAIN = {.syncing = reduce_again};

/* skip-none-grads: only the parameters whose .grad is defined go into the flat buffer that is summed */
static int reduce_defined_only(mutant *m, float *g)
{
    (void)g;
    const ddpsim_services *svc = m->svc;
    size_t n = 0;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->grad_defined[p]) {
            memcpy(m->kept + n, svc->params[p].grad, svc->params[p].count * sizeof(float));
            n += svc->params[p].count;
        }
    if (svc->allreduce_sum(svc->env, m->kept, n))
        return -1;
    n = 0;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->grad_defined[p]) {
            memcpy(svc->params[p].grad, m->kept + n, svc->params[p].count * sizeof(float));
            n += svc->params[p].count;
        }
    return 0;
}
static const bug_hooks hooks_SKIP_NONE_GRADS = {.allreduce = reduce_defined_only};

/* rebuild-drops-accumulation: the buckets are rebuilt once, after the first sync, and the next backward overwrites */
static int rebound_overwrites(mutant *m, int *sync)
{
    (void)sync;
    if (m->rebind_pending) {
        drop_g0(m);
        m->rebind_pending = 0;
    }
    return 0;
}
static int rebuild_after_first(mutant *m)
{
    m->rebind_pending = m->syncs == 0;
    return reduce(m);
}
static const bug_hooks hooks_REBUILD_DROPS_ACCUMULATION = {.backward = rebound_overwrites,
                                                           .syncing = rebuild_after_first};

/* stale-bucket: from the second sync on, the old bucket is reduced again */
static int reduce_stale_bucket(mutant *m, float *g)
{
    const ddpsim_services *svc = m->svc;
    size_t bytes = svc->total_count * sizeof(float);
    if (m->syncs == 0) {
        if (svc->allreduce_sum(svc->env, g, svc->total_count))
            return -1;
        memcpy(m->kept, g, bytes);
        return 0;
    }
    if (svc->allreduce_sum(svc->env, m->kept, svc->total_count)) /* the copy-in went to a view no longer reduced */
        return -1;
    memcpy(g, m->kept, bytes);
    return 0;
}
static const bug_hooks hooks_STALE_BUCKET = {.allreduce = reduce_stale_bucket};

/* unscale-never-scaled: the optimizer divides by a loss scale backward never applied */
static int unscale_step(mutant *m, int *owned)
{
    sgd(m, 65536.0f);
    *owned = 1;
    return 0;
}
static const bug_hooks hooks_UNSCALE_NEVER_SCALED = {.optimizer_step = unscale_step};

/* no-zero-after-step: the zero after a step never happens */
static void keep_stepped(mutant *m)
{
    memcpy(m->kept, m->svc->all_grads, m->svc->total_count * sizeof(float));
    m->have_kept = 1;
}
static void zero_skipped(mutant *m)
{
    if (m->have_kept)
        memcpy(m->svc->all_grads, m->kept, m->svc->total_count * sizeof(float));
}
static const bug_hooks hooks_NO_ZERO_AFTER_STEP = {.step = keep_stepped, .zero_grad = zero_skipped};

/* boundary-false-in-backward: the window is reduced at the step, not by the syncing backward */
static int defer_to_step(mutant *m, int *sync)
{
    if (!*sync)
        return 0;
    m->reduce_at_step = 1;
    return 1;
}
static int reduce_at_step(mutant *m, int *owned)
{
    (void)owned;
    if (!m->reduce_at_step)
        return 0;
    m->reduce_at_step = 0;
    return reduce(m);
}
static const bug_hooks hooks_BOUNDARY_FALSE_IN_BACKWARD = {.backward = defer_to_step,
                                                           .optimizer_step = reduce_at_step};

/* every-backward-a-boundary: each backward reduces its own micro-batch and replaces the accumulation */
static int every_backward_reduces(mutant *m, int *sync)
{
    (void)sync;
    drop_g0(m);
    return reduce(m) ? -1 : 1;
}
static const bug_hooks hooks_EVERY_BACKWARD_A_BOUNDARY = {.backward = every_backward_reduces};

/* every-backward-overwrites: .grad is overwritten, never accumulated */
static int overwrite_each(mutant *m, int *sync)
{
    (void)sync;
    drop_g0(m);
    return 0;
}
static const bug_hooks hooks_EVERY_BACKWARD_OVERWRITES = {.backward = overwrite_each};

/* sync-flag-steps: the sync flag also gates the optimizer */
static int reduce_and_step(mutant *m)
{
    if (reduce(m))
        return -1;
    sgd(m, 1.0f);
    return 0;
}
static const bug_hooks hooks_SYNC_FLAG_STEPS = {.syncing = reduce_and_step};

/* no-buffer-broadcast */
static const bug_hooks hooks_NO_BUFFER_BROADCAST = {.no_buffer_broadcast = 1};

/* join-ignores-no-sync */
static const bug_hooks hooks_JOIN_IGNORES_NO_SYNC = {.join_shadows_no_sync = 1};

/* join-divides-by-running */
static const bug_hooks hooks_JOIN_DIVIDES_BY_RUNNING = {.divide_by_running = 1};

/* join-final-sync-skips-buffers */
static const bug_hooks hooks_JOIN_FINAL_SYNC_SKIPS_BUFFERS = {.final_sync_skips_buffers = 1};

/*
 * first-hook-reduces: a parameter whose gradient came in pieces goes into the reduction as its first hook saw
 * it, .grad after the first piece's AccumulateGrad (the window's accumulation plus that piece); the later pieces,
 * whose hooks come after the reduction started, are added to the reduced value locally.
 */
static void reduce_first_pieces_only(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    const model *replica = impl_env_of(svc)->m;
    for (int p = 0; p < svc->nparams; p++) {
        if (model_npieces(replica, p) < 2)
            continue;
        const float *first = model_piece(replica, p, 0), *g0 = m->g0 + (svc->params[p].grad - svc->all_grads);
        for (size_t j = 0; j < svc->params[p].count; j++)
            svc->params[p].grad[j] = g0[j] + first[j];
    }
}
static void add_later_pieces(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    const model *replica = impl_env_of(svc)->m;
    for (int p = 0; p < svc->nparams; p++)
        for (int k = 1; k < model_npieces(replica, p); k++) {
            const float *piece = model_piece(replica, p, k);
            for (size_t j = 0; j < svc->params[p].count; j++)
                svc->params[p].grad[j] += piece[j];
        }
}
static const bug_hooks hooks_FIRST_HOOK_REDUCES = {.before_scale = reduce_first_pieces_only,
                                                   .after_reduce = add_later_pieces};

/* reduces-in-no-sync: the buckets go out in every backward; without a sync the sum is thrown away */
static int reduce_and_drop(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    float *copy = malloc(svc->total_count * sizeof *copy);
    if (!copy)
        return m_error(m, "reduces-in-no-sync: out of memory");
    memcpy(copy, svc->all_grads, svc->total_count * sizeof *copy);
    int rc = svc->allreduce_sum(svc->env, copy, svc->total_count);
    free(copy);
    return rc ? -1 : 0;
}
static const bug_hooks hooks_REDUCES_IN_NO_SYNC = {.not_syncing_comm = reduce_and_drop};

/*
 * momentum-per-microstep: every backward advances the buffer with its own part of .grad (the change since the
 * last backward or zero_grad, kept in m->kept), b = m * b + part, and the step moves along b; torch's SGD advances
 * it once per step with the whole .grad. Without momentum the step is ddpsim's SGD.
 */
static void advance_momentum(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    for (size_t i = 0; i < svc->total_count; i++) {
        float part = svc->all_grads[i] - (m->have_kept ? m->kept[i] : 0.0f);
        float decayed = svc->momentum * m->momentum[i];
        m->momentum[i] = decayed + part;
    }
    memcpy(m->kept, svc->all_grads, svc->total_count * sizeof(float));
    m->have_kept = 1;
}
static int step_along_momentum(mutant *m, int *owned)
{
    const ddpsim_services *svc = m->svc;
    if (svc->momentum == 0)
        return 0;
    float neg_lr = -svc->lr;
    const float *b = m->momentum;
    for (int p = 0; p < svc->nparams; p++)
        for (size_t i = 0; i < svc->params[p].count; i++, b++)
            svc->params[p].data[i] = svc->params[p].data[i] + neg_lr * *b;
    *owned = 1;
    return 0;
}
static const bug_hooks hooks_MOMENTUM_PER_MICROSTEP = {.not_syncing = advance_momentum,
                                                       .after_reduce = advance_momentum,
                                                       .optimizer_step = step_along_momentum};

/* found-inf-always: the unscale's finding is always "inf" (m_scaler_unscale) */
static const bug_hooks hooks_FOUND_INF_ALWAYS = {.found_inf_always = 1};

/* unscale-after-update: GradScaler.update runs inside the unscale, before it divides (m_scaler_unscale) */
static const bug_hooks hooks_UNSCALE_AFTER_UPDATE = {.update_before_unscale = 1};

/* the token loss's mistakes (m_loss_factor) */
static const bug_hooks hooks_NORM_MICRO_BATCH_MEAN = {.norm_mistake = MISTAKE_MICRO_BATCH_MEAN};
static const bug_hooks hooks_NORM_RANK_LOCAL = {.norm_mistake = MISTAKE_RANK_LOCAL};
static const bug_hooks hooks_NORM_DROPPED = {.norm_mistake = MISTAKE_DROPPED};
static const bug_hooks hooks_NORM_AFTER_BACKWARD = {.norm_mistake = MISTAKE_AFTER_BACKWARD};
static const bug_hooks hooks_NORM_EMPTY_COUNTED = {.norm_mistake = MISTAKE_EMPTY_COUNTED};
static const bug_hooks hooks_NORM_RESCALE_EACH_MICRO_STEP = {.norm_mistake = MISTAKE_RESCALE_EACH_MICRO_STEP};
static const bug_hooks hooks_NORM_LOCAL_WHEN_ONE_STEP = {.norm_mistake = MISTAKE_LOCAL_WHEN_ONE_STEP};
static const bug_hooks hooks_NORM_TAIL_CONFIGURED_STEPS = {.norm_mistake = MISTAKE_TAIL_CONFIGURED_STEPS};

/* ---- the tables the registry reads ---- */

#define AS_CREATE(id, name, mechanism, source, bitwise_only)                                                         \
    static int create_##id(const ddpsim_services *svc, void **state) { return create_mutant(svc, state, &hooks_##id); }
BUGS(AS_CREATE)

#define AS_OPS(id, text, mechanism, source, bitwise_only)                                                            \
    [BUG_##id] = {                                                                                                   \
        .api_version = DDPSIM_IMPL_API_VERSION, .name = text, .description = mechanism, .create = create_##id,       \
        .destroy = destroy_mutant, .forward_begin = m_forward_begin, .no_sync_enter = m_enter,                      \
        .no_sync_exit = m_exit, .grad_ready = m_ready, .backward_end = m_backward_end, .zero_grad = m_zero_grad,     \
        .step = m_step, .optimizer_step = m_optimizer_step, .join_enter = m_join_enter,                              \
        .join_shadow = m_join_shadow, .join_exit = m_join_exit, .scaler_scale = m_scaler_scale,                      \
        .scaler_unscale = m_scaler_unscale, .loss_factor = m_loss_factor,                                            \
    },
static const ddpsim_impl_ops mutant_ops[BUG_COUNT] = {BUGS(AS_OPS)};

#define AS_ENTRY(id, name, mechanism, text_source, bw) [BUG_##id] = {&mutant_ops[BUG_##id], text_source, 1, bw, 0},
static const impl_entry entries[BUG_COUNT] = {BUGS(AS_ENTRY)};

int impl_mutant_count(void)
{
    return BUG_COUNT;
}

const impl_entry *impl_mutant_at(int i)
{
    return &entries[i];
}
