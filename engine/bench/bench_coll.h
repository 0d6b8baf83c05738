/*
 * bench_coll.h - the allreduce benchmark (`ddpsim bench allreduce`): the
 * one-copy in-place allreduce over shared memory, timed per size (medians
 * after warm-up, the slowest rank of each iteration), every result checked
 * against exactly known sums, next to this machine's memcpy bandwidth
 * measured in the same run and the memory-traffic bound it implies.
 * In an MPI world (world_mpi_start), the same allreduce over MPI, with the
 * MPI library's own MPI_Allreduce as the baseline in the same iterations;
 * no speed-of-light kernel there (it reads every rank's slot).
 */
#ifndef DDPSIM_BENCH_COLL_H
#define DDPSIM_BENCH_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "coll.h"
#include "status.h"

#define BENCH_COLL_MAX_ROWS 40
#define BENCH_COLL_MAX_BYTES ((size_t)1 << 30)

typedef struct bench_coll_config {
    int nranks;
    size_t min_bytes, max_bytes; /* sizes min, 2 min, 4 min, ... up to max */
    coll_algo algo;
    coll_dtype type;
    int iters, warmup;
    double timeout_s;
    int has_baseline;      /* also time `baseline` in every iteration, side by side, and report the ratio */
    coll_algo baseline;
    int mpi_baseline;      /* the baseline is MPI_Allreduce (coll_allreduce_native): an MPI world only */
} bench_coll_config;

typedef struct bench_coll_row {
    size_t bytes, count;
    double time_us;  /* median over iterations of the slowest rank */
    double algbw, busbw; /* GB/s: bytes / time, and algbw * 2 (N - 1) / N as nccl-tests */
    double bound_us; /* memory-traffic bound (see bench_coll.c) */
    uint64_t wrong;  /* wrong elements in the checked results, all ranks (the baseline's too) */
    double baseline_us; /* with a baseline: its median time ... */
    double ratio;       /* ... and the median over iterations of time / baseline time */
    double sol_us;      /* median time of the speed-of-light kernel on the same slots (bench_coll.c) */
    double x_sol;       /* time_us / sol_us */
} bench_coll_row;

typedef struct bench_coll_result {
    int nrows;
    bench_coll_row rows[BENCH_COLL_MAX_ROWS];
    double memcpy_gbps; /* bytes copied per second by min(N, cores) concurrent memcpys, in GB/s */
    double barrier_us;  /* median barrier of the N ranks: a futex wake-up round trip, the small-message floor */
} bench_coll_result;

/* DDP_ERR_INVALID for bad sizes; world errors for faults. */
ddp_status bench_coll_run(const bench_coll_config *cfg, bench_coll_result *out);

/* Bytes the in-place allreduce reads and writes over all ranks for n bytes of data: 2 n N. */
double bench_coll_traffic(size_t bytes, int nranks);

#endif
