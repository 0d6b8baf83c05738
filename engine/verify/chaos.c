/*
 * chaos.c - seeded timing perturbation (chaos.h).
 */
#include "chaos.h"

#include "clock.h"
#include "rng.h"

void chaos_rank_init(chaos_rank *ch, int on, uint64_t seed, int rank, int nranks)
{
    ch->on = on;
    ch->rank = rank;
    ch->key = rng_key(rng_key(seed, 0x6368616f /* "chao" */), (uint64_t)rank);
    ch->straggler = (int)rng_below(rng_key(seed, 's'), 0, (uint32_t)nranks);
}

void chaos_delay(const chaos_rank *ch, size_t op)
{
    if (!ch->on)
        return;
    /* Every rank a little late, the straggler a lot, all seeded. */
    uint32_t us = rng_below(rng_key(ch->key, 'd'), op, 200);
    if (ch->rank == ch->straggler)
        us += 500 + rng_below(rng_key(ch->key, 'D'), op, 1500);
    clock_sleep_us(us);
}
