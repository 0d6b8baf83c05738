/*
 * coll_remote.c - the rank's side of the collectives in an MPI world
 * (world_impl.h): the data goes a piece at a time through the rank's slot,
 * each piece a request its parent carries out over MPI with its peers'
 * parents (world_mpi.c), which also compare the descriptors at the first
 * piece and sum in the order coll.h defines. Pieces are the forked world's
 * (a slot each), so an element's sum never depends on the world.
 */
#include <string.h>

#include "coll_impl.h"
#include "world_impl.h"

/* Fill the request: the descriptor every rank must agree on, and the piece. */
static void ask(world_rank *wr, uint64_t kind, uint64_t a, uint64_t b, uint64_t c, size_t off, size_t len)
{
    remote_area *ra = world_remote(wr);
    ra->desc[0] = kind;
    ra->desc[1] = a;
    ra->desc[2] = b;
    ra->desc[3] = c;
    ra->desc[4] = (uint64_t)coll_current_caller();
    ra->first = off == 0;
    ra->off = off;
    ra->len = len;
}

ddp_status coll_remote_reduce(world_rank *wr, uint64_t kind, void *buf, size_t count, coll_dtype type, coll_op op,
                              coll_algo algo)
{
    DDP_CHECK(world_enter_coll(wr, coll_kind_name(kind)));
    int n = world_size(wr), me = world_rank_id(wr);
    size_t esz = coll_dtype_size(type), piece = world_slot_bytes(wr) / esz;
    unsigned char *slot = world_slot(wr, me), *p = buf;
    for (size_t off = 0; off < count; off += piece) {
        size_t len = count - off < piece ? count - off : piece;
        if (kind != COLL_KIND_ALLREDUCE_INPLACE) /* in place: the input is in the slot already, one piece */
            memcpy(slot, p + off * esz, len * esz);
        ask(wr, kind, count, (uint64_t)type | (uint64_t)op << 8, (uint64_t)algo, off, len);
        DDP_CHECK(world_remote_call(wr));
        if (kind == COLL_KIND_REDUCE_SCATTER) { /* only this rank's slice of the sum is there */
            size_t lo, hi;
            coll_split_in_piece(count, n, me, off, len, &lo, &hi);
            if (lo < hi)
                memcpy(p + (off + lo) * esz, slot + lo * esz, (hi - lo) * esz);
        } else if (kind != COLL_KIND_ALLREDUCE_INPLACE) {
            memcpy(p + off * esz, slot, len * esz);
        }
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_remote_broadcast(world_rank *wr, void *buf, size_t bytes, int root)
{
    DDP_CHECK(world_enter_coll(wr, "broadcast"));
    size_t piece = world_slot_bytes(wr);
    unsigned char *slot = world_slot(wr, world_rank_id(wr)), *p = buf;
    int me = world_rank_id(wr);
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        if (me == root)
            memcpy(slot, p + off, len);
        ask(wr, COLL_KIND_BROADCAST, bytes, (uint64_t)root, 0, off, len);
        DDP_CHECK(world_remote_call(wr));
        if (me != root)
            memcpy(p + off, slot, len);
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_remote_allgather(world_rank *wr, const void *send, void *recv, size_t bytes)
{
    DDP_CHECK(world_enter_coll(wr, "allgather"));
    int n = world_size(wr);
    size_t piece = world_slot_bytes(wr) / (size_t)n; /* every rank's piece lands in the result area */
    if (piece == 0)
        piece = 1;
    const unsigned char *s = send;
    unsigned char *out = recv, *slot = world_slot(wr, world_rank_id(wr)), *res = world_result(wr);
    for (size_t off = 0; off < bytes; off += piece) {
        size_t len = bytes - off < piece ? bytes - off : piece;
        memcpy(slot, s + off, len);
        ask(wr, COLL_KIND_ALLGATHER, bytes, 0, 0, off, len);
        DDP_CHECK(world_remote_call(wr));
        for (int r = 0; r < n; r++)
            memcpy(out + (size_t)r * bytes + off, res + (size_t)r * len, len);
    }
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_remote_native(world_rank *wr, size_t count, coll_dtype type)
{
    DDP_CHECK(world_enter_coll(wr, "MPI_Allreduce"));
    ask(wr, COLL_KIND_NATIVE_ALLREDUCE, count, (uint64_t)type, 0, 0, count);
    world_remote(wr)->first = 0; /* the library's call alone: no descriptors compared */
    DDP_CHECK(world_remote_call(wr));
    world_leave_coll(wr);
    return DDP_OK;
}

ddp_status coll_remote_barrier(world_rank *wr)
{
    DDP_CHECK(world_enter_coll(wr, "barrier"));
    ask(wr, COLL_KIND_BARRIER, 0, 0, 0, 0, 0);
    DDP_CHECK(world_remote_call(wr));
    world_leave_coll(wr);
    return DDP_OK;
}
