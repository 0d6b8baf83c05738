/*
 * collcheck.h - the collectives self-check: every rank allreduces inputs
 * whose sums are exact (small integers plus quarters, as nccl-tests does),
 * compares every element with the exactly known answer, and hashes its
 * result so the parent can check that all ranks hold the same bits.
 *
 * This is what `ddpsim selfcheck --ranks N` runs. Ranks only compute and
 * write records into the shared area; the caller formats and judges.
 */
#ifndef DDPSIM_COLLCHECK_H
#define DDPSIM_COLLCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "world.h"

typedef struct collcheck_case {
    coll_algo algo;
    coll_dtype type;
    coll_op op;
    size_t count;
} collcheck_case;

typedef struct collcheck_result {
    collcheck_case c;
    double median_us;   /* rank 0's median allreduce time over the iterations */
    uint64_t wrong;     /* wrong elements, summed over ranks and iterations */
    int ranks_agree;    /* every rank ended with the same bits */
} collcheck_result;

/* Shared bytes collcheck_run needs in the world's user area. */
size_t collcheck_user_bytes(int ncases, int nranks, int iters);

/* Input value of rank r at element i (exact in float; sums over <= 256 ranks stay exact). */
double collcheck_input(int r, size_t i);

/*
 * Run every case `iters` times on the world. Returns DDP_OK when the run
 * itself worked (whatever the results); a world error otherwise.
 */
ddp_status collcheck_run(world *w, const collcheck_case *cases, int ncases, int iters,
                         collcheck_result *out);

#endif
