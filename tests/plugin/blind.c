/*
 * blind.c - realistic DDP bugs that ddpsim's former default run (the
 * battery's "classic" scenario alone: windows of 3 and 1, four syncs, one
 * bucket, tensor sizes that are multiples of 16) let pass, one per class of
 * scenario in the battery. Each is the correct DDP of simple_ddp.h with one
 * thing wrong; built once per bug:
 *
 *   -DBLIND_FORCED_SYNC_AT_4   a hard-coded accumulation count: the 4th
 *                              backward since the last sync syncs, inside
 *                              no_sync or not                 (window-5)
 *   -DBLIND_EXIT_ARMS_PENDING  exiting no_sync arms the sync of a forward
 *                              that ran inside it             (nosync-edges)
 *   -DBLIND_BUFFER_KEPT_TO_ZERO  the communication buffer accumulates and is
 *                              cleared by zero_grad, not by the sync
 *                                                             (sync-after-sync)
 *   -DBLIND_BUFFER_KEPT_TO_STEP  the same buffer cleared by step (zero-and-step)
 *   -DBLIND_POOL_OF_6          staging buffers from a pool of six, recycled
 *                              without clearing from the 7th sync on
 *                                                             (window-1)
 *   -DBLIND_LAST_BUCKET_SKIPPED  with two buckets or more the last one is
 *                              never reduced (its launch waits for a next
 *                              bucket that never opens)      (buckets)
 *   -DBLIND_VECTOR_TAIL        1/N applied eight floats at a time; the tail
 *                              of a tensor is summed, not averaged
 *                                                             (odd-sizes)
 *   -DBLIND_VIEW_ADDS          with gradient_as_bucket_view the reduced
 *                              values are added to .grad, as if the view had
 *                              been emptied                   (bucket-view)
 *   -DBLIND_SKIP_UNUSED        with find_unused, each rank reduces only the
 *                              parameters it used itself, one by one
 *                                                             (find-unused)
 *   -DBLIND_SYNC_AT_STEP       step first syncs a window that no backward
 *                              synced                          (ends-in-window)
 *   -DBLIND_SHARDED_STEP       a ZeRO-1 optimizer that always shards the
 *                              update, even on rank-local gradients
 *                                                             (zero-and-step)
 *   -DBLIND_BUFFERS_EVERY_FORWARD  rank 0's buffers before every forward,
 *                              inside no_sync too, where PyTorch 1.13 skips
 *                              all but the first                (buffers)
 *
 * tests/test_battery.c runs each: classic passes it, its scenario fails it.
 */
#include "simple_ddp.h"

typedef struct blind {
    unsigned since_sync;   /* backwards since the last sync */
    int unsynced;          /* gradients hold a window no sync reduced */
    float *buf;            /* the kept communication buffer; or the pool */
    float *pool[6];
} blind;

static blind *state_of(sddp *d) { return d->user; }

#if defined(BLIND_VECTOR_TAIL)
static void tail_scale(sddp *d, int p, float *g, size_t count)
{
    (void)p;
    float inv = (float)(1.0 / d->n);
    for (size_t i = 0; i + 8 <= count; i += 8)
        for (size_t k = 0; k < 8; k++)
            g[i + k] *= inv;
}
#endif

#if defined(BLIND_BUFFER_KEPT_TO_ZERO) || defined(BLIND_BUFFER_KEPT_TO_STEP) || defined(BLIND_POOL_OF_6)
/* The scaled gradients are added into a staging buffer that is supposed to be empty, reduced there, copied back. */
static int staged_sum(sddp *d, float *g, size_t count)
{
    blind *b = state_of(d);
#if defined(BLIND_POOL_OF_6)
    float *buf = b->pool[(d->syncs) % 6];
#else
    float *buf = b->buf;
#endif
    for (size_t i = 0; i < count; i++)
        buf[i] += g[i];
    if (d->svc->allreduce_sum(d->svc->env, buf, count))
        return -1;
    memcpy(g, buf, count * sizeof *g);
    return 0;
}
#endif

#if defined(BLIND_LAST_BUCKET_SKIPPED)
static int ready_order[256], nready, rebuilt;

/*
 * Bucket by bucket in PyTorch's layout (the constructor's, then the one
 * rebuilt in the first sync's ready order); a bucket goes out when the next
 * one opens, and the last only if it is the first.
 */
