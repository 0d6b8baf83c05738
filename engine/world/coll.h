/*
 * coll.h - collectives over a world: allreduce, broadcast, allgather, barrier.
 *
 * Every rank must make the same calls in the same order with the same
 * arguments; a mismatch (count, type, op, algorithm, root) is detected and
 * returned as DDP_ERR_INVALID on every rank rather than hanging or mixing
 * data. Results are bitwise identical on every rank and independent of
 * arrival order and delays, for every algorithm:
 *
 *   ordered  element i = ((x0[i] + x1[i]) + x2[i]) + ... in rank order.
 *            Each rank reduces a contiguous slice (reduce-scatter), then
 *            every rank copies all slices (allgather).
 *   ring     the order of a textbook ring allreduce: the vector is split
 *            into N chunks (chunk c = elements [c*count/N, (c+1)*count/N));
 *            chunk c's partial sum starts at rank c+1 and travels the ring
 *            c+1, c+2, ..., N-1, 0, ..., c, each rank adding its own value:
 *            ((x[c+1] + x[c+2]) + ...) + x[c]  (indices mod N).
 *            This is the association NCCL's ring uses with one channel and
 *            one chunk per rank; real NCCL splits further by channel and
 *            chunk size, so its bits can differ.
 *   exact    the correctly rounded exact sum (exactsum.h): no order at all.
 *
 * avg is the algorithm's sum followed by one division by N (correctly
 * rounded), not a pre-multiplication: DDP's 1/N-then-sum order is the
 * reference DDP's business and is done before calling sum.
 * Not here: bucketing, DDP semantics, GPU backends.
 */
#ifndef DDPSIM_COLL_H
#define DDPSIM_COLL_H

#include <stddef.h>

#include "status.h"
#include "world.h"

/*
 * The sum loops' vector clones: built for AVX2 and the baseline, the loader picks the one the CPU runs
 * (GCC's target_clones; nothing under clang or the sanitizers). The same IEEE operations in the same order
 * either way. Also for the benchmark's speed-of-light kernel, so it adds as fast as the allreduce does.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define COLL_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define COLL_VECTOR_CLONES
#endif

typedef enum coll_dtype { COLL_FLOAT = 0, COLL_DOUBLE = 1 } coll_dtype;
typedef enum coll_op { COLL_SUM = 0, COLL_AVG = 1 } coll_op;
typedef enum coll_algo { COLL_ORDERED = 0, COLL_RING = 1, COLL_EXACT = 2 } coll_algo;
#define COLL_NALGOS 3

/*
 * On whose behalf the calling thread makes its collectives: part of what
 * every rank must agree on, and named when they do not. In a verification
 * run a rank's collectives serve the implementation under test (the
 * default of every thread, so an implementation's own threads need not say
 * so), the reference DDP, or ddpsim's own checks; all three share the
 * world, so without this a rank that skipped one collective could meet its
 * peers in another of the same shape and go on with garbage.
 */
typedef enum coll_caller { COLL_CALLER_IMPL = 0, COLL_CALLER_REFERENCE, COLL_CALLER_CHECKS } coll_caller;
/* Set the calling thread's caller; returns the one before. */
coll_caller coll_set_caller(coll_caller c);
const char *coll_caller_name(coll_caller c);

/* Parse "ordered" | "ring" | "exact". DDP_ERR_INVALID names the choices. */
ddp_status coll_algo_parse(const char *name, coll_algo *out);
const char *coll_algo_name(coll_algo a);
const char *coll_dtype_name(coll_dtype t);
const char *coll_op_name(coll_op op);
size_t coll_dtype_size(coll_dtype t);

/*
 * In-place allreduce of count elements of buf. A message that fits a
 * mailbox (WORLD_MAILBOX_BYTES) goes through the alternating mailboxes with
 * one barrier in all; larger ones through the slots in pieces. Returns
 * DDP_ERR_INVALID for count 0, an unknown enum value or a mismatch between
 * ranks; DDP_ERR_ABORTED when the world was aborted.
 */
