/*
 * impl_bucketed.c - a realistic, PyTorch-style bucketed DDP with overlap.
 *
 * Gradient-ready events (one per parameter, in the order backward produces
 * them) copy the gradient, times 1/N, into its slot of a bucket buffer.
 * When a bucket's last slot is filled and every bucket before it has been
 * launched, it is handed to the rank's communication thread (pthreads),
 * which sum-allreduces it while the main thread goes on with the events.
 * backward_end waits for every bucket and copies the averages back into
 * .grad. Buckets start in DDP's constructor layout (registration order,
 * first bucket first_bucket_cap, list reversed) and are rebuilt after the
 * first syncing backward in the order gradients became ready, as PyTorch's
 * Reducer does. find_unused: parameters that got no gradient are marked
 * ready at backward_end with their current gradient; parameters unused on
 * every rank in the window keep their local gradient.
 *
 * Only one thread of a rank talks to the world at a time: the main thread
 * issues its own collective (the used-parameter bitmap) only after the
 * communication thread has drained every bucket.
 *
 * Join (ddpsim_impl.h, version 4), PyTorch 1.13's protocol in one
 * collective: inside join every forward allgathers (running, syncs) from
 * every rank, where PyTorch allreduces twice (notify_join_context, then
 * _check_global_requires_backward_grad_sync); a rank that has run out takes
 * part with (0, 0) from join_shadow, and when a peer syncs it reduces a
 * bucket of zeros for each of theirs, in their launch order. The gather
 * also names the highest rank running, the buffers' source, and the count
 * that divides without divide_by_initial_world_size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_worker.h"
#include "impl.h"
#include "rng.h"

#define MAXP MODEL_MAX_PARAMS

typedef struct bucket {
    int start, nmembers; /* members[start .. start + nmembers): parameter indices in slot order */
    size_t count;
    float *buf;
    int pending; /* slots not yet filled in this backward */
} bucket;

typedef struct bstate {
    const ddpsim_services *svc;
    int nb;
    bucket b[MAXP];
    int members[MAXP];
    int bucket_of[MAXP];
    size_t slot_of[MAXP]; /* offset of a parameter's slot in its bucket */
    int no_sync_depth; /* nested no_sync contexts open */
    int armed;         /* a forward outside no_sync armed the next backward's sync */
    int fwd_param_sync; /* the next forward broadcasts the buffers (require_forward_param_sync) */
    unsigned char ready[MAXP];
    float window_used[MAXP];
    float dev_used[MAXP];  /* the global used map of the last sync, own or shadowed (ddp_ref.c dev_used) */
    int rebuilt, order[MAXP], norder;
    unsigned char alias[MAXP]; /* gradient_as_bucket_view: the grad is its bucket's view since a sync (ddp_ref.c) */
    int next_launch;
    int launch[MAXP];  /* launch order: 0, 1, ... or, under chaos, a permutation shared by every rank */
    uint64_t nsync;
    impl_join join;           /* join (impl.h) */
    int div;                  /* what the next sync divides by */
    comm_worker comm;      /* the communication thread */
    float *wire;           /* a compressing hook's gathered chunk (COMM_HOOK_CHUNK values of every rank) */
} bstate;

static int b_error(bstate *s, const char *msg)
{
    return s->svc->set_error(s->svc->env, msg);
}

/*
 * The registered communication hook on one bucket (comm_hook.h), through
 * the services' collectives: allreduce_hook divides and sums in float; a
 * compressing hook rounds and divides, gathers every rank's compressed
 * chunk and sums it in the format, in rank order (or exactly, under
 * --algo exact).
 */
static int hook_reduce(bstate *s, float *buf, size_t count)
{
    const ddpsim_services *svc = s->svc;
    ddp_comm_hook h = (ddp_comm_hook)svc->comm_hook;
    comm_hook_compress(buf, count, svc->world_size, h);
    if (!ddp_comm_hook_compresses(h))
        return svc->allreduce_sum(svc->env, buf, count);
    for (size_t at = 0; at < count; at += COMM_HOOK_CHUNK) {
        size_t c = count - at < COMM_HOOK_CHUNK ? count - at : COMM_HOOK_CHUNK;
        if (svc->allgather(svc->env, buf + at, s->wire, c * sizeof(float)))
            return -1;
        comm_hook_sum_gathered(s->wire, svc->world_size, c, h, impl_env_of(svc)->cfg.algo == COLL_EXACT, buf + at);
    }
    return 0;
}