static int bucket_sum(sddp *d, float *g, size_t count)
{
    (void)count;
    const ddpsim_services *svc = d->svc;
    int members[256], sizes[256];
    if (svc->nparams > 256)
        return sddp_fail(d, "too many parameters");
    int nb = rebuilt ? svc->bucket_layout(svc->env, ready_order, nready, members, sizes)
                     : svc->bucket_layout(svc->env, NULL, 0, members, sizes);
    if (!rebuilt && !svc->find_unused) {
        rebuilt = 1; /* from the next sync on (every rank sees the same order here: no chaos in these tests) */
        if (nready != svc->nparams)
            return sddp_fail(d, "a parameter missed its ready event");
    }
    for (int k = 0, first = 0; k < nb; first += sizes[k++]) {
        if (nb > 1 && k == nb - 1)
            break; /* the bug */
        for (int j = first; j < first + sizes[k]; j++) {
            const ddpsim_param_view *v = &svc->params[members[j]];
            if (svc->allreduce_sum(svc->env, v->grad, v->count))
                return -1;
        }
    }
    (void)g;
    return 0;
}
#endif

#if defined(BLIND_SKIP_UNUSED)
/* One allreduce per parameter this rank used in the window: ranks that used other ones call other sums. */
static int used_only_sum(sddp *d, float *g, size_t count)
{
    (void)g;
    (void)count;
    const ddpsim_services *svc = d->svc;
    for (int p = 0; p < svc->nparams; p++)
        if (d->used_now[p] && svc->allreduce_sum(svc->env, svc->params[p].grad, svc->params[p].count))
            return -1;
    return 0;
}
#endif

#if defined(BLIND_VIEW_ADDS)
static float *view_saved;
static int view_adds_sum(sddp *d, float *g, size_t count)
{
    memcpy(view_saved, g, count * sizeof *g); /* what went in, scaled */
    if (d->svc->allreduce_sum(d->svc->env, g, count))
        return -1;
    if (d->svc->bucket_view)
        for (size_t i = 0; i < count; i++)
            g[i] += view_saved[i] * (float)d->n; /* the local gradient, added back: the view was not empty */
    return 0;
}
#endif

static const sddp_hooks hooks = {
#if defined(BLIND_VECTOR_TAIL)
    .scale = tail_scale,
#elif defined(BLIND_BUFFER_KEPT_TO_ZERO) || defined(BLIND_BUFFER_KEPT_TO_STEP) || defined(BLIND_POOL_OF_6)
    .sum = staged_sum,
#elif defined(BLIND_LAST_BUCKET_SKIPPED)
    .sum = bucket_sum,
#elif defined(BLIND_SKIP_UNUSED)
    .sum = used_only_sum,
#elif defined(BLIND_VIEW_ADDS)
    .sum = view_adds_sum,
#endif
};

static int b_create(const ddpsim_services *svc, void **state)
{
    sddp *d;
    int rc = sddp_create(svc, &hooks, &d);
    *state = d;
    if (rc)
        return rc;
    blind *b = calloc(1, sizeof *b);
    d->user = b;
    if (!b || !(b->buf = calloc(svc->total_count, sizeof(float))))
        return sddp_fail(d, "out of memory");
    for (int k = 0; k < 6; k++) /* (the sharded step gathers into pool[0]: room for every rank's padded slice) */
        if (!(b->pool[k] = calloc(svc->total_count + (size_t)svc->world_size, sizeof(float))))
            return sddp_fail(d, "out of memory");
#if defined(BLIND_VIEW_ADDS)
    if (!(view_saved = calloc(svc->total_count, sizeof(float))))
        return sddp_fail(d, "out of memory");
#endif
    return 0;
}

static void b_destroy(void *state)
{
    sddp *d = state;
    if (d && d->user) {
        blind *b = d->user;
        free(b->buf);
        for (int k = 0; k < 6; k++)
            free(b->pool[k]);
        free(b);
    }
    sddp_destroy(d);
}

static int b_forward_begin(void *state, int no_sync)
{
#if defined(BLIND_BUFFERS_EVERY_FORWARD)
    ((sddp *)state)->sync_buffers = 1; /* whatever the forward before did */
#endif
    return sddp_forward_begin(state, no_sync);
}

static int b_enter(void *state)
{
    ((sddp *)state)->no_sync++;
    return 0;
}

static int b_exit(void *state)
{
    sddp *d = state;
    d->no_sync--;
#if defined(BLIND_EXIT_ARMS_PENDING)
    if (d->fwd_pending)
        d->armed = 1;
#endif
    return 0;
}

static int b_grad_ready(void *state, int p)
{
    sddp_grad_ready(state, p);
#if defined(BLIND_LAST_BUCKET_SKIPPED)
    sddp *d = state;
    if (!rebuilt && d->armed && nready < 256)
        ready_order[nready++] = p;
#endif
    return 0;
}

