/*
 * simple_ddp.h - the correct DDP that ddpsim's test plugins share (static
 * functions: each plugin includes it once). It follows PyTorch's semantics
 * without buckets: a forward outside no_sync arms the next backward's sync
 * (a forward inside no_sync leaves the arming as it is; PyTorch 1.13
 * distributed.py forward, prepare_for_backward); a syncing
 * backward scales every gradient by 1/N (multiplying by the rounded 1/N, or
 * with gradient_as_bucket_view dividing once a .grad is its bucket's view)
 * and sums the whole gradient buffer across ranks in one call; with
 * find_unused_parameters a parameter no rank used since the last sync keeps
 * its local gradient. Summed in rank order this gives the reference's bits.
 * Buffers (services of version 3) are broadcast from rank 0 at create and
 * before a forward when the forward before it ran outside no_sync
 * (broadcast_buffers: require_forward_param_sync). Join (version 4): inside
 * join every forward allgathers (running, syncs); a rank that ran out
 * answers (0, 0) from join_shadow and, when a peer syncs, sums zeros as
 * they sum their gradients; buffers come from the highest rank running; at
 * join_exit every rank takes the last joiner's parameters and buffers.
 *
 * A plugin changes one thing through the hooks: how the sum is taken (the
 * correct reorderings of reorder.c) or one deliberate bug (blind.c).
 */
#ifndef DDPSIM_TEST_SIMPLE_DDP_H
#define DDPSIM_TEST_SIMPLE_DDP_H

#include <ddpsim_impl.h>
#include <stdlib.h>
#include <string.h>

typedef struct sddp sddp;

typedef struct sddp_hooks {
    /* Sum buf over ranks in place (NULL: the services' allreduce_sum). */
    int (*sum)(sddp *d, float *buf, size_t count);
    /* Scale one gradient by 1/N before the sum (NULL: as PyTorch does). */
    void (*scale)(sddp *d, int param, float *g, size_t count);
    /* After the sync, before the locally kept gradients are put back (NULL: nothing). */
    int (*after_sync)(sddp *d);
} sddp_hooks;

struct sddp {
    const ddpsim_services *svc;
    sddp_hooks hooks;
    int n;
    int no_sync;                  /* nested no_sync contexts open */
    int armed;                    /* the next backward syncs */
    int fwd_pending;              /* a forward ran that no backward followed yet */
    int sync_buffers;             /* the next forward broadcasts the buffers */
    int synced;                   /* the last backward synced */
    unsigned syncs;               /* syncs so far */
    int join, divide_initial;     /* join_enter ran (it stays on after the block, as in PyTorch 1.13) */
    int div;                      /* what the next sync divides by */
    int shadowed;                 /* forwards shadowed in this join block (0: a last joiner) */
    unsigned char *used_now;      /* got a gradient in this backward */
    float *window_used;           /* ... in any backward since the last sync (0/1) */
    unsigned char *alias;         /* gradient_as_bucket_view: .grad is its bucket's view by now */
    float *saved;                 /* local gradients of parameters no rank used */
    void *user;                   /* the plugin's own state */
};

static inline int sddp_fail(sddp *d, const char *msg)
{
    return d->svc->set_error(d->svc->env, msg);
}

/* Rank src's buffers (BatchNorm's running statistics) to every rank; services of version 3 have them. */
static inline int sddp_broadcast_buffers(sddp *d, int src)
{
    const ddpsim_services *svc = d->svc;
    if (svc->version < 3 || !svc->nbuffers)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), src);
}

/* Under join: every rank's (running, syncs); how many run, whether any syncs, the highest running. */
static inline int sddp_announce(sddp *d, int running, int syncs, int *nrunning, int *any, int *highest)
{
    const ddpsim_services *svc = d->svc;
    int mine[2] = {running, syncs};
    *nrunning = *any = *highest = 0;
    int *every = malloc(sizeof mine * (size_t)svc->world_size);
    if (!every)
        return sddp_fail(d, "out of memory");
    int rc = svc->allgather(svc->env, mine, every, sizeof mine);
    for (int r = 0; rc == 0 && r < svc->world_size; r++) {
        *nrunning += every[2 * r];
        *any |= every[2 * r + 1];
        *highest = every[2 * r] ? r : *highest;
    }
    free(every);
    return rc;
}

static inline int sddp_create(const ddpsim_services *svc, const sddp_hooks *hooks, sddp **out)
{
    sddp *d = calloc(1, sizeof *d);
    *out = d;
    if (!d)
        return svc->set_error(svc->env, "out of memory");
    d->svc = svc;
    d->hooks = *hooks;
    d->n = d->div = svc->world_size;
    d->used_now = calloc((size_t)svc->nparams, 1);
    d->window_used = calloc((size_t)svc->nparams, sizeof(float));
    d->alias = calloc((size_t)svc->nparams, 1);
    d->saved = calloc(svc->total_count, sizeof(float));
    if (!d->used_now || !d->window_used || !d->alias || !d->saved)
        return sddp_fail(d, "out of memory");
    for (int p = 0; p < svc->nparams; p++) /* DDP's constructor */
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    d->sync_buffers = 1;
    return sddp_broadcast_buffers(d, 0);
}

static inline void sddp_destroy(sddp *d)
{
    if (!d)
        return;
    free(d->used_now);
    free(d->window_used);
    free(d->alias);
    free(d->saved);
    free(d);
}

