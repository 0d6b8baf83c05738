/*
 * coll.c - the shared-memory collectives and their reduction orders (coll.h).
 *
 * Every collective starts the same way: publish a descriptor, meet at a
 * barrier, and check that all ranks called the same thing. That first barrier
 * also guarantees that no rank is still reading the previous collective's
 * buffers when this one overwrites them, so no trailing barrier is needed.
 * Vectors larger than a slot go through in pieces; the reduction order of
 * every element depends only on its global index, never on the piece size.
 */
#include "coll.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "coll_impl.h"
#include "exactsum.h"
#include "world_impl.h"

enum { BLOCK = 2048 }; /* elements per cache block of the sum loops */

/*
 * The sum loops are built twice, for AVX2 and for the baseline, and the
 * loader picks the one the CPU runs (GCC's target_clones). Each element is
 * still added by the same IEEE operations in the same order, so the bits do
 * not depend on the vector width.
 */
#define VECTOR_CLONES COLL_VECTOR_CLONES

static const char *const algo_names[COLL_NALGOS] = {"ordered", "ring", "exact"};

ddp_status coll_algo_parse(const char *name, coll_algo *out)
{
    for (int a = 0; a < COLL_NALGOS; a++)
        if (strcmp(name, algo_names[a]) == 0) {
            *out = (coll_algo)a;
            return DDP_OK;
        }
    return ddp_error(DDP_ERR_INVALID, "unknown algorithm '%s' (choose ordered, ring or exact)", name);
}

const char *coll_algo_name(coll_algo a) { return (unsigned)a < COLL_NALGOS ? algo_names[a] : "?"; }
const char *coll_dtype_name(coll_dtype t) { return t == COLL_FLOAT ? "float" : t == COLL_DOUBLE ? "double" : "?"; }
const char *coll_op_name(coll_op op) { return op == COLL_SUM ? "sum" : op == COLL_AVG ? "avg" : "?"; }
size_t coll_dtype_size(coll_dtype t) { return t == COLL_DOUBLE ? sizeof(double) : sizeof(float); }

static _Thread_local coll_caller current_caller = COLL_CALLER_IMPL;

coll_caller coll_current_caller(void) { return current_caller; }

coll_caller coll_set_caller(coll_caller c)
{
    coll_caller before = current_caller;
    current_caller = c;
    return before;
}

const char *coll_caller_name(coll_caller c)
{
    switch (c) {
    case COLL_CALLER_IMPL: return "the implementation";
    case COLL_CALLER_REFERENCE: return "the reference";
    case COLL_CALLER_CHECKS: return "ddpsim's checks";
    }
    return "?";
}

const char *coll_kind_name(uint64_t k)
{
    switch (k) {
    case COLL_KIND_ALLREDUCE: return "allreduce";
    case COLL_KIND_BROADCAST: return "broadcast";
    case COLL_KIND_ALLGATHER: return "allgather";
    case COLL_KIND_BARRIER: return "barrier";
    case COLL_KIND_ALLREDUCE_INPLACE: return "allreduce_inplace";
    case COLL_KIND_REDUCE_SCATTER: return "reduce_scatter";
    case WORLD_REMOTE_BARRIER: return "barrier";
    case COLL_KIND_NATIVE_ALLREDUCE: return "MPI_Allreduce";
    }
    return "?";
}

/*
 * Enter a collective: publish what this rank calls, meet, and compare with
 * rank 0. Every rank sees the same descriptors, so all fail together.
 */
static ddp_status coll_announce(world_rank *wr, uint64_t kind, uint64_t a, uint64_t b, uint64_t c)
{
    DDP_CHECK(world_enter_coll(wr, coll_kind_name(kind)));
    uint64_t *mine = world_coll_desc(wr, world_rank_id(wr));
    mine[0] = kind;
    mine[1] = a;
    mine[2] = b;
    mine[3] = c;
    mine[4] = (uint64_t)current_caller;
    return DDP_OK;
}

