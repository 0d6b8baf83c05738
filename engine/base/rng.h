/*
 * rng.h - ddpsim's counter-based random numbers.
 *
 * Every random value ddpsim uses is a pure function of a key (seed, stream,
 * rank, micro-step, tensor, ...) and an index, never of call order or of a
 * hidden state, so a value can be recomputed anywhere and a run replays
 * exactly. The mixer is splitmix64's finalizer (Steele, Lea, Flood 2014):
 * rng_key() folds the key words into one 64-bit key, rng_u64(key, i) mixes
 * key + (i+1) * golden-ratio increment. Not for cryptography; not rand().
 */
#ifndef DDPSIM_RNG_H
#define DDPSIM_RNG_H

#include <stdint.h>

#define RNG_GOLDEN UINT64_C(0x9e3779b97f4a7c15)

/* The splitmix64 output function: a bijective 64-bit mixer. */
static inline uint64_t rng_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* Fold key words into one key: rng_key(rng_key(seed, a), b) names stream (seed, a, b). */
static inline uint64_t rng_key(uint64_t key, uint64_t word)
{
    return rng_mix(key ^ rng_mix(word + RNG_GOLDEN));
}

/* The i-th 64-bit value of the stream named by key. */
static inline uint64_t rng_u64(uint64_t key, uint64_t i)
{
    return rng_mix(key + (i + 1) * RNG_GOLDEN);
}

/* Uniform in [0, 1) with 24 random bits: every value is exact in float. */
static inline float rng_uniform_f(uint64_t key, uint64_t i)
{
    return (float)(rng_u64(key, i) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n), n > 0 (multiply-shift; bias below 2^-32 for n < 2^32). */
static inline uint32_t rng_below(uint64_t key, uint64_t i, uint32_t n)
{
    return (uint32_t)(((rng_u64(key, i) >> 32) * (uint64_t)n) >> 32);
}

#endif