static inline int sddp_forward_begin(sddp *d, int no_sync_active)
{
    int nrunning = d->n, any, src = 0;
    if (d->join && sddp_announce(d, 1, !no_sync_active, &nrunning, &any, &src))
        return -1;
    d->div = d->join && !d->divide_initial ? nrunning : d->n;
    if (d->sync_buffers && d->svc->version >= 3 && d->svc->broadcast_buffers && sddp_broadcast_buffers(d, src))
        return -1;
    d->sync_buffers = !no_sync_active;
    d->armed |= !no_sync_active;
    d->fwd_pending = 1;
    memset(d->used_now, 0, (size_t)d->svc->nparams);
    return 0;
}

static inline void sddp_grad_ready(sddp *d, int p)
{
    d->used_now[p] = 1;
    d->window_used[p] = 1;
}

static inline void sddp_default_scale(sddp *d, int p, float *g, size_t count)
{
    if (d->svc->bucket_view && d->alias[p]) {
        for (size_t i = 0; i < count; i++)
            g[i] /= (float)d->div;
    } else {
        float inv = (float)(1.0 / d->div);
        for (size_t i = 0; i < count; i++)
            g[i] *= inv;
    }
}

static inline int sddp_sync(sddp *d)
{
    const ddpsim_services *svc = d->svc;
    int np = svc->nparams;
    if (svc->find_unused) {
        if (svc->allreduce_sum(svc->env, d->window_used, (size_t)np))
            return -1;
    } else {
        for (int p = 0; p < np; p++)
            if (!d->used_now[p])
                return sddp_fail(d, "a parameter got no gradient in a syncing backward (find_unused is off)");
    }
    for (int p = 0; p < np; p++) {
        const ddpsim_param_view *v = &svc->params[p];
        if (svc->find_unused && d->window_used[p] == 0) { /* no rank used it: reduce zeros, keep the local one */
            memcpy(d->saved + (v->grad - svc->all_grads), v->grad, v->count * sizeof(float));
            memset(v->grad, 0, v->count * sizeof(float));
            continue;
        }
        if (d->hooks.scale)
            d->hooks.scale(d, p, v->grad, v->count);
        else
            sddp_default_scale(d, p, v->grad, v->count);
    }
    int rc = d->hooks.sum ? d->hooks.sum(d, svc->all_grads, svc->total_count)
                          : svc->allreduce_sum(svc->env, svc->all_grads, svc->total_count);
    if (rc)
        return rc;
    d->syncs++;
    if (d->hooks.after_sync && d->hooks.after_sync(d))
        return -1;
    for (int p = 0; p < np; p++) {
        const ddpsim_param_view *v = &svc->params[p];
        int reduced = !svc->find_unused || d->window_used[p] != 0;
        if (!reduced)
            memcpy(v->grad, d->saved + (v->grad - svc->all_grads), v->count * sizeof(float));
        d->alias[p] |= reduced && svc->bucket_view;
    }
    memset(d->window_used, 0, (size_t)np * sizeof(float));
    return 0;
}

/* A zero that makes .grad None ends gradient_as_bucket_view's alias: the next sync multiplies again. */
static inline void sddp_zero_grad(sddp *d)
{
    if (d->svc->version >= 2 && d->svc->zero_to_none)
        memset(d->alias, 0, (size_t)d->svc->nparams);
}

static inline int sddp_backward_end(sddp *d)
{
    d->fwd_pending = 0;
    d->synced = d->armed;
    d->armed = 0; /* reducer.cpp finalize_backward: disarmed until the next forward outside no_sync */
    return d->synced ? sddp_sync(d) : 0;
}

static inline int sddp_join_enter(sddp *d, int divide_by_initial_world_size)
{
    d->join = 1;
    d->divide_initial = divide_by_initial_world_size;
    d->shadowed = 0;
    return 0;
}

/* A peer's forward after this rank ran out: the buffers, then zeros into their sync, summed as they sum. */
static inline int sddp_join_shadow(sddp *d)
{
    const ddpsim_services *svc = d->svc;
    int nrunning, any, src;
    d->shadowed++;
    if (sddp_announce(d, 0, 0, &nrunning, &any, &src))
        return -1;
    if (d->sync_buffers && svc->broadcast_buffers && sddp_broadcast_buffers(d, src))
        return -1;
    d->sync_buffers = any;
    if (!any)
        return 0;
    float *zeros = calloc(svc->total_count, sizeof *zeros);
    if (!zeros)
        return sddp_fail(d, "out of memory");
    int rc = svc->find_unused ? svc->allreduce_sum(svc->env, zeros, (size_t)svc->nparams) : 0;
    if (rc == 0)
        rc = d->hooks.sum ? d->hooks.sum(d, zeros, svc->total_count)
                          : svc->allreduce_sum(svc->env, zeros, svc->total_count);
    free(zeros);
    d->syncs += rc == 0;
    return rc;
}

/* The end of join: the parameters and buffers of the highest rank that shadowed nothing. */
static inline int sddp_join_exit(sddp *d)
{
    const ddpsim_services *svc = d->svc;
    int nlast, any, src;
    if (sddp_announce(d, d->shadowed == 0, 0, &nlast, &any, &src))
        return -1;
    for (int p = 0; p < svc->nparams; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), src))
            return -1;
    d->shadowed = 0;
    return sddp_broadcast_buffers(d, src);
}

#endif