/* A descriptor as people read it: "allreduce of 7312 float (sum, ordered)", "broadcast of 64 bytes from rank 0". */
void coll_describe_call(const uint64_t *d, char *buf, size_t len)
{
    switch (d[0]) {
    case COLL_KIND_ALLREDUCE:
    case COLL_KIND_ALLREDUCE_INPLACE:
    case COLL_KIND_REDUCE_SCATTER:
        snprintf(buf, len, "%s of %llu %s (%s, %s)", coll_kind_name(d[0]), (unsigned long long)d[1],
                 coll_dtype_name((coll_dtype)(d[2] & 0xff)), coll_op_name((coll_op)(d[2] >> 8)),
                 coll_algo_name((coll_algo)d[3]));
        break;
    case COLL_KIND_BROADCAST:
        snprintf(buf, len, "broadcast of %llu bytes from rank %llu", (unsigned long long)d[1], (unsigned long long)d[2]);
        break;
    case COLL_KIND_ALLGATHER: snprintf(buf, len, "allgather of %llu bytes per rank", (unsigned long long)d[1]); break;
    default: snprintf(buf, len, "%s", coll_kind_name(d[0])); break;
    }
    size_t n = strlen(buf);
    if (n < len)
        snprintf(buf + n, len - n, " for %s", coll_caller_name((coll_caller)d[4]));
}

/* The opening barrier and the check of what every rank announced. */
static ddp_status coll_meet(world_rank *wr)
{
    DDP_CHECK(world_barrier(wr));
    const uint64_t *d0 = world_coll_desc(wr, 0);
    for (int r = 1; r < world_size(wr); r++) {
        const uint64_t *dr = world_coll_desc(wr, r);
        if (memcmp(dr, d0, WORLD_DESC_WORDS * sizeof *dr) != 0) {
            char a[128], b[128];
            coll_describe_call(d0, a, sizeof a);
            coll_describe_call(dr, b, sizeof b);
            return ddp_error(DDP_ERR_INVALID, "ranks disagree on a collective: rank 0 called %s, rank %d called %s", a,
                             r, b);
        }
    }
    return DDP_OK;
}

static ddp_status coll_begin(world_rank *wr, uint64_t kind, uint64_t a, uint64_t b, uint64_t c)
{
    DDP_CHECK(coll_announce(wr, kind, a, b, c));
    return coll_meet(wr);
}

/*
 * dst[i] = sum over k of src[(first + k) % n][i], added in that order. Each
 * cache block is summed in a stack buffer first, so dst may be one of the
 * sources (the in-place allreduce reduces into its own slot).
 */
#define DEFINE_REDUCE_ROTATED(NAME, T)                                                        \
    VECTOR_CLONES static void NAME(T *dst, T *const *src, int n, int first, size_t lo, size_t hi) \
    {                                                                                         \
        T acc[BLOCK];                                                                         \
        for (size_t b = lo; b < hi; b += BLOCK) {                                             \
            size_t len = hi - b < BLOCK ? hi - b : BLOCK;                                     \
            const T *restrict s0 = src[first] + b;                                            \
            T *restrict a = acc;                                                              \
            for (size_t i = 0; i < len; i++)                                                  \
                a[i] = s0[i];                                                                 \
            for (int k = 1; k < n - 1; k++) {                                                 \
                const T *restrict sk = src[(first + k) % n] + b;                              \
                for (size_t i = 0; i < len; i++)                                              \
                    a[i] += sk[i];                                                            \
            }                                                                                 \
            if (n == 1) {                                                                     \
                memcpy(dst + b, acc, len * sizeof(T));                                        \
                continue;                                                                     \
            }                                                                                 \
            /* The last term goes straight to dst, which may be that very source (same index). */ \
            const T *sl = src[(first + n - 1) % n] + b;                                       \
            T *d = dst + b;                                                                   \
            for (size_t i = 0; i < len; i++)                                                  \
                d[i] = a[i] + sl[i];                                                          \
        }                                                                                     \
    }
DEFINE_REDUCE_ROTATED(reduce_rotated_f, float)
DEFINE_REDUCE_ROTATED(reduce_rotated_d, double)