/* Bucket k's allreduce, on the communication thread. */
static int reduce_bucket(void *ctx, int k, char *err, size_t len)
{
    bstate *s = ctx;
    impl_env *env = impl_env_of(s->svc);
    int rc = s->svc->comm_hook ? hook_reduce(s, s->b[k].buf, s->b[k].count)
             : env->backend_avg ? impl_reduce(env, s->b[k].buf, s->b[k].count, 1) != DDP_OK
                                : s->svc->allreduce_sum(env, s->b[k].buf, s->b[k].count);
    if (rc)
        snprintf(err, len, "bucket %d allreduce in the communication thread: %s", k, ddp_error_text());
    return rc;
}

/* Lay out buckets from the services' layout: nb buckets of sizes[k] parameters, members in bucket order. */
static int layout(bstate *s, const int *members, const int *sizes, int nb)
{
    const ddpsim_services *svc = s->svc;
    for (int k = 0; k < s->nb; k++)
        free(s->b[k].buf);
    s->nb = nb;
    for (int k = 0, start = 0; k < nb; start += sizes[k++]) {
        bucket *bk = &s->b[k];
        bk->start = start;
        bk->nmembers = sizes[k];
        bk->count = 0;
        for (int j = 0; j < sizes[k]; j++) {
            int p = members[start + j];
            s->members[start + j] = p;
            s->bucket_of[p] = k;
            s->slot_of[p] = bk->count;
            bk->count += svc->params[p].count;
        }
        bk->buf = malloc(bk->count * sizeof(float));
        bk->pending = bk->nmembers;
        if (!bk->buf)
            return b_error(s, "out of memory for a bucket");
    }
    return 0;
}

/* The constructor's buckets, by the services' helper (PyTorch's rule: one bucket before the rebuild, unless find_unused). */
static int initial_layout(bstate *s)
{
    const ddpsim_services *svc = s->svc;
    int members[MAXP], sizes[MAXP];
    int nb = svc->bucket_layout(svc->env, NULL, 0, members, sizes);
    return layout(s, members, sizes, nb);
}

/*
 * After the first syncing backward: buckets in the order gradients became
 * ready, not reversed. Ranks can see different orders, so every rank takes
 * rank 0's (PyTorch's sync_bucket_indices).
 */
static int rebuild(bstate *s)
{
    const ddpsim_services *svc = s->svc;
    int32_t order[MAXP];
    for (int i = 0; i < s->norder; i++)
        order[i] = s->order[i];
    if (svc->broadcast(svc->env, order, (size_t)s->norder * sizeof order[0], 0))
        return -1;
    int members[MAXP], sizes[MAXP];
    int nb = svc->bucket_layout(svc->env, order, s->norder, members, sizes);
    if (nb < 0)
        return b_error(s, "rank 0's bucket order is corrupt");
    s->rebuilt = 1;
    return layout(s, members, sizes, nb);
}

static int b_create(const ddpsim_services *svc, void **state)
{
    bstate *s = calloc(1, sizeof *s);
    if (!s)
        return svc->set_error(svc->env, "out of memory");
    *state = s;
    s->svc = svc;
    s->div = svc->world_size;
    if (initial_layout(s))
        return -1;
    if (ddp_comm_hook_compresses((ddp_comm_hook)svc->comm_hook) &&
        !(s->wire = malloc(COMM_HOOK_CHUNK * (size_t)svc->world_size * sizeof(float))))
        return b_error(s, "out of memory for the communication hook's gather buffer");
    if (comm_worker_start(&s->comm, reduce_bucket, s, "bucket", impl_env_of(svc)))
        return b_error(s, "cannot start the communication thread");
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    s->fwd_param_sync = 1;
    /* _sync_module_states: the buffers too, whatever broadcast_buffers says (PyTorch 1.13) */
    if (svc->nbuffers && svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0))
        return -1;
    return 0;
}

static void b_destroy(void *state)
{
    bstate *s = state;
    if (!s)
        return;
    comm_worker_stop(&s->comm); /* first: the thread may still reduce a bucket */
    for (int k = 0; k < s->nb; k++)
        free(s->b[k].buf);
    free(s->wire);
    free(s);
}

