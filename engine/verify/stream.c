/*
 * stream.c - the records' ring between the ranks and the parent (stream.h).
 */
#include "stream.h"

#include <stdlib.h>
#include <string.h>

#include "rank.h"
#include "sync.h"

size_t stream_ring_checks(size_t nchecks, int nranks)
{
    size_t ring = STREAM_RING_RECORDS / (size_t)nranks;
    if (ring < 16)
        ring = 16;
    return nchecks < ring ? nchecks : ring;
}

/* The header, then the ring, then the rank areas, each on its own cache lines. */
static size_t ring_offset(void)
{
    return (sizeof(verify_stream) + 63) / 64 * 64;
}

static size_t areas_offset(size_t ring, int nranks)
{
    return ring_offset() + (ring * (size_t)nranks * sizeof(verify_record) + 63) / 64 * 64;
}

size_t stream_user_bytes(size_t ring, int nranks)
{
    return areas_offset(ring, nranks) + (size_t)nranks * sizeof(verify_rank_area);
}

verify_record *stream_ring(void *user)
{
    return (verify_record *)((unsigned char *)user + ring_offset());
}

verify_rank_area *stream_rank_areas(void *user, size_t ring, int nranks)
{
    return (verify_rank_area *)((unsigned char *)user + areas_offset(ring, nranks));
}

void stream_init(void *user, size_t ring)
{
    verify_stream *st = user;
    atomic_store(&st->consumed, 0);
    atomic_store(&st->consumed_word, 0);
    atomic_store(&st->waiting, 0);
    st->ring = ring;
    for (int r = 0; r < WORLD_MAX_RANKS; r++)
        atomic_store(&st->produced[r], 0);
}

verify_record *stream_next(world_rank *wr, void *user, size_t k)
{
    static verify_record scratch;
    verify_stream *st = user;
    int n = world_size(wr), me = world_rank_id(wr);
    if (k > 0) /* the record before, now written, then the count that says so (world_publish) */
        world_publish(wr, &stream_ring(user)[((k - 1) % st->ring) * (size_t)n + (size_t)me], sizeof(verify_record));
    atomic_store_explicit(&st->produced[me], k, memory_order_release);
    world_publish(wr, &st->produced[me], sizeof st->produced[me]);
    while (k - atomic_load_explicit(&st->consumed, memory_order_acquire) >= st->ring) {
        uint32_t word = atomic_load_explicit(&st->consumed_word, memory_order_acquire);
        if (k - atomic_load_explicit(&st->consumed, memory_order_acquire) < st->ring)
            break; /* the parent took some between the two loads */
        atomic_fetch_add_explicit(&st->waiting, 1, memory_order_relaxed);
        ddp_status s = world_wait_change(wr, &st->consumed_word, word);
        atomic_fetch_sub_explicit(&st->waiting, 1, memory_order_relaxed);
        if (s != DDP_OK) {
            memset(&scratch, 0, sizeof scratch);
            return &scratch; /* stopped: this rank is about to be told so by its next collective */
        }
    }
    verify_record *rec = &stream_ring(user)[(k % st->ring) * (size_t)n + (size_t)me];
    memset(rec, 0, sizeof *rec);
    return rec;
}

void stream_finish(world_rank *wr, void *user, size_t done)
{
    verify_stream *st = user;
    int n = world_size(wr), me = world_rank_id(wr);
    if (done > 0)
        world_publish(wr, &stream_ring(user)[((done - 1) % st->ring) * (size_t)n + (size_t)me], sizeof(verify_record));
    atomic_store_explicit(&st->produced[me], done, memory_order_release);
    world_publish(wr, &st->produced[me], sizeof st->produced[me]);
}

int stream_take(void *user, int nranks, size_t nchecks, int final, size_t *next,
                void (*take)(void *arg, size_t k, const verify_record *recs), void *arg)
{
    verify_stream *st = user;
    const verify_record *ring = stream_ring(user);
    size_t ready = nchecks;
    if (!final)
        for (int r = 0; r < nranks; r++) {
            size_t p = (size_t)atomic_load_explicit(&st->produced[r], memory_order_acquire);
            ready = p < ready ? p : ready;
        }
    int took = *next < ready || atomic_load_explicit(&st->waiting, memory_order_relaxed) > 0;
    verify_record recs[WORLD_MAX_RANKS];
    for (; *next < ready; ++*next) {
        size_t k = *next;
        const verify_record *slot = &ring[(k % st->ring) * (size_t)nranks];
        if (final) {
            for (int r = 0; r < nranks; r++) {
                if (k < (size_t)atomic_load_explicit(&st->produced[r], memory_order_acquire))
                    recs[r] = slot[r];
                else
                    memset(&recs[r], 0, sizeof recs[r]);
            }
            take(arg, k, recs);
        } else {
            take(arg, k, slot);
        }
        atomic_store_explicit(&st->consumed, k + 1, memory_order_release);
    }
    if (took) { /* one wake-up for the whole batch: a system call per check would cost more than the check */
        atomic_fetch_add_explicit(&st->consumed_word, 1, memory_order_release);
        if (atomic_load_explicit(&st->waiting, memory_order_relaxed) > 0)
            sync_wake_all(&st->consumed_word);
    }
    return took;
}
