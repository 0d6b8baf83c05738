/*
 * hash.h - the one fingerprint ddpsim uses: 64-bit FNV-1a, folded a word at
 * a time. It tells whether two runs, two ranks or two sides hold the same
 * bits (a digest per grab, per run, per NCCL call, per schedule); it is not
 * a checksum against tampering and not for hash tables.
 */
#ifndef DDPSIM_HASH_H
#define DDPSIM_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HASH_INIT UINT64_C(0xcbf29ce484222325)
#define HASH_PRIME UINT64_C(0x100000001b3)

/* Fold one word into h. */
static inline uint64_t hash_word(uint64_t h, uint64_t word)
{
    return (h ^ word) * HASH_PRIME;
}

/* Fold the bit patterns of n floats into h, one 32-bit word each (so -0 and +0 differ, NaNs by payload). */
static inline uint64_t hash_floats(uint64_t h, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        h = hash_word(h, u);
    }
    return h;
}

/* Fold n bytes into h, one byte each. */
static inline uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = hash_word(h, b[i]);
    return h;
}

#endif