/* PyTorch 1.13 distributed.py forward(): only a forward outside no_sync calls
 * reducer.prepare_for_backward, which arms the reducer; a forward inside no_sync
 * leaves it as it was; finalize_backward disarms it. So the next backward syncs
 * iff some forward since the last sync ran outside no_sync (doc/SEMANTICS.md). */
/*
 * Buckets go out in index order; chaos shuffles the order the communication thread takes them in, the same
 * way on every rank (seeded by the chaos seed and the sync count, which a joined rank's shadow counts too),
 * so the ranks' collectives still pair up. Values do not change: each bucket is reduced alone.
 */
static void plan_launch(bstate *s)
{
    impl_env *env = impl_env_of(s->svc);
    for (int k = 0; k < s->nb; k++)
        s->launch[k] = k;
    if (!env->chaos)
        return;
    uint64_t key = rng_key(rng_key(env->chaos_seed, 0x6275636b /* "buck" */), s->nsync);
    for (int k = s->nb - 1; k > 0; k--) {
        int j = (int)rng_below(key, (uint64_t)k, (uint32_t)k + 1);
        int t = s->launch[k];
        s->launch[k] = s->launch[j];
        s->launch[j] = t;
    }
}

/* The buffers from src (the forward's pre-sync, by require_forward_param_sync and broadcast_buffers). */
static int sync_buffers(bstate *s, int src)
{
    const ddpsim_services *svc = s->svc;
    if (svc->nbuffers && svc->broadcast_buffers && s->fwd_param_sync &&
        svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), src))
        return -1;
    return 0;
}

static int b_forward_begin(void *state, int no_sync_active)
{
    bstate *s = state;
    const ddpsim_services *svc = s->svc;
    int nrunning, any, src;
    if (impl_join_forward(svc, &s->join, !no_sync_active, &nrunning, &any, &src))
        return -1;
    /* distributed.py forward, _check_sync_bufs_pre_fwd: the buffers before the forward when the forward before
     * it ran outside no_sync (require_forward_param_sync), with broadcast_buffers; from rank 0, or under join
     * from the highest rank running. */
    if (sync_buffers(s, src))
        return -1;
    s->fwd_param_sync = !no_sync_active;
    s->div = s->join.on && !s->join.divide_initial ? nrunning : svc->world_size;
    if (!no_sync_active && !s->armed) {
        s->armed = 1;
        plan_launch(s);
        s->nsync++;
    }
    memset(s->ready, 0, sizeof s->ready);
    s->norder = 0;
    return 0;
}

static int b_enter(void *state)
{
    ((bstate *)state)->no_sync_depth++;
    return 0;
}

/* Leaving no_sync syncs nothing: the sync belongs to the next armed backward. */
static int b_exit(void *state)
{
    ((bstate *)state)->no_sync_depth--;
    return 0;
}

/* Copy parameter p's gradient, scaled, into its slot; launch what became launchable, in order. */
static void fill_slot(bstate *s, int p)
{
    const ddpsim_services *svc = s->svc;
    bucket *bk = &s->b[s->bucket_of[p]];
    float *dst = bk->buf + s->slot_of[p];
    const float *g = svc->params[p].grad;
    if (impl_env_of(svc)->backend_avg || svc->comm_hook)
        memcpy(dst, g, svc->params[p].count * sizeof(float)); /* the backend averages (ncclAvg), or the hook does */
    else if (svc->bucket_view && s->alias[p])
        coll_div_n(dst, g, svc->params[p].count, s->div);
    else
        coll_mul_inv_n(dst, g, svc->params[p].count, s->div);
    bk->pending--;
    while (s->next_launch < s->nb && s->b[s->launch[s->next_launch]].pending == 0)
        comm_worker_push(&s->comm, s->launch[s->next_launch++]);
}

static int b_ready(void *state, int p)
{
    bstate *s = state;
    if (s->ready[p])
        return b_error(s, "a parameter was reported ready twice in one backward");
    s->ready[p] = 1;
    s->window_used[p] = 1.0f;
    s->order[s->norder++] = p;
    if (s->armed)
        fill_slot(s, p);
    return 0;
}

