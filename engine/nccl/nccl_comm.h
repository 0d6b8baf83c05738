/*
 * nccl_comm.h - the NCCL backend of one rank (`--backend nccl`): the
 * implementation under test's reductions go through ncclAllReduce on a GPU
 * while the checker's reference stays on the deterministic CPU collectives.
 *
 * Setup: the rank applies its NCCL environment (nccl_env.h), binds GPU
 * rank % ngpus, takes the ncclUniqueId that rank 0 broadcasts over the
 * shared segment, and creates a non-blocking communicator. Every wait
 * (initialisation, each allreduce) polls: the stream, NCCL's asynchronous
 * error, the world's abort word and a deadline. On an error, an abort or
 * the deadline the communicator is aborted (ncclCommAbort) and the call
 * fails with the CUDA/NCCL call and its error text, so the parent can say
 * which rank failed where.
 *
 * Each allreduce copies the buffer to the device, reduces in place, copies
 * back, and keeps figures (nccl_figures) in the shared segment: counts,
 * device time of the ncclAllReduce (CUDA events), host time of the whole
 * round trip, a digest of the result bits (two runs agree bitwise when
 * their digests do) and how many elements the CPU ring emulation
 * (--algo ring) reproduces bit for bit.
 *
 * In a build without NCCL (nccl_comm_none.c) nccl_comm_create fails with
 * DDP_ERR_INVALID; sim/ refuses --backend nccl before that.
 */
#ifndef DDPSIM_NCCL_COMM_H
#define DDPSIM_NCCL_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "world.h"

typedef struct nccl_figures {
    int active;                 /* this rank ran the NCCL backend */
    int device;                 /* the GPU it bound */
    int separate_hosts;         /* it ran with its own NCCL_HOSTID */
    uint64_t nallreduce;        /* ncclAllReduce calls */
    uint64_t elements;          /* floats reduced, over all calls */
    double device_ms;           /* GPU time of the ncclAllReduce kernels (events around them) */
    double roundtrip_ms;        /* host time: copy in, allreduce, copy out, wait */
    double max_roundtrip_ms;    /* the slowest call */
    uint64_t ring_same;         /* elements bit-identical to the CPU ring emulation */
    uint64_t digest;            /* FNV-1a over the result bits of every call, in order */
} nccl_figures;

typedef struct nccl_settings {
    int ngpus;                  /* as the parent's probe found them (>= 1) */
    double timeout_s;           /* a wait longer than this aborts the communicator (<= 0: none) */
    double init_timeout_s;      /* the same for the communicator's initialisation, which counts as progress for
                                 * the world's watchdog while it lasts (<= 0: none) */
    int ring_check;             /* also run the CPU ring emulation and count identical elements */
} nccl_settings;

/* The communicator's initialisation waits at least this long (bootstraps of many ranks can be slow). */
#define NCCL_INIT_TIMEOUT_S 120.0

typedef struct nccl_comm nccl_comm;

/* Collective over the world: every rank calls it. fig lives in the shared segment. */
ddp_status nccl_comm_create(world_rank *wr, const nccl_settings *s, nccl_figures *fig, nccl_comm **out);

/*
 * Reduce buf (count floats, host memory) over all ranks in place: the sum,
 * or with avg NCCL's ncclAvg (which, for floating types, multiplies each
 * contribution by 1/N before summing).
 */
ddp_status nccl_comm_allreduce(nccl_comm *c, float *buf, size_t count, int avg);

/*
 * Finalise and free; abort the communicator instead after a failed call, or
 * when `abort` is set (the rank is failing for another reason, and peers
 * may never finalise). NULL is fine.
 */
void nccl_comm_destroy(nccl_comm *c, int abort);

#endif
