/*
 * comm_worker.c - a rank's communication thread (comm_worker.h). After a
 * failure the thread still takes the items queued, without working them,
 * so that a waiting main thread is released and reports the first reason.
 */
#include "comm_worker.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"

/* --trace: an item queued ("launch") or worked ("reduced", after dur_us; < 0: none said) for the HTML timeline. */
static void trace_item(const comm_worker *w, const char *ev, int item, double dur_us)
{
    char extra[128];
    int n = snprintf(extra, sizeof extra, "\"what\": \"%s\", \"item\": %d", w->what, item);
    if (dur_us >= 0 && n > 0 && (size_t)n < sizeof extra)
        snprintf(extra + n, sizeof extra - (size_t)n, ", \"dur_us\": %.1f", dur_us);
    w->trace_fn(w->trace, ev, extra);
}

static void *worker_main(void *arg)
{
    comm_worker *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->qhead == w->qtail && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->qhead == w->qtail && w->stop)
            break;
        int item = w->queue[w->qhead++ % MODEL_MAX_PARAMS];
        int skip = w->failed;
        pthread_mutex_unlock(&w->mu);
        char err[sizeof w->error] = "";
        uint64_t t0 = w->trace_fn ? clock_now_ns() : 0;
        int rc = skip ? 0 : w->work(w->ctx, item, err, sizeof err);
        if (w->trace_fn && !skip)
            trace_item(w, "reduced", item, (clock_now_ns() - t0) / 1e3);
        pthread_mutex_lock(&w->mu);
        if (rc && !w->failed) {
            w->failed = 1;
            memcpy(w->error, err, sizeof w->error);
        }
        w->done++;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int comm_worker_start(comm_worker *w, comm_work_fn work, void *ctx, const char *what, const impl_env *env)
{
    memset(w, 0, sizeof *w);
    w->work = work;
    w->ctx = ctx;
    w->what = what;
    w->trace_fn = env->trace_fn;
    w->trace = env->trace;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w) != 0)
        return -1;
    w->started = 1;
    return 0;
}

void comm_worker_push(comm_worker *w, int item)
{
    if (w->trace_fn)
        trace_item(w, "launch", item, -1);
    pthread_mutex_lock(&w->mu);
    w->queue[w->qtail++ % MODEL_MAX_PARAMS] = item;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int comm_worker_wait(comm_worker *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->done != w->qtail)
        pthread_cond_wait(&w->cv, &w->mu);
    int failed = w->failed;
    pthread_mutex_unlock(&w->mu);
    return failed ? -1 : 0;
}

void comm_worker_stop(comm_worker *w)
{
    if (!w->work)
        return; /* never started (zeroed memory) */
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->stop = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
        w->started = 0;
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    w->work = NULL;
}