static int b_backward_end(void *state)
{
    bstate *s = state;
    const ddpsim_services *svc = s->svc;
    if (!s->armed)
        return 0;
    s->armed = 0; /* finalize_backward: the next sync needs a new forward outside no_sync */
    int missing = -1;
    for (int p = svc->nparams - 1; p >= 0; p--)
        if (!s->ready[p]) {
            if (!svc->find_unused) {
                missing = p;
                continue;
            }
            s->ready[p] = 1; /* unused this time: contributes its current gradient */
            s->order[s->norder++] = p;
            fill_slot(s, p);
        }
    int comm_failed = comm_worker_wait(&s->comm);
    if (missing >= 0) {
        char msg[IMPL_ERROR_LEN];
        snprintf(msg, sizeof msg, "parameter '%s' got no gradient in a syncing backward (find_unused is off)",
                 svc->params[missing].name);
        return b_error(s, msg);
    }
    if (comm_failed)
        return b_error(s, s->comm.error);
    float global_used[MAXP];
    if (svc->find_unused) {
        memcpy(global_used, s->window_used, sizeof(float) * (size_t)svc->nparams);
        if (svc->allreduce_sum(svc->env, global_used, (size_t)svc->nparams))
            return -1;
        memcpy(s->dev_used, global_used, sizeof(float) * (size_t)svc->nparams);
    }
    for (int p = 0; p < svc->nparams; p++)
        if (!svc->find_unused || global_used[p] != 0.0f) {
            memcpy(svc->params[p].grad, s->b[s->bucket_of[p]].buf + s->slot_of[p],
                   svc->params[p].count * sizeof(float));
            s->alias[p] = (unsigned char)svc->bucket_view;
        }
    for (int k = 0; k < s->nb; k++)
        s->b[k].pending = s->b[k].nmembers;
    s->next_launch = 0;
    memset(s->window_used, 0, sizeof s->window_used);
    /* PyTorch rebuilds once, and not at all with find_unused (the used set may change every step). */
    if (!s->rebuilt && !svc->find_unused)
        return rebuild(s);
    return 0;
}

static int b_nothing(void *state)
{
    (void)state;
    return 0;
}

/* A zero that makes every .grad None ends every alias: the next sync copies in by multiplying again (ddp_ref.c). */
static int b_zero_grad(void *state)
{
    bstate *s = state;
    if (s->svc->zero_to_none)
        memset(s->alias, 0, sizeof s->alias);
    return 0;
}

static int b_join_enter(void *state, int divide_by_initial_world_size)
{
    bstate *s = state;
    impl_join_enter(&s->join, divide_by_initial_world_size);
    return 0;
}

/* A peer's forward after this rank ran out (_DDPJoinHook.main_hook): its buffers, then zeros for its sync. */
static int b_join_shadow(void *state)
{
    bstate *s = state;
    const ddpsim_services *svc = s->svc;
    int any, src;
    if (impl_join_shadow(svc, &s->join, &any, &src) || sync_buffers(s, src))
        return -1;
    s->fwd_param_sync = any;
    if (!any)
        return 0;
    plan_launch(s);
    s->nsync++;
    for (int q = 0; q < s->nb; q++) {
        bucket *bk = &s->b[s->launch[q]];
        memset(bk->buf, 0, bk->count * sizeof(float));
        if (svc->allreduce_sum(svc->env, bk->buf, bk->count))
            return -1;
    }
    /* _match_unused_params_allreduce: the used map of the last sync, reduced in place */
    if (svc->find_unused && svc->allreduce_sum(svc->env, s->dev_used, (size_t)svc->nparams))
        return -1;
    return 0;
}

/* _sync_final_model: the parameters and buffers of the highest rank that shadowed nothing. */
static int b_join_exit(void *state)
{
    bstate *s = state;
    return impl_join_exit(s->svc, &s->join, 1);
}

const ddpsim_impl_ops impl_bucketed_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "bucketed",
    .description = "PyTorch-style DDP: ready events fill buckets, a communication thread reduces them during "
                   "backward, buckets rebuilt in ready order",
    .create = b_create,
    .destroy = b_destroy,
    .forward_begin = b_forward_begin,
    .no_sync_enter = b_enter,
    .no_sync_exit = b_exit,
    .grad_ready = b_ready,
    .backward_end = b_backward_end,
    .zero_grad = b_zero_grad,
    .step = b_nothing,
    .join_enter = b_join_enter,
    .join_shadow = b_join_shadow,
    .join_exit = b_join_exit,
};