ddp_status coll_allreduce(world_rank *wr, void *buf, size_t count, coll_dtype type, coll_op op,
                          coll_algo algo);

/*
 * The sum of count elements of buf over ranks, where each rank needs only
 * its own slice (coll_split(count, N, rank)): afterwards that slice of buf
 * holds the sum, bit for bit what coll_allreduce with algo gives there, and
 * the rest of buf is unspecified. Half the traffic of an allreduce: nothing
 * is copied back.
 */
ddp_status coll_reduce_scatter(world_rank *wr, void *buf, size_t count, coll_dtype type, coll_algo algo);

/*
 * The one-copy allreduce on buffers in shared memory: each rank's input is
 * in its own slot (world_slot(wr, rank), count elements), and so is the
 * result. Each rank sums its slice of every slot in the algorithm's order
 * and writes the sum back into that slice of every slot (so no allgather
 * pass follows), then waits for the other ranks' flags. Same bits as
 * coll_allreduce. A message that fits a mailbox (world_mailbox) goes through
 * the mailboxes instead, with one barrier in all. The caller may write its
 * input once no rank still reads its slot for an earlier collective (the
 * bench puts a barrier there); when this call returns, no rank reads or
 * writes the caller's slot any more.
 * DDP_ERR_INVALID when count does not fit a slot.
 */
ddp_status coll_allreduce_inplace(world_rank *wr, size_t count, coll_dtype type, coll_op op, coll_algo algo);

/*
 * In an MPI world, the MPI library's own MPI_Allreduce (sum) of the count
 * elements in this rank's slot, in place: the library's order, not
 * ddpsim's, and no check that the ranks called the same thing. Only the
 * benchmark's baseline (ddpsim bench allreduce --world mpi).
 * DDP_ERR_INVALID in a forked world or when count does not fit a slot.
 */
ddp_status coll_allreduce_native(world_rank *wr, size_t count, coll_dtype type);

/* Copy root's bytes into every rank's buf. */
ddp_status coll_broadcast(world_rank *wr, void *buf, size_t bytes, int root);

/* recv (N * bytes) receives every rank's send (bytes), in rank order. */
ddp_status coll_allgather(world_rank *wr, const void *send, void *recv, size_t bytes);

ddp_status coll_barrier(world_rank *wr);

/*
 * The two ways an average over n ranks scales a float, each written once:
 * coll_mul_inv_n multiplies by 1/n rounded to float once (PyTorch DDP's
 * mul_out(bucket, grad, 1.0 / N) while copying into a bucket, and NCCL's
 * ncclAvg for floating types); coll_div_n divides by n, correctly rounded
 * (DDP's in-place division with gradient_as_bucket_view, and avg here).
 * They differ in the last bit when n is not a power of two. dst may be src.
 */
void coll_mul_inv_n(float *dst, const float *src, size_t count, int n);
void coll_div_n(float *dst, const float *src, size_t count, int n);

/* The half-open slice [*lo, *hi) of n items that part p of parts owns. */
static inline void coll_split(size_t n, int parts, int p, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)p / (size_t)parts;
    *hi = n * (size_t)(p + 1) / (size_t)parts;
}

/*
 * Part p's slice of n items where it meets the piece [off, off + len), in the
 * piece's own indices: [*lo, *hi), empty (*lo == *hi) when they do not meet.
 * A reduce-scatter done a piece at a time sums exactly this of each piece.
 */
static inline void coll_split_in_piece(size_t n, int parts, int p, size_t off, size_t len, size_t *lo, size_t *hi)
{
    size_t glo, ghi;
    coll_split(n, parts, p, &glo, &ghi);
    *lo = glo > off ? glo - off : 0;
    *hi = ghi <= off ? 0 : ghi < off + len ? ghi - off : len;
    if (*lo > *hi)
        *lo = *hi;
}

#endif
