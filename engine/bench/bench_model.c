/*
 * bench_model.c - the model benchmark (bench_model.h).
 */
#include "bench_model.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "clock.h"
#include "stats.h"
#include "world.h"

#define MAX_GEMMS 64

typedef struct bench_args {
    const char *spec;
    int batch, warmup, iters, portable;
} bench_args;

/* The gemms with beta = 1 (accumulating, as backward does) on buffers of the right sizes. */
static double time_gemms(const model_gemm *g, int n, float **a, float **b, float **c)
{
    double t0 = clock_now_us();
    for (int i = 0; i < n; i++) {
        int lda = g[i].transA ? g[i].M : g[i].K, ldb = g[i].transB ? g[i].K : g[i].N;
        cblas_sgemm(CblasRowMajor, g[i].transA ? CblasTrans : CblasNoTrans, g[i].transB ? CblasTrans : CblasNoTrans,
                    g[i].M, g[i].N, g[i].K, 1.0f, a[i], lda, b[i], ldb, 1.0f, c[i], g[i].N);
    }
    return clock_now_us() - t0;
}

static ddp_status bench_rank(world_rank *wr, void *arg)
{
    const bench_args *ba = arg;
    bench_model_result *out = world_rank_user_area(wr);
    model *m = NULL;
    model_runtime_init();
    DDP_CHECK(model_create(ba->spec, ba->batch, &m));
    model_batch b;
    ddp_status s = model_batch_alloc(m, &b);
    double *t = calloc((size_t)ba->iters, sizeof *t), *tp = calloc((size_t)ba->iters, sizeof *tp);
    model_gemm g[MAX_GEMMS];
    int ng = model_gemms(m, g, MAX_GEMMS);
    float *A[MAX_GEMMS] = {0}, *Bm[MAX_GEMMS] = {0}, *Cm[MAX_GEMMS] = {0};
    if (s == DDP_OK && (!t || !tp || ng > MAX_GEMMS))
        s = ddp_error(DDP_ERR_NOMEM, "bench buffers");
    for (int i = 0; s == DDP_OK && i < ng; i++) {
        A[i] = calloc((size_t)g[i].M * (size_t)g[i].K, sizeof(float));
        Bm[i] = calloc((size_t)g[i].K * (size_t)g[i].N, sizeof(float));
        Cm[i] = calloc((size_t)g[i].M * (size_t)g[i].N, sizeof(float));
        if (!A[i] || !Bm[i] || !Cm[i])
            s = ddp_error(DDP_ERR_NOMEM, "bench gemm buffers");
    }
    if (s == DDP_OK) {
        model_init(m, 1, 0);
        model_batch_fill(m, &b, 1, 0, 0);
        b.branch = 3; /* branchy: both heads, the work model_flops counts */
        for (int it = -ba->warmup; it < ba->iters && s == DDP_OK; it++) {
            world_set_op(wr, it, "bench model");
            double t0 = clock_now_us();
            s = model_forward(m, &b, NULL);
            model_backward(m);
            if (it >= 0)
                t[it] = clock_now_us() - t0;
            if (ba->portable && s == DDP_OK) {
                model_set_portable_math(1);
                t0 = clock_now_us();
                s = model_forward(m, &b, NULL);
                model_backward(m);
                if (it >= 0)
                    tp[it] = clock_now_us() - t0;
                model_set_portable_math(0);
            }
        }
    }
    if (s == DDP_OK) {
        snprintf(out->spec, sizeof out->spec, "%s", model_spec(m));
        out->params = model_size(m);
        out->batch = ba->batch;
        out->flops = model_flops(m);
        out->model_us = stats_median(t, (size_t)ba->iters);
        out->portable_us = ba->portable ? stats_median(tp, (size_t)ba->iters) : 0;
        for (int it = -ba->warmup; it < ba->iters; it++) {
            world_set_op(wr, it, "bench sgemm");
            double us = time_gemms(g, ng, A, Bm, Cm);
            if (it >= 0)
                t[it] = us;
        }
        out->gemm_us = stats_median(t, (size_t)ba->iters);
        double gemm_flops = 0;
        for (int i = 0; i < ng; i++)
            gemm_flops += 2.0 * g[i].M * g[i].N * (double)g[i].K;
        out->model_gflops = out->flops / out->model_us * 1e-3;
        out->gemm_gflops = gemm_flops / out->gemm_us * 1e-3;
    }
    for (int i = 0; i < ng && i < MAX_GEMMS; i++)
        free(A[i]), free(Bm[i]), free(Cm[i]);
    free(t);
    free(tp);
    model_batch_free(&b);
    model_destroy(m);
    return s;
}

ddp_status bench_model_run(const char *spec, int batch, int warmup, int iters, int portable, bench_model_result *out)
{
    if (iters < 1 || warmup < 0)
        return ddp_error(DDP_ERR_INVALID, "bench: %d iterations, %d warm-up", iters, warmup);
    /* Validate the spec here too, so a typo is a usage error rather than a failed rank. */
    model *probe = NULL;
    DDP_CHECK(model_create(spec, batch, &probe));
    model_destroy(probe);
    world_config cfg = {.nranks = 1, .timeout_s = 600, .user_bytes = sizeof *out};
    world *w = NULL;
    DDP_CHECK(world_create(&cfg, &w));
    bench_args ba = {spec, batch, warmup, iters, portable};
    ddp_status s = world_run(w, bench_rank, &ba);
    if (s == DDP_OK)
        memcpy(out, world_user_area(w), sizeof *out);
    else if (world_outcome(w, 0)->error[0])
        s = ddp_error(s, "bench %s: %s", spec, world_outcome(w, 0)->error);
    world_destroy(w);
    return s;
}
