/*
 * example_buckets.c - an example plugin for the rest of interface version
 * 2: a DDP with buckets and a communication thread, as PyTorch's reducer.
 *
 *  - bucket_layout: the buckets are PyTorch's, the constructor's at first
 *    and, after the first syncing backward, rebuilt in the order the
 *    gradients became ready there (rank 0's order, broadcast);
 *  - a communication thread allreduces each bucket as soon as its last
 *    gradient is in, while backward still computes the rest, in bucket
 *    order; it calls chaos_point before each one, so under --chaos its
 *    timing is shaken with the run's seed like ddpsim's own;
 *  - when a collective fails it says why with last_error's words;
 *  - with gradient_as_bucket_view and zero_to_none (--zero-grad none), a
 *    zero ends every .grad's being its bucket's view, so the next sync
 *    multiplies by 1/N again instead of dividing (PyTorch's reducer).
 *
 *     cc -shared -fPIC -pthread $(pkg-config --cflags ddpsim) -o libexample_buckets.so example_buckets.c
 *     ddpsim --ranks 4 --impl ./libexample_buckets.so --bucket-cap 4K
 *
 * It does not model find_unused_parameters.
 *
 * Built with -DBUCKETS_LAUNCH_AS_FILLED (libbuckets_launch_as_filled.so, a
 * test) it launches each bucket as soon as it is full, whatever its index:
 * the race PyTorch's reducer avoids by launching in bucket order
 * (reducer.cpp mark_bucket_ready). With every rank's gradients ready in
 * the same order it is right; where the order differs between ranks (hooks
 * that finish late, chaos's held-back events) two ranks reduce different
 * buckets in the same collective.
 *
 * Three more are races of the kind --sched finds (tests/sched.sh), each
 * right whenever its window does not open, which in plain runs is nearly
 * always:
 *  - -DBUCKETS_LAUNCH_BEFORE_COPY: grad_ready hands a bucket its last
 *    gradient fills to the communication thread before copying that
 *    gradient in, so a thread that runs at once reduces the bucket without
 *    it (the reduction waits for the wrong event: DeepSpeed #8061, where
 *    average_tensor() waits only on the current stream's copies);
 *  - -DBUCKETS_DONE_BEFORE_UNPACK: the communication thread reduces a
 *    staging copy, counts the bucket done and only then copies the result
 *    back, so a backward_end that runs at once reads the bucket unreduced
 *    (a slot released before its result is unpacked);
 *  - -DBUCKETS_CLOCK_TICK: forward_begin reduces a statistic whenever 5 ms
 *    have passed on the rank's own clock since the last time, so the ranks
 *    call different collectives whenever their clocks cross the tick at
 *    different forwards (a decision by one rank's wall time: under --sched
 *    the clock is virtual, and a seed that fails fails again);
 *  - -DBUCKETS_ASYNC_RESET: forward_begin asks the communication thread
 *    to start its count of launches over and does not wait for it, so a
 *    thread that gets to it after backward's first launches loses them and
 *    backward_end waits for ever (a background reset never waited for);
 *  - -DBUCKETS_FUSE_READY: the communication thread reduces every bucket
 *    launched by the time it wakes in one fused allreduce, as Horovod's
 *    tensor fusion, but with no coordinator agreeing on the fusion, so
 *    ranks whose threads woke at different moments call allreduces of
 *    different sizes;
 *  - -DBUCKETS_LOST_WAKEUP: the communication thread looks for work
 *    before taking the lock and waits after it, so a launch in between
 *    wakes nobody and both threads wait for ever (a deadlock, which --sched
 *    names instead of hanging).
 *
 * Built with -DBUCKETS_POLL it is right in another way, for --sched's
 * tests of semaphores, timed waits and sleeps: its communication thread
 * polls a semaphore the launches post, with a 2 ms timeout on the
 * wall clock, and sleeps 50 us before each reduction.
 *
 * Built with -DBUCKETS_UNLOCKED_PENDING (libbuckets_unlocked_pending.so,
 * with -fsanitize=thread for the --race test) it also counts the buckets in
 * flight in a plain int that the main thread increments and the
 * communication thread decrements, neither under the lock, and backward_end
 * waits for it to reach 0: a lost update hangs the rank or lets it read a
 * bucket not yet reduced, and mostly nothing happens at all.
 */
