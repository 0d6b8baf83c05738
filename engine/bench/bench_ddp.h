/*
 * bench_ddp.h - an unverified data-parallel run: the baseline a verified run
 * is priced against. Every rank runs one DDP replica (the reference's, so
 * PyTorch DDP's semantics: its buckets, its 1/N scaling, its allreduces at
 * the syncing backwards) through a schedule, and nothing else: no
 * implementation under test, no comparisons, no check of the reference. A
 * grab reads nothing. It is what the same training would cost with no
 * verifier at all, on the same world and collectives.
 */
#ifndef DDPSIM_BENCH_DDP_H
#define DDPSIM_BENCH_DDP_H

#include <stdint.h>

#include "ddp_ref.h"
#include "schedule.h"
#include "status.h"

typedef struct bench_ddp_config {
    const char *model_spec;
    int nranks, batch;
    uint64_t seed;
    ddp_config ddp;
    const sched *schedule; /* even, no join: refused otherwise (DDP_ERR_INVALID) */
} bench_ddp_config;

/*
 * Run it once; *wall_s is world_run's wall time, as verify_run's wall_s is
 * for a verified run. *params_digest: the digest of the final parameters
 * (checker_hash, what a verified run's records call ref_hash), the same on
 * every rank or the run fails with DDP_ERR_MISMATCH: the baseline is shown
 * to do the training it is timed for.
 */
ddp_status bench_ddp_run(const bench_ddp_config *cfg, double *wall_s, uint64_t *params_digest);

#endif
