/*
 * coll_impl.h - the collectives' internals shared by the forked world's
 * collectives (coll.c), the rank's side of an MPI world's (coll_remote.c)
 * and its parent's side (world_mpi.c), internal to engine/world. One
 * reduction code for both worlds: the same sums in the same order, so the
 * same bits whichever world carried the data.
 */
#ifndef DDPSIM_COLL_IMPL_H
#define DDPSIM_COLL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "world.h"

/*
 * dst[lo, hi) = the sum over ranks of src[r][lo, hi) in algo's order, where
 * element i is element off + i of the count-element vector (the order of the
 * ring depends on that global index). src[r] holds rank r's values.
 */
void coll_reduce_slice(void *dst, void **src, int n, coll_dtype type, coll_algo algo, size_t off, size_t count,
                       size_t lo, size_t hi);
/* dst[lo, hi) /= n, correctly rounded: avg after the sum. */
void coll_divide_slice(void *dst, coll_dtype type, int n, size_t lo, size_t hi);

/* A collective's descriptor as people read it ("allreduce of 7312 float (sum, ordered) for the reference"). */
void coll_describe_call(const uint64_t *d, char *buf, size_t len);
const char *coll_kind_name(uint64_t kind);
coll_caller coll_current_caller(void);

/* ---- the rank's side of an MPI world's collectives (coll_remote.c); arguments checked by coll.c ---- */
ddp_status coll_remote_reduce(world_rank *wr, uint64_t kind, void *buf, size_t count, coll_dtype type, coll_op op,
                              coll_algo algo);
ddp_status coll_remote_broadcast(world_rank *wr, void *buf, size_t bytes, int root);
ddp_status coll_remote_allgather(world_rank *wr, const void *send, void *recv, size_t bytes);
ddp_status coll_remote_barrier(world_rank *wr);
ddp_status coll_remote_native(world_rank *wr, size_t count, coll_dtype type);

#endif
