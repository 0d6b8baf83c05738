/*
 * mesh.h - the world as a replicate x shard mesh (sharded data parallelism:
 * HSDP, and FSDP/ZeRO as its 1 x N case) and collectives over its groups,
 * deterministic like the world's own.
 *
 * A mesh of R x S ranks numbers them as torch's DeviceMesh of shape (R, S)
 * does: rank = i * S + j for replica i and shard index j. The shard group of
 * a rank is the S ranks of its replica (i fixed), its replica group the R
 * ranks of its shard index (j fixed). Every rank of the world calls each
 * group collective at the same time, each with its own group (all shard
 * groups reduce together). A group as large as the world reduces through
 * the world's collectives with the run's algorithm (bit for bit what
 * coll_allreduce gives); a smaller one sums its members' contributions in
 * group order, element by element, from the first member; a group of one
 * rank is a copy.
 */
#ifndef DDPSIM_MESH_H
#define DDPSIM_MESH_H

#include <stddef.h>

#include "coll.h"
#include "status.h"
#include "world.h"

typedef struct mesh {
    int replicas, shards;
} mesh;

/* The groups, numbered as ddpsim_impl.h's ddpsim_group. */
typedef enum mesh_group { MESH_WORLD = 0, MESH_SHARD, MESH_REPLICA } mesh_group;

/* "RxS" (R * S must be nranks) into out; DDP_ERR_INVALID with why, prefixed by what (where it was given). */
ddp_status mesh_parse(const char *text, int nranks, const char *what, mesh *out);
/* 1 x nranks: one shard group, the world. */
mesh mesh_flat(int nranks);
/* *m, or where none was given ({0, 0}) 1 x nranks. */
mesh mesh_or_flat(const mesh *m, int nranks);

int mesh_group_size(const mesh *m, mesh_group g);
/* rank's position in its group g */
int mesh_group_index(const mesh *m, mesh_group g, int rank);
/* the k-th rank (group order) of rank's group g */
int mesh_group_member(const mesh *m, mesh_group g, int rank, int k);

/* buf (count floats) becomes the sum over rank's group g. */
ddp_status mesh_allreduce_sum(world_rank *wr, const mesh *m, mesh_group g, float *buf, size_t count,
                              coll_algo algo);
/*
 * send (per_rank * group size floats) summed over the group; recv (per_rank
 * floats) gets this rank's slice, its group index's: bit for bit that slice
 * of mesh_allreduce_sum. send is not changed.
 */
ddp_status mesh_reduce_scatter_sum(world_rank *wr, const mesh *m, mesh_group g, const float *send, float *recv,
                                   size_t per_rank, coll_algo algo);
/* recv (group size * bytes) gets every member's send, in group order. */
ddp_status mesh_allgather(world_rank *wr, const mesh *m, mesh_group g, const void *send, void *recv, size_t bytes);

#endif
