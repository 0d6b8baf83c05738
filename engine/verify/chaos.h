/*
 * chaos.h - seeded timing perturbation of one rank (--chaos C): what may
 * change is when things happen, never what is computed.
 *
 *  - before every op, every rank sleeps a seeded 0..200 us, and one
 *    straggler rank (chosen by the seed) another 0.5..2 ms;
 *  - the ready events of each backward are held back for a seeded while and
 *    delivered in a seeded order, never before the gradient exists
 *    (events.h);
 *  - the world's barriers get seeded arrival delays (CHAOS_BARRIER_JITTER_US);
 *  - implementations may shake their own timing-only choices with the seed
 *    (bucketed shuffles its bucket launches the same way on every rank).
 */
#ifndef DDPSIM_CHAOS_H
#define DDPSIM_CHAOS_H

#include <stddef.h>
#include <stdint.h>

#define CHAOS_BARRIER_JITTER_US 100

typedef struct chaos_rank {
    int on;
    int rank;
    int straggler;
    uint64_t key; /* this rank's stream of the chaos seed */
} chaos_rank;

void chaos_rank_init(chaos_rank *ch, int on, uint64_t seed, int rank, int nranks);

/* The seeded delay before op `op` (nothing when chaos is off). */
void chaos_delay(const chaos_rank *ch, size_t op);


#endif
