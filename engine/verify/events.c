/*
 * events.c - delivering gradient-ready events (events.h).
 */
#include "events.h"

#include <string.h>

#include "rng.h"

void ready_begin(ready_queue *q, const chaos_rank *chaos, uint64_t nbwd, const verify_replay *replay, int rank,
                 size_t *next_recorded)
{
    memset(q, 0, sizeof *q);
    q->chaos = chaos && chaos->on ? chaos : NULL;
    q->nbwd = nbwd;
    q->replay = replay;
    q->rank = rank;
    q->next_recorded = next_recorded;
}

/* Move pending[i] to out[n]. */
static int take(ready_queue *q, int i, int *out, int n)
{
    out[n] = q->pending[i];
    q->pending[i] = q->pending[--q->npending];
    return n + 1;
}

/*
 * Replay: deliver while the next recorded event has been produced. Past the
 * last recorded one of a run that did not finish, every event as it comes.
 */
static int replay_release(ready_queue *q, int *out)
{
    const verify_replay *rp = q->replay;
    int n = 0;
    for (;;) {
        if (*q->next_recorded >= rp->nready[q->rank]) {
            while (rp->stopped && q->npending)
                n = take(q, 0, out, n);
            return n;
        }
        int want = rp->ready[q->rank][*q->next_recorded], found = -1;
        for (int i = 0; i < q->npending; i++)
            if (q->pending[i] == want)
                found = i;
        if (found < 0)
            return n;
        n = take(q, found, out, n);
        (*q->next_recorded)++;
    }
}

/* Chaos: a seeded number of the held-back events, each picked at random. */
static int chaos_release(ready_queue *q, int *out, int all)
{
    uint64_t key = rng_key(rng_key(rng_key(q->chaos->key, 'r'), q->nbwd), q->produced);
    int k = all ? q->npending : (int)rng_below(key, 0, (uint32_t)q->npending + 1);
    int n = 0;
    for (int j = 0; j < k; j++)
        n = take(q, (int)rng_below(key, (uint64_t)j + 1, (uint32_t)q->npending), out, n);
    return n;
}

int ready_produce(ready_queue *q, int p, int *out)
{
    q->pending[q->npending++] = p;
    q->produced++;
    if (q->replay)
        return replay_release(q, out);
    if (q->chaos)
        return chaos_release(q, out, 0);
    return take(q, 0, out, 0);
}

int ready_finish(ready_queue *q, int *out)
{
    if (q->replay) {
        int n = replay_release(q, out);
        if (q->npending) {
            ddp_error(DDP_ERR_INVALID, "replay: the trace's ready events of rank %d do not fit this backward (%d "
                                       "produced events were never recorded next)",
                      q->rank, q->npending);
            return -1;
        }
        return n;
    }
    if (q->chaos)
        return chaos_release(q, out, 1);
    int n = 0;
    while (q->npending)
        n = take(q, 0, out, n);
    return n;
}