/*
 * The exact sum of doubles, a cache block at a time: add in double and watch every
 * addition with TwoSum (in loops the compiler vectorizes); an element whose
 * double sum lost no bit, stayed finite and is not zero is the exact sum
 * rounded once. Only the others go through the long accumulator. dst may be
 * one of the sources: each element's terms are all read before it is written.
 */
VECTOR_CLONES static void exact_blocks_d(double *dst, double *const *src, int n, size_t lo, size_t hi)
{
    double sum[BLOCK], lost[BLOCK];
    for (size_t b = lo; b < hi; b += BLOCK) {
        size_t len = hi - b < BLOCK ? hi - b : BLOCK;
        const double *restrict s0 = src[0] + b;
        double *restrict su = sum, *restrict ls = lost;
        for (size_t i = 0; i < len; i++)
            su[i] = s0[i];
        memset(ls, 0, len * sizeof *ls);
        for (int k = 1; k < n; k++) {
            const double *restrict sk = src[k] + b;
            for (size_t i = 0; i < len; i++) {
                double x = sk[i], t = su[i] + x, bb = t - su[i];
                double err = (su[i] - (t - bb)) + (x - bb);
                ls[i] += fabs(err); /* stays 0 exactly when no addition lost a bit */
                su[i] = t;
            }
        }
        /* A sum that is 0 may be -0, and one that is not finite may hide an overflow. */
        int any = 0;
        for (size_t i = 0; i < len; i++) {
            int bad = (ls[i] != 0.0) | (su[i] == 0.0) | (su[i] - su[i] != 0.0); /* NaN in ls: != 0 too */
            ls[i] = bad;
            any |= bad;
        }
        /* Those go to the long accumulator first, into su, before dst (maybe a source) is written. */
        for (size_t i = 0; any && i < len; i++)
            if (ls[i] != 0.0)
                su[i] = exactsum_d((const double *const *)src, n, b + i);
        double *restrict d = dst + b;
        for (size_t i = 0; i < len; i++)
            d[i] = su[i];
    }
}

/* 1 when the interval [s - e, s + e] (e = rel * m) does not round to one float, holds zero, or s is not finite. */
static inline int interval_unsure(double s, double m, double rel)
{
    double e = m * rel;
    double down = (float)(s - e), up = (float)(s + e);
    return (down != up) | (fabs(s) <= e) | (s - s != 0.0);
}

/*
 * The exact sum of floats, a cache block at a time, with half the work per
 * term of the TwoSum check: add in double (s) and add up the magnitudes (m).
 * Summing n terms in double, in any order, is off by at most (n-1) 2^-53 m
 * (to first order), so the exact sum S lies in [s - e, s + e] with
 * e = n 2^-52 m, which also covers the rounding of s - e and s + e
 * themselves (twice the bound). Rounding to float is monotonic: when both
 * ends round to the same float, so does S, and so does s. Otherwise (S near
 * a rounding boundary, an interval around zero, a non-finite term) the long
 * accumulator decides. dst may be one of the sources.
 */
