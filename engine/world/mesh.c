/*
 * mesh.c - a replicate x shard mesh over the world and its group
 * collectives (mesh.h). A group smaller than the world is served by one
 * allgather over the world, from which each rank takes its own group's
 * members: every rank calls the same collective, so the world's checks of
 * who calls what hold for group collectives too.
 */
#include "mesh.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ddp_status mesh_parse(const char *text, int nranks, const char *what, mesh *out)
{
    int r = 0, s = 0, used = 0;
    if (!text || sscanf(text, "%dx%d%n", &r, &s, &used) != 2 || text[used] != '\0' || r < 1 || s < 1)
        return ddp_error(DDP_ERR_INVALID, "%s: '%s' is not RxS (replicas x shards, e.g. 2x4)", what, text ? text : "");
    if ((long)r * s != nranks)
        return ddp_error(DDP_ERR_INVALID, "%s: %dx%d is %ld ranks, the run has %d", what, r, s, (long)r * s, nranks);
    *out = (mesh){r, s};
    return DDP_OK;
}

mesh mesh_flat(int nranks)
{
    return (mesh){1, nranks};
}

mesh mesh_or_flat(const mesh *m, int nranks)
{
    return m->shards > 0 && m->replicas > 0 ? *m : mesh_flat(nranks);
}

int mesh_group_size(const mesh *m, mesh_group g)
{
    return g == MESH_SHARD ? m->shards : g == MESH_REPLICA ? m->replicas : m->replicas * m->shards;
}

int mesh_group_index(const mesh *m, mesh_group g, int rank)
{
    return g == MESH_SHARD ? rank % m->shards : g == MESH_REPLICA ? rank / m->shards : rank;
}

int mesh_group_member(const mesh *m, mesh_group g, int rank, int k)
{
    int i = rank / m->shards, j = rank % m->shards;
    return g == MESH_SHARD ? i * m->shards + k : g == MESH_REPLICA ? k * m->shards + j : k;
}

/*
 * A smaller group's sums go through the world's allgather a piece at a
 * time, so the gathered copy (world size x piece) stays small whatever the
 * buffer: at most MESH_PIECE floats of every rank at once.
 */
#define MESH_PIECE ((size_t)1 << 16)

ddp_status mesh_allreduce_sum(world_rank *wr, const mesh *m, mesh_group g, float *buf, size_t count,
                              coll_algo algo)
{
    int size = mesh_group_size(m, g), rank = world_rank_id(wr);
    if (size == world_size(wr))
        return coll_allreduce(wr, buf, count, COLL_FLOAT, COLL_SUM, algo);
    if (size == 1 || count == 0)
        return DDP_OK; /* every rank's group is of one rank: nobody communicates */
    size_t n = (size_t)world_size(wr), piece = count < MESH_PIECE ? count : MESH_PIECE;
    float *all = malloc(n * piece * sizeof *all);
    if (!all)
        return ddp_error(DDP_ERR_NOMEM, "a group collective: %zu floats", n * piece);
    ddp_status s = DDP_OK;
    for (size_t at = 0; at < count && s == DDP_OK; at += piece) {
        size_t c = count - at < piece ? count - at : piece;
        s = coll_allgather(wr, buf + at, all, c * sizeof *buf);
        if (s != DDP_OK)
            break;
        const float *first = all + (size_t)mesh_group_member(m, g, rank, 0) * c;
        memcpy(buf + at, first, c * sizeof *buf);
        for (int k = 1; k < size; k++) {
            const float *x = all + (size_t)mesh_group_member(m, g, rank, k) * c;
            for (size_t e = 0; e < c; e++)
                buf[at + e] += x[e];
        }
    }
    free(all);
    return s;
}

ddp_status mesh_reduce_scatter_sum(world_rank *wr, const mesh *m, mesh_group g, const float *send, float *recv,
                                   size_t per_rank, coll_algo algo)
{
    size_t size = (size_t)mesh_group_size(m, g);
    size_t count = per_rank * size;
    float *tmp = malloc((count ? count : 1) * sizeof *tmp);
    if (!tmp)
        return ddp_error(DDP_ERR_NOMEM, "a reduce_scatter: %zu floats", count);
    memcpy(tmp, send, count * sizeof *tmp);
    ddp_status s = count ? mesh_allreduce_sum(wr, m, g, tmp, count, algo) : DDP_OK;
    if (s == DDP_OK)
        memcpy(recv, tmp + (size_t)mesh_group_index(m, g, world_rank_id(wr)) * per_rank, per_rank * sizeof *recv);
    free(tmp);
    return s;
}

ddp_status mesh_allgather(world_rank *wr, const mesh *m, mesh_group g, const void *send, void *recv, size_t bytes)
{
    int size = mesh_group_size(m, g), rank = world_rank_id(wr);
    if (size == world_size(wr))
        return coll_allgather(wr, send, recv, bytes);
    if (size == 1) {
        memmove(recv, send, bytes);
        return DDP_OK;
    }
    size_t n = (size_t)world_size(wr), piece = bytes < MESH_PIECE * 4 ? bytes : MESH_PIECE * 4;
    unsigned char *all = malloc(n * (piece ? piece : 1));
    if (!all)
        return ddp_error(DDP_ERR_NOMEM, "a group allgather: %zu bytes", n * piece);
    ddp_status s = DDP_OK;
    for (size_t at = 0; at < bytes && s == DDP_OK; at += piece) {
        size_t c = bytes - at < piece ? bytes - at : piece;
        s = coll_allgather(wr, (const unsigned char *)send + at, all, c);
        for (int k = 0; s == DDP_OK && k < size; k++)
            memcpy((unsigned char *)recv + (size_t)k * bytes + at,
                   all + (size_t)mesh_group_member(m, g, rank, k) * c, c);
    }
    free(all);
    return s;
}
