/*
 * impl_mutants.c - the catalogue: real DDP gradient-synchronization bugs,
 * each reproduced as a built-in implementation that ddpsim must catch.
 *
 * All mutants share one simple DDP (reduce the whole gradient buffer in one
 * allreduce after the backward) that is correct but for the one bug its
 * name says, so what catches a mutant is its bug and nothing else: with the
 * ordered algorithm the shared part gives the reference's bits.
 */
#include <stdlib.h>
#include <string.h>

#include "impl.h"

typedef enum bug {
    BUG_SYNC_ON_EXIT,
    BUG_LAST_MICROBATCH_ONLY,
    BUG_PRIOR_NOT_CURRENT,
    BUG_SYNC_EVERY_MICROSTEP,
    BUG_NEVER_SYNC,
    BUG_DECIDE_AT_BACKWARD,
    BUG_SYNC_FIRST_NOT_LAST,
    BUG_FIRST_MICROBATCH_ONLY,
    BUG_OVERWRITE_NOT_ACCUMULATE,
    BUG_SUM_NOT_AVERAGE,
    BUG_DOUBLE_AVERAGE,
    BUG_POST_DIVIDE,
    BUG_UNUSED_LAST_STEP_ONLY,
    BUG_NO_INITIAL_BROADCAST,
    BUG_RANK_NEVER_SYNCS,
    BUG_SKIP_AVERAGE_TINY_TENSOR,
    BUG_SELF_ADD_EACH_MICROSTEP,
    BUG_COUNT
} bug;

typedef struct mutant {
    const ddpsim_services *svc;
    bug bug;
    int n;
    int no_sync;
    int fwd_sync;          /* the decision this forward took */
    int prev_fwd_sync;     /* sync-first-not-last: the decision of the forward before */
    int first_in_window;   /* the next backward is the first since the last sync */
    unsigned char used_now[MODEL_MAX_PARAMS];
    float window_used[MODEL_MAX_PARAMS];
    float *g0;             /* .grad as it was when this forward began */
    float *first;          /* first-microbatch-only: the window's first accumulation */
    float *saved;          /* local values of parameters unused everywhere */
} mutant;

static int m_error(mutant *m, const char *msg)
{
    return m->svc->set_error(m->svc->env, msg);
}

static void scale(mutant *m, float *g)
{
    const ddpsim_services *svc = m->svc;
    float inv = (float)(1.0 / m->n);
    switch (m->bug) {
    case BUG_SUM_NOT_AVERAGE:
    case BUG_POST_DIVIDE: return;
    case BUG_DOUBLE_AVERAGE:
        for (size_t i = 0; i < svc->total_count; i++)
            g[i] = (g[i] * inv) * inv;
        return;
    case BUG_SKIP_AVERAGE_TINY_TENSOR:
        for (int p = 0; p < svc->nparams; p++)
            if (svc->params[p].count > 1)
                for (size_t j = 0; j < svc->params[p].count; j++)
                    svc->params[p].grad[j] *= inv;
        return;
    default:
        if (svc->bucket_view) {
            float fn = (float)m->n;
            for (size_t i = 0; i < svc->total_count; i++)
                g[i] /= fn;
        } else {
            for (size_t i = 0; i < svc->total_count; i++)
                g[i] *= inv;
        }
    }
}