#include <ddpsim_impl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct bucket {
    int first, n;   /* members[first .. first + n) */
    size_t count;   /* floats */
    float *buf;
    int missing;    /* gradients not yet in */
} bucket;

typedef struct xb {
    const ddpsim_services *svc;
    int np, nb;
    int *members, *bucket_of;
    size_t *slot_of;
    bucket *b;
    unsigned char *alias;  /* gradient_as_bucket_view: .grad is its bucket's view since a sync */
    int fwd_sync, rebuilt, *order, norder;
    int sync_buffers; /* the next forward broadcasts the buffers (broadcast_buffers, as example_impl.c) */
    /* the communication thread */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int launched, done, stop, failed;
    int *queue;    /* the buckets in the order they were launched: queue[done] is the next to reduce */
#ifdef BUCKETS_CLOCK_TICK
    long long last_tick_ns; /* when this rank last reduced its statistics */
#endif
#ifdef BUCKETS_ASYNC_RESET
    int reset; /* forward_begin asked the communication thread to start the count of launches over */
#endif
#ifdef BUCKETS_POLL
    sem_t work; /* posted at each launch and at the stop; the communication thread polls it */
#endif
#if defined(BUCKETS_DONE_BEFORE_UNPACK) || defined(BUCKETS_FUSE_READY)
    float *staging; /* the reduction's copy of a bucket (as large as the largest) */
#endif
#ifdef BUCKETS_UNLOCKED_PENDING
    volatile int pending; /* the race: buckets in flight, updated by both threads without the lock */
#endif
    char why[600];
} xb;

static int xb_fail(xb *x, const char *msg)
{
    return x->svc->set_error(x->svc->env, msg);
}

/* Buckets from the services' layout (order NULL: the constructor's). */
static int lay_out(xb *x, const int *order, int n)
{
    const ddpsim_services *svc = x->svc;
    int sizes[256];
    if (svc->nparams > 256)
        return xb_fail(x, "example_buckets handles at most 256 parameters");
    x->nb = svc->bucket_layout(svc->env, order, n, x->members, sizes);
    if (x->nb < 0)
        return xb_fail(x, "a bucket order ddpsim does not accept");
    for (int k = 0, first = 0; k < x->nb; first += sizes[k++]) {
        bucket *b = &x->b[k];
        free(b->buf);
        b->first = first;
        b->n = sizes[k];
        b->count = 0;
        for (int j = first; j < first + b->n; j++) {
            x->bucket_of[x->members[j]] = k;
            x->slot_of[x->members[j]] = b->count;
            b->count += svc->params[x->members[j]].count;
        }
        b->buf = calloc(b->count, sizeof(float)); /* zeros: what a race reduces before a copy is defined */
        if (!b->buf)
            return xb_fail(x, "out of memory");
#if defined(BUCKETS_DONE_BEFORE_UNPACK) || defined(BUCKETS_FUSE_READY)
        free(x->staging);
        if (!(x->staging = malloc(svc->total_count * sizeof(float))))
            return xb_fail(x, "out of memory");
#endif
    }
    return 0;
}