static int b_backward_end(void *state)
{
    sddp *d = state;
    blind *b = state_of(d);
    b->since_sync++;
#if defined(BLIND_FORCED_SYNC_AT_4)
    if (b->since_sync == 4)
        d->armed = 1;
#endif
    int rc = sddp_backward_end(d);
    if (d->synced)
        b->since_sync = 0;
    b->unsynced = !d->synced;
    return rc;
}

static int b_zero_grad(void *state)
{
    sddp *d = state;
    sddp_zero_grad(d);
    state_of(d)->unsynced = 0;
#if defined(BLIND_BUFFER_KEPT_TO_ZERO)
    memset(state_of(d)->buf, 0, d->svc->total_count * sizeof(float));
#endif
    return 0;
}

static int b_step(void *state)
{
    sddp *d = state;
#if defined(BLIND_BUFFER_KEPT_TO_STEP)
    memset(state_of(d)->buf, 0, d->svc->total_count * sizeof(float));
#endif
    (void)d;
    return 0;
}

#if defined(BLIND_SYNC_AT_STEP)
/* Before the optimizer: a window that no backward synced is synced now, so the optimizer never sees local gradients. */
static int b_optimizer_step(void *state, int *owned)
{
    sddp *d = state;
    *owned = 0;
    if (!state_of(d)->unsynced)
        return 0;
    state_of(d)->unsynced = 0;
    return sddp_sync(d);
}
#endif

#if defined(BLIND_SHARDED_STEP)
/* Element i of the parameters in registration order. */
static float *param_at(const ddpsim_services *svc, size_t i)
{
    for (int p = 0; p < svc->nparams; p++) {
        if (i < svc->params[p].count)
            return &svc->params[p].data[i];
        i -= svc->params[p].count;
    }
    return NULL;
}

/* Each rank steps its slice, then the slices are allgathered: right only when every rank's gradients agree. */
static int b_optimizer_step(void *state, int *owned)
{
    sddp *d = state;
    const ddpsim_services *svc = d->svc;
    size_t shard = (svc->total_count + (size_t)d->n - 1) / (size_t)d->n, lo = (size_t)svc->rank * shard;
    float *mine = state_of(d)->buf, *all = state_of(d)->pool[0];
    if (shard * (size_t)d->n > svc->total_count + (size_t)d->n)
        return sddp_fail(d, "the gathered slices do not fit");
    float neg_lr = -svc->lr;
    for (size_t k = 0; k < shard; k++)
        mine[k] = lo + k < svc->total_count ? *param_at(svc, lo + k) + neg_lr * svc->all_grads[lo + k] : 0.0f;
    if (svc->allgather(svc->env, mine, all, shard * sizeof(float)))
        return -1;
    for (size_t i = 0; i < svc->total_count; i++)
        *param_at(svc, i) = all[i];
    *owned = 1;
    return 0;
}
#endif

#if defined(BLIND_FORCED_SYNC_AT_4)
#define NAME "blind-forced-sync-at-4"
#elif defined(BLIND_EXIT_ARMS_PENDING)
#define NAME "blind-exit-arms-pending"
#elif defined(BLIND_BUFFER_KEPT_TO_ZERO)
#define NAME "blind-buffer-kept-to-zero"
#elif defined(BLIND_BUFFER_KEPT_TO_STEP)
#define NAME "blind-buffer-kept-to-step"
#elif defined(BLIND_POOL_OF_6)
#define NAME "blind-pool-of-6"
#elif defined(BLIND_LAST_BUCKET_SKIPPED)
#define NAME "blind-last-bucket-skipped"
#elif defined(BLIND_VECTOR_TAIL)
#define NAME "blind-vector-tail"
#elif defined(BLIND_VIEW_ADDS)
#define NAME "blind-view-adds"
#elif defined(BLIND_SKIP_UNUSED)
#define NAME "blind-skip-unused"
#elif defined(BLIND_SYNC_AT_STEP)
#define NAME "blind-sync-at-step"
#elif defined(BLIND_SHARDED_STEP)
#define NAME "blind-sharded-step"
#elif defined(BLIND_BUFFERS_EVERY_FORWARD)
#define NAME "blind-buffers-every-forward"
#else
#error "build with one of the -DBLIND_... of this file's header"
#endif

static const ddpsim_impl_ops ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = NAME,
    .description = "a DDP bug the former default run missed (tests/plugin/blind.c)",
    .create = b_create,
    .destroy = b_destroy,
    .forward_begin = b_forward_begin,
    .no_sync_enter = b_enter,
    .no_sync_exit = b_exit,
    .grad_ready = b_grad_ready,
    .backward_end = b_backward_end,
    .zero_grad = b_zero_grad,
    .step = b_step,
#if defined(BLIND_SYNC_AT_STEP) || defined(BLIND_SHARDED_STEP)
    .optimizer_step = b_optimizer_step,
#endif
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &ops;
}