VECTOR_CLONES static void exact_blocks_f(float *dst, float *const *src, int n, size_t lo, size_t hi)
{
    double sum[BLOCK], mag[BLOCK];
    const double rel = (double)n * 0x1p-52;
    for (size_t b = lo; b < hi; b += BLOCK) {
        size_t len = hi - b < BLOCK ? hi - b : BLOCK;
        double *restrict su = sum, *restrict mg = mag; /* mg: magnitudes, then the unsure flags */
        int any = 0;
        if (n <= 4) {
            /* Up to 4 sources in one pass, everything in registers; missing ones read as +0, which
             * changes no sum but the sign of a zero, and a zero sum is unsure anyway. */
            static const float zeros[BLOCK];
            const float *s0 = src[0] + b, *s1 = n > 1 ? src[1] + b : zeros, *s2 = n > 2 ? src[2] + b : zeros,
                        *s3 = n > 3 ? src[3] + b : zeros;
            for (size_t i = 0; i < len; i++) {
                double x0 = s0[i], x1 = s1[i], x2 = s2[i], x3 = s3[i];
                double v = (x0 + x1) + (x2 + x3), m = (fabs(x0) + fabs(x1)) + (fabs(x2) + fabs(x3));
                int unsure = interval_unsure(v, m, rel);
                su[i] = v;
                mg[i] = unsure;
                any |= unsure;
            }
        } else {
            /* Two sources a pass: the bound holds for any order of the additions. */
            int k = 0;
            if (n >= 2) {
                const float *restrict sa = src[0] + b, *restrict sb = src[1] + b;
                for (size_t i = 0; i < len; i++) {
                    double x = sa[i], y = sb[i];
                    su[i] = x + y;
                    mg[i] = fabs(x) + fabs(y);
                }
                k = 2;
            } else {
                memset(su, 0, len * sizeof *su);
                memset(mg, 0, len * sizeof *mg);
            }
            for (; k + 1 < n; k += 2) {
                const float *restrict sa = src[k] + b, *restrict sb = src[k + 1] + b;
                for (size_t i = 0; i < len; i++) {
                    double x = sa[i], y = sb[i];
                    su[i] += x + y;
                    mg[i] += fabs(x) + fabs(y);
                }
            }
            if (k < n) {
                const float *restrict sk = src[k] + b;
                for (size_t i = 0; i < len; i++) {
                    double x = sk[i];
                    su[i] += x;
                    mg[i] += fabs(x);
                }
            }
            for (size_t i = 0; i < len; i++) {
                int unsure = interval_unsure(su[i], mg[i], rel);
                mg[i] = unsure;
                any |= unsure;
            }
        }
        /* The unsure few through the long accumulator, into su (a float result is exact in double),
         * before dst, which may be a source, is written. */
        for (size_t i = 0; any && i < len; i++)
            if (mg[i] != 0.0)
                su[i] = exactsum_f((const float *const *)src, n, b + i);
        float *restrict d = dst + b;
        for (size_t i = 0; i < len; i++)
            d[i] = (float)su[i];
    }
}

/* Index of the ring chunk holding global element g of a count-element vector. */
static int ring_chunk_of(size_t g, size_t count, int n)
{
    int c = (int)(((unsigned __int128)g * (unsigned)n) / count);
    size_t lo, hi;
    for (;;) {
        coll_split(count, n, c, &lo, &hi);
        if (g < lo)
            c--;
        else if (g >= hi)
            c++;
        else
            return c;
    }
}

/*
 * Reduce elements [lo, hi) of the current piece (global offset `off`) of
 * the slots into dst, in the order `algo` defines.
 */
void coll_reduce_slice(void *dst, void **src, int n, coll_dtype type, coll_algo algo, size_t off, size_t count,
                       size_t lo, size_t hi)
{
    if (algo == COLL_EXACT) {
        if (type == COLL_FLOAT)
            exact_blocks_f(dst, (float *const *)src, n, lo, hi);
        else
            exact_blocks_d(dst, (double *const *)src, n, lo, hi);
        return;
    }
    size_t i = lo;
    while (i < hi) {
        int first = 0;
        size_t run_end = hi;
        if (algo == COLL_RING) {
            int c = ring_chunk_of(off + i, count, n);
            size_t clo, chi;
            coll_split(count, n, c, &clo, &chi);
            first = (c + 1) % n;
            if (chi - off < run_end)
                run_end = chi - off;
        }
        if (type == COLL_FLOAT)
            reduce_rotated_f(dst, (float *const *)src, n, first, i, run_end);
        else
            reduce_rotated_d(dst, (double *const *)src, n, first, i, run_end);
        i = run_end;
    }
}

void coll_mul_inv_n(float *dst, const float *src, size_t count, int n)
{
    float inv = (float)(1.0 / n);
    for (size_t i = 0; i < count; i++)
        dst[i] = src[i] * inv;
}

void coll_div_n(float *dst, const float *src, size_t count, int n)
{
    float fn = (float)n;
    for (size_t i = 0; i < count; i++)
        dst[i] = src[i] / fn;
}

void coll_divide_slice(void *dst, coll_dtype type, int n, size_t lo, size_t hi)
{
    if (type == COLL_FLOAT) {
        float *d = (float *)dst + lo;
        coll_div_n(d, d, hi - lo, n);
    } else {
        double *d = dst, dn = (double)n;
        for (size_t i = lo; i < hi; i++)
            d[i] /= dn;
    }
}

