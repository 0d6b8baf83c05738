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

/* One lane of the wide loop: a 64-bit word multiplied in, rotated, multiplied again (the round of xxHash64,
 * whose constants these are): every input bit reaches the low and the high bits of the lane. */
#define HASH_LANE_P1 UINT64_C(0x9e3779b185ebca87)
#define HASH_LANE_P2 UINT64_C(0xc2b2ae3d27d4eb4f)
static inline uint64_t hash_lane(uint64_t acc, uint64_t word)
{
    acc += word * HASH_LANE_P2;
    acc = (acc << 31) | (acc >> 33);
    return acc * HASH_LANE_P1;
}

/*
 * The fingerprint of a run of floats, fed in pieces of any length: the bulk
 * goes through four independent lanes of two floats each, which the CPU
 * overlaps (a single chain of multiplies ran at a third of memory speed),
 * blocks of 8 floats counted from the first; at the end the lanes, the last
 * n % 8 floats and n are folded into the starting value a word at a time.
 * The value depends on every bit (-0 and +0 differ, NaNs by payload) and on
 * n, not on how the run was cut into pieces or on its alignment, so a
 * checker can hash a tensor while it compares it, a block at a time.
 */
typedef struct hash_stream {
    uint64_t h, lane[4];
    uint32_t carry[8]; /* the floats of an incomplete block */
    size_t ncarry, n;
} hash_stream;

static inline void hash_stream_begin(hash_stream *s, uint64_t h)
{
    s->h = h;
    s->lane[0] = h + HASH_LANE_P1 + HASH_LANE_P2;
    s->lane[1] = h + HASH_LANE_P2;
    s->lane[2] = h;
    s->lane[3] = h - HASH_LANE_P1;
    s->ncarry = s->n = 0;
}

static inline void hash_stream_block(hash_stream *s, const void *block)
{
    uint64_t w[4];
    memcpy(w, block, sizeof w);
    for (int k = 0; k < 4; k++)
        s->lane[k] = hash_lane(s->lane[k], w[k]);
}

static inline void hash_stream_add(hash_stream *s, const float *x, size_t n)
{
    size_t i = 0;
    s->n += n;
    if (s->ncarry) {
        for (; i < n && s->ncarry < 8; i++)
            memcpy(&s->carry[s->ncarry++], &x[i], sizeof(uint32_t));
        if (s->ncarry < 8)
            return;
        hash_stream_block(s, s->carry);
        s->ncarry = 0;
    }
    uint64_t l0 = s->lane[0], l1 = s->lane[1], l2 = s->lane[2], l3 = s->lane[3];
    for (; i + 8 <= n; i += 8) {
        uint64_t w[4];
        memcpy(w, x + i, sizeof w);
        l0 = hash_lane(l0, w[0]);
        l1 = hash_lane(l1, w[1]);
        l2 = hash_lane(l2, w[2]);
        l3 = hash_lane(l3, w[3]);
    }
    s->lane[0] = l0, s->lane[1] = l1, s->lane[2] = l2, s->lane[3] = l3;
    for (; i < n; i++)
        memcpy(&s->carry[s->ncarry++], &x[i], sizeof(uint32_t));
}

static inline uint64_t hash_stream_end(const hash_stream *s)
{
    uint64_t h = s->h;
    for (int k = 0; k < 4; k++)
        h = hash_word(h, s->lane[k]);
    h ^= h >> 29; /* the lanes' high bits down into the low ones before the tail is folded in */
    for (size_t i = 0; i < s->ncarry; i++)
        h = hash_word(h, s->carry[i]);
    return hash_word(h, (uint64_t)s->n);
}

/* Fold the bit patterns of n floats into h: hash_stream's value for them fed in one piece. */
static inline uint64_t hash_floats(uint64_t h, const float *x, size_t n)
{
    hash_stream s;
    hash_stream_begin(&s, h);
    hash_stream_add(&s, x, n);
    return hash_stream_end(&s);
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
