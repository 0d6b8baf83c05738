/*
 * bench_model.h - time one model's forward + backward and, in the same
 * process and run, plain cblas_sgemm calls of exactly the matrix shapes that
 * forward + backward performs: the ratio says how much of the BLAS speed the
 * model reaches. Runs inside a one-rank world, so the parent computes no
 * gradients itself. Printing is the caller's.
 */
#ifndef DDPSIM_BENCH_MODEL_H
#define DDPSIM_BENCH_MODEL_H

#include <stdint.h>

#include "status.h"

typedef struct bench_model_result {
    char spec[160];
    size_t params;
    int batch;
    double model_us;     /* median forward + backward */
    double model_gflops; /* model_flops / model_us */
    double gemm_us;      /* median of the same gemm shapes, back to back */
    double gemm_gflops;
    double flops;
    double portable_us;  /* with portable: the median under --portable-math's kernels, interleaved with model_us */
} bench_model_result;

/*
 * Measure spec with `batch` rows: `warmup` unmeasured repetitions, then
 * medians over `iters`. With portable, each repetition also runs under
 * portable math (model_set_portable_math) right after the OpenBLAS one, so
 * both see the same machine state. DDP_ERR_INVALID for a bad spec; world errors.
 */
ddp_status bench_model_run(const char *spec, int batch, int warmup, int iters, int portable, bench_model_result *out);

#endif