/*
 * A message that fits a mailbox: put it in this call's mailbox before the
 * opening barrier, then every rank reduces all of it from the mailboxes
 * straight into its own buffer. One barrier in all, and none at the end:
 * the mailboxes alternate (world_mailbox), so the next call never
 * overwrites what a slow rank is still reading.
 */
static ddp_status allreduce_small(world_rank *wr, uint64_t kind, void *buf, size_t count, coll_dtype type,
                                  coll_op op, coll_algo algo)
{
    DDP_CHECK(coll_announce(wr, kind, count, (uint64_t)type | (uint64_t)op << 8, (uint64_t)algo));
    int n = world_size(wr), me = world_rank_id(wr);
    size_t esz = coll_dtype_size(type);
    unsigned char *mine = world_mailbox(wr, me);
    memcpy(mine, buf, count * esz);
    DDP_CHECK(coll_meet(wr));
    void *src[WORLD_MAX_RANKS];
    for (int r = 0; r < n; r++)
        src[r] = world_mailbox(wr, r);
    coll_reduce_slice(buf, src, n, type, algo, 0, count, 0, count);
    if (op == COLL_AVG)
        coll_divide_slice(buf, type, n, 0, count);
    world_leave_coll(wr);
    return DDP_OK;
}

static ddp_status check_reduction(size_t count, coll_dtype type, coll_op op, coll_algo algo)
{
    if (count == 0)
        return ddp_error(DDP_ERR_INVALID, "allreduce of 0 elements");
    if ((unsigned)type > COLL_DOUBLE || (unsigned)op > COLL_AVG || (unsigned)algo >= COLL_NALGOS)
        return ddp_error(DDP_ERR_INVALID, "allreduce: unknown type %d, op %d or algorithm %d", (int)type, (int)op,
                         (int)algo);
    return DDP_OK;
}

/*
 * The reduction through the slots, a piece at a time: every rank copies its
 * piece of buf into its slot; each reduces its share of the piece, in the
 * algorithm's order (which fixes every element's bits whoever sums it).
 * allreduce: each sums its slice of the piece into the result area and,
 * after a barrier, copies the whole result back. reduce_scatter: each sums
 * the part of the piece inside its own slice of all count elements, straight
 * into buf, and copies nothing back.
 */