/* Average .grad across ranks, as DDP does, but for this mutant's bug. */
static int reduce(mutant *m)
{
    const ddpsim_services *svc = m->svc;
    float *g = svc->all_grads;
    if (m->bug == BUG_RANK_NEVER_SYNCS && svc->rank == 1)
        return 0;
    float global_used[MODEL_MAX_PARAMS];
    if (svc->find_unused) {
        for (int p = 0; p < svc->nparams; p++)
            global_used[p] = m->bug == BUG_UNUSED_LAST_STEP_ONLY ? (float)m->used_now[p] : m->window_used[p];
        if (svc->allreduce_sum(svc->env, global_used, (size_t)svc->nparams))
            return -1;
        for (int p = 0; p < svc->nparams; p++)
            if (global_used[p] == 0.0f) {
                size_t off = (size_t)(svc->params[p].grad - g);
                memcpy(m->saved + off, svc->params[p].grad, svc->params[p].count * sizeof(float));
                memset(svc->params[p].grad, 0, svc->params[p].count * sizeof(float));
            }
    }
    scale(m, g);
    if (svc->allreduce_sum(svc->env, g, svc->total_count))
        return -1;
    if (m->bug == BUG_POST_DIVIDE) {
        float fn = (float)m->n;
        for (size_t i = 0; i < svc->total_count; i++)
            g[i] /= fn;
    }
    if (svc->find_unused)
        for (int p = 0; p < svc->nparams; p++)
            if (global_used[p] == 0.0f) {
                size_t off = (size_t)(svc->params[p].grad - g);
                memcpy(svc->params[p].grad, m->saved + off, svc->params[p].count * sizeof(float));
            }
    memset(m->window_used, 0, sizeof m->window_used);
    m->first_in_window = 1;
    return 0;
}

static int create_mutant(const ddpsim_services *svc, void **state, bug b)
{
    mutant *m = calloc(1, sizeof *m);
    if (!m)
        return svc->set_error(svc->env, "out of memory");
    m->svc = svc;
    m->bug = b;
    m->n = svc->world_size;
    m->prev_fwd_sync = 1; /* as if a sync came before the run */
    m->first_in_window = 1;
    size_t bytes = svc->total_count * sizeof(float);
    m->g0 = malloc(bytes);
    m->first = malloc(bytes);
    m->saved = malloc(bytes);
    *state = m;
    if (!m->g0 || !m->first || !m->saved)
        return m_error(m, "out of memory");
    if (b == BUG_NO_INITIAL_BROADCAST)
        return 0;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    return 0;
}

static void destroy_mutant(void *state)
{
    mutant *m = state;
    if (!m)
        return;
    free(m->g0);
    free(m->first);
    free(m->saved);
    free(m);
}

static int m_forward_begin(void *state, int no_sync_active)
{
    mutant *m = state;
    m->fwd_sync = !no_sync_active;
    if (m->bug == BUG_SYNC_FIRST_NOT_LAST) {
        m->fwd_sync = m->prev_fwd_sync; /* off by one: the previous micro-step's decision */
        m->prev_fwd_sync = !no_sync_active;
    }
    memcpy(m->g0, m->svc->all_grads, m->svc->total_count * sizeof(float));
    memset(m->used_now, 0, sizeof m->used_now);
    return 0;
}

static int m_enter(void *state)
{
    ((mutant *)state)->no_sync = 1;
    return 0;
}