/* Reduce bucket after bucket, each as soon as the backward has filled it. */
static void *comm_main(void *arg)
{
    xb *x = arg;
    const ddpsim_services *svc = x->svc;
    pthread_mutex_lock(&x->mu);
    for (;;) {
#ifdef BUCKETS_LOST_WAKEUP
        int idle = !x->stop && x->done == x->launched; /* the race: looked at without the lock held throughout */
        pthread_mutex_unlock(&x->mu);
        pthread_mutex_lock(&x->mu);
        if (idle)
            pthread_cond_wait(&x->cv, &x->mu);
        if (!x->stop && x->done == x->launched)
            continue;
#else
        while (!x->stop && x->done == x->launched) {
#ifdef BUCKETS_POLL
            pthread_mutex_unlock(&x->mu);
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 2000000;
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            sem_timedwait(&x->work, &until); /* a post or 2 ms: either way, look again */
            pthread_mutex_lock(&x->mu);
#else
            pthread_cond_wait(&x->cv, &x->mu);
#endif
#ifdef BUCKETS_ASYNC_RESET
            if (x->reset) { /* whenever this thread gets to it: launches made since are lost */
                x->launched = x->done = 0;
                x->reset = 0;
            }
#endif
        }
#endif
        if (x->stop)
            break;
#ifdef BUCKETS_FUSE_READY
        /* the race: every bucket launched by now in one allreduce, Horovod's fusion without its coordinator: how
         * many that is depends on when this thread woke, which differs between ranks */
        int first = x->done, last = x->launched;
        pthread_mutex_unlock(&x->mu);
        size_t fused = 0;
        for (int q = first; q < last; q++) {
            memcpy(x->staging + fused, x->b[x->queue[q]].buf, x->b[x->queue[q]].count * sizeof(float));
            fused += x->b[x->queue[q]].count;
        }
        int frc = svc->allreduce_sum(svc->env, x->staging, fused);
        for (int q = first, at = 0; q < last; at += (int)x->b[x->queue[q]].count, q++)
            memcpy(x->b[x->queue[q]].buf, x->staging + at, x->b[x->queue[q]].count * sizeof(float));
        pthread_mutex_lock(&x->mu);
        if (frc && !x->failed) {
            x->failed = 1;
            snprintf(x->why, sizeof x->why, "example_buckets: the fused allreduce of buckets %d-%d failed: %s",
                     first, last - 1, svc->last_error(svc->env));
        }
        x->done = last;
        pthread_cond_broadcast(&x->cv);
        continue;
#endif
        int k = x->queue[x->done];
        bucket *b = &x->b[k];
        pthread_mutex_unlock(&x->mu);
#ifdef BUCKETS_POLL
        usleep(50);
#endif
        svc->chaos_point(svc->env, (uint32_t)x->done);
#ifdef BUCKETS_DONE_BEFORE_UNPACK
        memcpy(x->staging, b->buf, b->count * sizeof(float));
        int rc = svc->allreduce_sum(svc->env, x->staging, b->count);
        pthread_mutex_lock(&x->mu);
        x->done++; /* the race: done before the result is back in the bucket */
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        memcpy(b->buf, x->staging, b->count * sizeof(float));
        pthread_mutex_lock(&x->mu);
        if (rc && !x->failed) {
            x->failed = 1;
            snprintf(x->why, sizeof x->why, "example_buckets: the allreduce of bucket %d failed: %s", k,
                     svc->last_error(svc->env));
        }
        continue;
#else
        int rc = svc->allreduce_sum(svc->env, b->buf, b->count);
#endif
#ifdef BUCKETS_UNLOCKED_PENDING
        x->pending--;
#endif
        pthread_mutex_lock(&x->mu);
        if (rc && !x->failed) {
            x->failed = 1;
            snprintf(x->why, sizeof x->why, "example_buckets: the allreduce of bucket %d failed: %s", k,
                     svc->last_error(svc->env));
        }
        x->done++;
        pthread_cond_broadcast(&x->cv);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

/* Rank 0's buffers to every rank; services of version 3 have them. */
static int xb_broadcast_buffers(const ddpsim_services *svc)
{
    if (svc->version < 3 || !svc->nbuffers)
        return 0;
    return svc->broadcast(svc->env, svc->all_buffers, svc->buffers_count * sizeof(float), 0);
}

static int xb_create(const ddpsim_services *svc, void **state)
{
    if (svc->version < 2)
        return svc->set_error(svc->env, "example_buckets needs services of interface version 2");
    if (svc->find_unused)
        return svc->set_error(svc->env, "example_buckets does not model find_unused_parameters");
    xb *x = calloc(1, sizeof *x);
    *state = x;
    if (!x)
        return svc->set_error(svc->env, "out of memory");
    x->svc = svc;
    x->np = svc->nparams;
    x->members = calloc((size_t)x->np, sizeof *x->members);
    x->bucket_of = calloc((size_t)x->np, sizeof *x->bucket_of);
    x->slot_of = calloc((size_t)x->np, sizeof *x->slot_of);
    x->b = calloc((size_t)x->np, sizeof *x->b);
    x->alias = calloc((size_t)x->np, 1);
    x->order = calloc((size_t)x->np, sizeof *x->order);
    x->queue = calloc((size_t)x->np, sizeof *x->queue);
    if (!x->members || !x->bucket_of || !x->slot_of || !x->b || !x->alias || !x->order || !x->queue)
        return xb_fail(x, "out of memory");
    for (int p = 0; p < x->np; p++)
        if (svc->broadcast(svc->env, svc->params[p].data, svc->params[p].count * sizeof(float), 0))
            return -1;
    x->sync_buffers = 1;
    if (xb_broadcast_buffers(svc))
        return -1;
    if (lay_out(x, NULL, 0))
        return -1;
    pthread_mutex_init(&x->mu, NULL);
    pthread_cond_init(&x->cv, NULL);
#ifdef BUCKETS_POLL
    sem_init(&x->work, 0, 0);
#endif
    if (pthread_create(&x->thread, NULL, comm_main, x) != 0)
        return xb_fail(x, "cannot start the communication thread");
    return 0;
}

static void xb_destroy(void *state)
{
    xb *x = state;
    if (!x)
        return;
    if (x->thread) {
        pthread_mutex_lock(&x->mu);
        x->stop = 1;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
#ifdef BUCKETS_POLL
        sem_post(&x->work);
#endif
        pthread_join(x->thread, NULL);
    }
    for (int k = 0; k < x->nb; k++)
        free(x->b[k].buf);
    free(x->members), free(x->bucket_of), free(x->slot_of), free(x->b), free(x->alias), free(x->order);
    free(x->queue);
#if defined(BUCKETS_DONE_BEFORE_UNPACK) || defined(BUCKETS_FUSE_READY)
    free(x->staging);
#endif
    free(x);
}

static int xb_forward_begin(void *state, int no_sync_active)
{
    xb *x = state;
#ifdef BUCKETS_CLOCK_TICK
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long long ns = now.tv_sec * 1000000000ll + now.tv_nsec;
    if (!x->last_tick_ns) {
        x->last_tick_ns = ns;
    } else if (ns - x->last_tick_ns >= 5000000) { /* the race: a tick of this rank's clock, not the ranks' */
        float stat = 1;
        x->last_tick_ns = ns;
        if (x->svc->allreduce_sum(x->svc->env, &stat, 1))
            return xb_fail(x, x->svc->last_error(x->svc->env));
    }
#endif
    if (x->sync_buffers && x->svc->broadcast_buffers && xb_broadcast_buffers(x->svc))
        return -1;
    x->sync_buffers = !no_sync_active;
    x->fwd_sync |= !no_sync_active; /* armed by a forward outside no_sync, until a backward syncs */
    pthread_mutex_lock(&x->mu);
#ifdef BUCKETS_ASYNC_RESET
    x->reset = 1; /* the race: asked of the communication thread, never waited for */
    pthread_cond_broadcast(&x->cv);
#else
    x->launched = x->done = 0;
#endif
    pthread_mutex_unlock(&x->mu);
    for (int k = 0; k < x->nb; k++)
        x->b[k].missing = x->b[k].n;
    x->norder = 0;
    return 0;
}

static int xb_nothing(void *state)
{
    (void)state;
    return 0;
}

/* Copy the gradient into its bucket scaled by 1/N; hand over every bucket, in order, that is now full. */
static int xb_grad_ready(void *state, int p)
{
    xb *x = state;
    const ddpsim_services *svc = x->svc;
    if (!x->fwd_sync)
        return 0;
    x->order[x->norder++] = p;
    bucket *b = &x->b[x->bucket_of[p]];
    const ddpsim_param_view *v = &svc->params[p];
    float *dst = b->buf + x->slot_of[p], inv = (float)(1.0 / svc->world_size);
#ifndef BUCKETS_LAUNCH_BEFORE_COPY
    for (size_t i = 0; i < v->count; i++)
        dst[i] = svc->bucket_view && x->alias[p] ? v->grad[i] / (float)svc->world_size : v->grad[i] * inv;
#endif
    b->missing--;
#ifdef BUCKETS_UNLOCKED_PENDING
    x->pending += b->missing == 0; /* counted as full, before its launch below */
#endif
    pthread_mutex_lock(&x->mu);
#ifdef BUCKETS_LAUNCH_AS_FILLED
    if (b->missing == 0) /* the race: a bucket full out of turn goes first */
        x->queue[x->launched++] = x->bucket_of[p];
#else
    while (x->launched < x->nb && x->b[x->launched].missing == 0) { /* in bucket order, as PyTorch's reducer */
        x->queue[x->launched] = x->launched;
        x->launched++;
    }
#endif
    pthread_cond_broadcast(&x->cv);
    pthread_mutex_unlock(&x->mu);
#ifdef BUCKETS_POLL
    sem_post(&x->work);
#endif
#ifdef BUCKETS_LAUNCH_BEFORE_COPY
    for (size_t i = 0; i < v->count; i++) /* the race: after the bucket went to the communication thread */
        dst[i] = svc->bucket_view && x->alias[p] ? v->grad[i] / (float)svc->world_size : v->grad[i] * inv;
#endif
    return 0;
}

static int xb_backward_end(void *state)
{
    xb *x = state;
    const ddpsim_services *svc = x->svc;
    if (!x->fwd_sync)
        return 0;
    x->fwd_sync = 0;
    if (x->norder != x->np)
        return xb_fail(x, "a parameter got no gradient in a syncing backward (find_unused is off)");
#ifdef BUCKETS_UNLOCKED_PENDING
    while (x->pending > 0)
        sched_yield();
#endif
    pthread_mutex_lock(&x->mu);
    while (x->done < x->nb)
        pthread_cond_wait(&x->cv, &x->mu);
    int failed = x->failed;
    pthread_mutex_unlock(&x->mu);
    if (failed)
        return xb_fail(x, x->why);
    for (int p = 0; p < x->np; p++) {
        memcpy(svc->params[p].grad, x->b[x->bucket_of[p]].buf + x->slot_of[p], svc->params[p].count * sizeof(float));
        x->alias[p] = (unsigned char)svc->bucket_view;
    }
    if (x->rebuilt)
        return 0;
    /* Rebuild once, in rank 0's ready order of this first sync. */
    x->rebuilt = 1;
    if (svc->broadcast(svc->env, x->order, (size_t)x->np * sizeof *x->order, 0))
        return -1;
    return lay_out(x, x->order, x->np);
}

static int xb_zero_grad(void *state)
{
    xb *x = state;
    if (x->svc->zero_to_none)
        memset(x->alias, 0, (size_t)x->np);
    return 0;
}

static const ddpsim_impl_ops buckets_ops = {
    .api_version = DDPSIM_IMPL_API_VERSION,
    .name = "example-buckets",
    .description = "the buckets example: PyTorch's buckets and rebuild, a communication thread, chaos points",
    .create = xb_create,
    .destroy = xb_destroy,
    .forward_begin = xb_forward_begin,
    .no_sync_enter = xb_nothing,
    .no_sync_exit = xb_nothing,
    .grad_ready = xb_grad_ready,
    .backward_end = xb_backward_end,
    .zero_grad = xb_zero_grad,
    .step = xb_nothing,
};

const ddpsim_impl_ops *ddpsim_impl_get(void)
{
    return &buckets_ops;
}