static ddp_status reduce_through_slots(world_rank *wr, uint64_t kind, void *buf, size_t count, coll_dtype type,
                                       coll_op op, coll_algo algo)
{
    DDP_CHECK(coll_begin(wr, kind, count, (uint64_t)type | (uint64_t)op << 8, (uint64_t)algo));
    int n = world_size(wr), me = world_rank_id(wr);
    size_t esz = coll_dtype_size(type), piece = world_slot_bytes(wr) / esz;
    void *src[WORLD_MAX_RANKS];
    for (int r = 0; r < n; r++)
        src[r] = world_slot(wr, r);
    void *res = world_result(wr);
    unsigned char *p = buf;

    for (size_t off = 0; off < count; off += piece) {
        size_t len = count - off < piece ? count - off : piece;
        memcpy(src[me], p + off * esz, len * esz);
        DDP_CHECK(world_barrier(wr));
        size_t lo, hi;
        if (kind == COLL_KIND_REDUCE_SCATTER) {
            coll_split_in_piece(count, n, me, off, len, &lo, &hi);
            if (lo < hi)
                coll_reduce_slice(p + off * esz, src, n, type, algo, off, count, lo, hi);
            DDP_CHECK(world_barrier(wr)); /* every rank has read every slot before the next piece overwrites it */
            continue;
        }
        coll_split(len, n, me, &lo, &hi);
        coll_reduce_slice(res, src, n, type, algo, off, count, lo, hi);
        if (op == COLL_AVG)
            coll_divide_slice(res, type, n, lo, hi);
        DDP_CHECK(world_barrier(wr));
        memcpy(p + off * esz, res, len * esz);
        /* The next piece's first barrier (after its slot copy) precedes any overwrite of res. */
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_allreduce(world_rank *wr, void *buf, size_t count, coll_dtype type, coll_op op,
                          coll_algo algo)
{
    DDP_CHECK(check_reduction(count, type, op, algo));
    if (!buf)
        return ddp_error(DDP_ERR_INVALID, "allreduce: NULL buffer");
    if (world_remote(wr))
        return coll_remote_reduce(wr, COLL_KIND_ALLREDUCE, buf, count, type, op, algo);
    if (count * coll_dtype_size(type) <= WORLD_MAILBOX_BYTES)
        return allreduce_small(wr, COLL_KIND_ALLREDUCE, buf, count, type, op, algo);
    return reduce_through_slots(wr, COLL_KIND_ALLREDUCE, buf, count, type, op, algo);
}

ddp_status coll_reduce_scatter(world_rank *wr, void *buf, size_t count, coll_dtype type, coll_algo algo)
{
    DDP_CHECK(check_reduction(count, type, COLL_SUM, algo));
    if (!buf)
        return ddp_error(DDP_ERR_INVALID, "reduce_scatter: NULL buffer");
    if (world_remote(wr))
        return coll_remote_reduce(wr, COLL_KIND_REDUCE_SCATTER, buf, count, type, COLL_SUM, algo);
    if (count * coll_dtype_size(type) <= WORLD_MAILBOX_BYTES) /* one barrier: everything everywhere costs nothing */
        return allreduce_small(wr, COLL_KIND_REDUCE_SCATTER, buf, count, type, COLL_SUM, algo);
    return reduce_through_slots(wr, COLL_KIND_REDUCE_SCATTER, buf, count, type, COLL_SUM, algo);
}

/* Bytes of the result reduce_to_all keeps at a time: fits the L1 cache with room for the inputs. */
#define TO_ALL_BLOCK_BYTES 16384

/*
 * Reduce elements [lo, hi) of the slots and write the result back into every
 * slot, a block at a time: the block's inputs were just read, so the stores
 * find their lines in the cache. This replaces an allgather that read every
 * other rank's slice after the reduction: per rank n/N bytes written N times
 * instead of n/N written once, then (N-1) n/N read and written again (and
 * the reads for ownership of those writes). Only this rank touches this
 * slice of any slot during the collective, so nothing here races.
 */
static void reduce_to_all(void **src, int n, coll_dtype type, coll_op op, coll_algo algo, size_t count, size_t lo,
                          size_t hi)
{
    _Alignas(64) unsigned char block[TO_ALL_BLOCK_BYTES];
    void *at[WORLD_MAX_RANKS];
    size_t esz = coll_dtype_size(type), step = TO_ALL_BLOCK_BYTES / esz;
    for (size_t b = lo; b < hi; b += step) {
        size_t len = hi - b < step ? hi - b : step;
        for (int k = 0; k < n; k++)
            at[k] = (unsigned char *)src[k] + b * esz;
        /* The sources shifted to b and the piece offset b: each element keeps its global index. */
        coll_reduce_slice(block, at, n, type, algo, b, count, 0, len);
        if (op == COLL_AVG)
            coll_divide_slice(block, type, n, 0, len);
        for (int k = 0; k < n; k++)
            memcpy(at[k], block, len * esz);
    }
}


ddp_status coll_allreduce_inplace(world_rank *wr, size_t count, coll_dtype type, coll_op op, coll_algo algo)
{
    DDP_CHECK(check_reduction(count, type, op, algo));
    size_t esz = coll_dtype_size(type);
    if (count > world_slot_bytes(wr) / esz)
        return ddp_error(DDP_ERR_INVALID, "in-place allreduce of %zu elements exceeds the %zu-byte slot", count,
                         world_slot_bytes(wr));
    if (world_remote(wr))
        return coll_remote_reduce(wr, COLL_KIND_ALLREDUCE_INPLACE, world_slot(wr, world_rank_id(wr)), count, type, op,
                                  algo);
    int n = world_size(wr), me = world_rank_id(wr);
    void *src[WORLD_MAX_RANKS];
    for (int r = 0; r < n; r++)
        src[r] = world_slot(wr, r);
    unsigned char *mine = src[me];
    /* Small: through the mailboxes, so the result goes straight into the slot with no barrier after. */
    if (count * esz <= WORLD_MAILBOX_BYTES)
        return allreduce_small(wr, COLL_KIND_ALLREDUCE_INPLACE, mine, count, type, op, algo);
    DDP_CHECK(coll_begin(wr, COLL_KIND_ALLREDUCE_INPLACE, count, (uint64_t)type | (uint64_t)op << 8, (uint64_t)algo));
    /* My slice of every slot, reduced and written back into every slot; then a flag, not a barrier. */
    uint32_t ticket = world_flag_next(wr);
    size_t lo, hi;
    coll_split(count, n, me, &lo, &hi);
    reduce_to_all(src, n, type, op, algo, count, lo, hi);
    world_flag_set(wr, ticket);
    /* Every other rank has written its slice into my slot (and read its slice of my slot) once its flag
     * is up. Start with the next rank so the ranks do not all poll the same one. */
    for (int k = 1; k < n; k++)
        DDP_CHECK(world_flag_wait(wr, (me + k) % n, ticket));
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_allreduce_native(world_rank *wr, size_t count, coll_dtype type)
{
    DDP_CHECK(check_reduction(count, type, COLL_SUM, COLL_ORDERED));
    if (!world_remote(wr))
        return ddp_error(DDP_ERR_INVALID, "MPI_Allreduce: not in an MPI world");
    if (count > world_slot_bytes(wr) / coll_dtype_size(type))
        return ddp_error(DDP_ERR_INVALID, "MPI_Allreduce of %zu elements exceeds the %zu-byte slot", count,
                         world_slot_bytes(wr));
    return coll_remote_native(wr, count, type);
}

ddp_status coll_broadcast(world_rank *wr, void *buf, size_t bytes, int root)
{
    if (bytes == 0 || !buf)
        return ddp_error(DDP_ERR_INVALID, "broadcast of %zu bytes from %p", bytes, buf);
    if (root < 0 || root >= world_size(wr))
        return ddp_error(DDP_ERR_INVALID, "broadcast root %d is not a rank (0..%d)", root,
                         world_size(wr) - 1);
    if (world_remote(wr))
        return coll_remote_broadcast(wr, buf, bytes, root);
    DDP_CHECK(coll_begin(wr, COLL_KIND_BROADCAST, bytes, (uint64_t)root, 0));
    int me = world_rank_id(wr);
    size_t piece = world_slot_bytes(wr);
    unsigned char *slot = world_slot(wr, root), *p = buf;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        if (off > 0)
            DDP_CHECK(world_barrier(wr)); /* everyone copied the previous piece out */
        if (me == root)
            memcpy(slot, p + off, len);
        DDP_CHECK(world_barrier(wr));
        if (me != root)
            memcpy(p + off, slot, len);
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_allgather(world_rank *wr, const void *send, void *recv, size_t bytes)
{
    if (bytes == 0 || !send || !recv)
        return ddp_error(DDP_ERR_INVALID, "allgather of %zu bytes", bytes);
    if (world_remote(wr))
        return coll_remote_allgather(wr, send, recv, bytes);
    DDP_CHECK(coll_begin(wr, COLL_KIND_ALLGATHER, bytes, 0, 0));
    int n = world_size(wr), me = world_rank_id(wr);
    size_t piece = world_slot_bytes(wr);
    const unsigned char *s = send;
    unsigned char *out = recv;
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        if (off > 0)
            DDP_CHECK(world_barrier(wr));
        memcpy(world_slot(wr, me), s + off, len);
        DDP_CHECK(world_barrier(wr));
        for (int r = 0; r < n; r++)
            memcpy(out + (size_t)r * bytes + off, world_slot(wr, r), len);
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_barrier(world_rank *wr)
{
    if (world_remote(wr))
        return coll_remote_barrier(wr);
    DDP_CHECK(coll_begin(wr, COLL_KIND_BARRIER, 0, 0, 0));
    world_leave_coll(wr);
    return DDP_OK;
}