static int m_exit(void *state)
{
    mutant *m = state;
    m->no_sync = 0;
    return m->bug == BUG_SYNC_ON_EXIT ? reduce(m) : 0;
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
    const ddpsim_services *svc = m->svc;
    float *g = svc->all_grads;
    size_t n = svc->total_count;
    int sync = m->fwd_sync;
    if (m->bug == BUG_DECIDE_AT_BACKWARD)
        sync = !m->no_sync;
    else if (m->bug == BUG_SYNC_EVERY_MICROSTEP)
        sync = 1;
    else if (m->bug == BUG_NEVER_SYNC)
        sync = 0;
    if (m->bug == BUG_FIRST_MICROBATCH_ONLY && m->first_in_window) {
        memcpy(m->first, g, n * sizeof(float));
        m->first_in_window = 0;
    }
    if (!sync) {
        if (m->bug == BUG_SELF_ADD_EACH_MICROSTEP)
            for (size_t i = 0; i < n; i++)
                g[i] += m->g0[i];
        return 0;
    }
    switch (m->bug) {
    case BUG_LAST_MICROBATCH_ONLY: /* g0 + avg(current) */
        for (size_t i = 0; i < n; i++)
            g[i] -= m->g0[i];
        if (reduce(m))
            return -1;
        for (size_t i = 0; i < n; i++)
            g[i] += m->g0[i];
        return 0;
    case BUG_PRIOR_NOT_CURRENT: { /* avg(g0) + current; the current part is parked in `first` */
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
    case BUG_OVERWRITE_NOT_ACCUMULATE:
        for (size_t i = 0; i < n; i++)
            g[i] -= m->g0[i];
        return reduce(m);
    case BUG_FIRST_MICROBATCH_ONLY:
        memcpy(g, m->first, n * sizeof(float));
        return reduce(m);
    default: return reduce(m);
    }
}

static int m_nothing(void *state)
{
    (void)state;
    return 0;
}

#define MUTANT(ident, bugname)                                                                  \
    static int create_##ident(const ddpsim_services *svc, void **state)                         \
    {                                                                                           \
        return create_mutant(svc, state, bugname);                                              \
    }
MUTANT(sync_on_exit, BUG_SYNC_ON_EXIT)
MUTANT(last_microbatch_only, BUG_LAST_MICROBATCH_ONLY)
MUTANT(prior_not_current, BUG_PRIOR_NOT_CURRENT)
MUTANT(sync_every_microstep, BUG_SYNC_EVERY_MICROSTEP)
MUTANT(never_sync, BUG_NEVER_SYNC)
MUTANT(decide_at_backward, BUG_DECIDE_AT_BACKWARD)
MUTANT(sync_first_not_last, BUG_SYNC_FIRST_NOT_LAST)
MUTANT(first_microbatch_only, BUG_FIRST_MICROBATCH_ONLY)
MUTANT(overwrite_not_accumulate, BUG_OVERWRITE_NOT_ACCUMULATE)
MUTANT(sum_not_average, BUG_SUM_NOT_AVERAGE)
MUTANT(double_average, BUG_DOUBLE_AVERAGE)
MUTANT(post_divide, BUG_POST_DIVIDE)
MUTANT(unused_last_step_only, BUG_UNUSED_LAST_STEP_ONLY)
MUTANT(no_initial_broadcast, BUG_NO_INITIAL_BROADCAST)
MUTANT(rank_never_syncs, BUG_RANK_NEVER_SYNCS)
MUTANT(skip_average_tiny_tensor, BUG_SKIP_AVERAGE_TINY_TENSOR)
MUTANT(self_add_each_microstep, BUG_SELF_ADD_EACH_MICROSTEP)

#define OPS(ident, text, desc)                                                                                       \
    {                                                                                                                \
        .api_version = DDPSIM_IMPL_API_VERSION, .name = text, .description = desc, .create = create_##ident,       \
        .destroy = destroy_mutant, .forward_begin = m_forward_begin, .no_sync_enter = m_enter,                      \
        .no_sync_exit = m_exit, .grad_ready = m_ready, .backward_end = m_backward_end, .zero_grad = m_nothing,     \
        .step = m_nothing,                                                                                           \
    }

static const ddpsim_impl_ops mutant_ops[BUG_COUNT] = {
    OPS(sync_on_exit, "sync-on-exit", "exiting no_sync syncs the accumulated gradients"),
    OPS(last_microbatch_only, "last-microbatch-only",
        "a syncing backward averages only its own micro-batch and adds the local accumulation to it"),
    OPS(prior_not_current, "prior-not-current",
        "the accumulated earlier micro-steps are averaged, the current one stays local"),
    OPS(sync_every_microstep, "sync-every-microstep", "no_sync is ignored: every backward syncs"),
    OPS(never_sync, "never-sync", "gradients are never reduced"),
    OPS(decide_at_backward, "decide-at-backward", "whether to sync is read at backward instead of at forward"),
    OPS(sync_first_not_last, "sync-first-not-last",
        "off by one in the accumulation window: each backward takes the previous forward's decision"),
    OPS(first_microbatch_only, "first-microbatch-only", "only the window's first micro-batch reaches the reduction"),
    OPS(overwrite_not_accumulate, "overwrite-not-accumulate",
        "a syncing backward replaces .grad with the average of its own gradient, dropping the accumulation"),
    OPS(sum_not_average, "sum-not-average", "gradients are summed instead of averaged"),
    OPS(double_average, "double-average", "gradients are divided by N twice"),
    OPS(post_divide, "post-divide",
        "sum, then divide by N, instead of multiplying by 1/N before the sum: same math, other bits"),
    OPS(unused_last_step_only, "unused-last-step-only",
        "find_unused decides 'used' from the last micro-step only, not the whole window"),
    OPS(no_initial_broadcast, "no-initial-broadcast", "ranks keep their own initial parameters"),
    OPS(rank_never_syncs, "rank-never-syncs", "rank 1 skips every reduction the others wait in"),
    OPS(skip_average_tiny_tensor, "skip-average-tiny-tensor", "single-element tensors are summed, not averaged"),
    OPS(self_add_each_microstep, "self-add-each-microstep",
        "each unsynced micro-step adds the accumulated gradient to itself again"),
};

static const impl_entry entries[BUG_COUNT] = {
    {&mutant_ops[BUG_SYNC_ON_EXIT], "lightning-thunder issue #1670", 1, 0},
    {&mutant_ops[BUG_LAST_MICROBATCH_ONLY], "a reading of lightning-thunder PR #2255", 1, 0},
    {&mutant_ops[BUG_PRIOR_NOT_CURRENT], "the mirror image of last-microbatch-only (issue 5 of ddpsim)", 1, 0},
    {&mutant_ops[BUG_SYNC_EVERY_MICROSTEP], "no_sync wrapped around backward only: ClassyVision PR #706 and others",
     1, 0},
    {&mutant_ops[BUG_NEVER_SYNC], "deepmd-kit PR #1104", 1, 0},
    {&mutant_ops[BUG_DECIDE_AT_BACKWARD], "build-nanogpt PR #30", 1, 0},
    {&mutant_ops[BUG_SYNC_FIRST_NOT_LAST], "FunASR PR #3472", 1, 0},
    {&mutant_ops[BUG_FIRST_MICROBATCH_ONLY], "InfiniTrain PR #213", 1, 0},
    {&mutant_ops[BUG_OVERWRITE_NOT_ACCUMULATE], "PyTorch FSDP #73784; Megatron-LM PR #7186", 1, 0},
    {&mutant_ops[BUG_SUM_NOT_AVERAGE], "Horovod #2654", 1, 0},
    {&mutant_ops[BUG_DOUBLE_AVERAGE], "PyTorch PR #42399's original hook design", 1, 0},
    {&mutant_ops[BUG_POST_DIVIDE], "PyTorch PRs #59522 / #59576", 1, 1},
    {&mutant_ops[BUG_UNUSED_LAST_STEP_ONLY], "PyTorch #69031, fixed by PR #124193", 1, 0},
    {&mutant_ops[BUG_NO_INITIAL_BROADCAST], "DDP's constructor broadcast left out", 1, 0},
    {&mutant_ops[BUG_RANK_NEVER_SYNCS], "picotron PR #5", 1, 0},
    {&mutant_ops[BUG_SKIP_AVERAGE_TINY_TENSOR], "Horovod PR #2375", 1, 0},
    {&mutant_ops[BUG_SELF_ADD_EACH_MICROSTEP], "Megatron-LM #6660", 1, 0},
};

int impl_mutant_count(void)
{
    return BUG_COUNT;
}

const impl_entry *impl_mutant_at(int i)
{
    return &entries[i];
}
