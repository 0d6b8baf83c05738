/*
 * bench.c - the `ddpsim bench` subcommands: parsing and the report.
 *
 *   ddpsim bench model [--model SPEC]... [--batch B] [--iters K] [--warmup W]
 */
#include "bench.h"

#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "bench_model.h"
#include "cli.h"
#include "units.h"

#define BENCH_MAX_MODELS 16

static const char *const default_models[] = {"mlp:32-64-64-16", "branchy", "attn", "mlp:256-1024-1024-256",
                                              "mlp:1024-4096-4096-1024"};

static void bench_usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim bench model [OPTIONS]\n"
            "Times forward + backward of each model and, in the same run, plain cblas_sgemm\n"
            "calls of exactly the matrix shapes that forward + backward performs.\n"
            "\n"
            "Options (default in brackets):\n"
            "  -m, --model SPEC   a model to measure; repeatable [%s, %s, %s, %s, %s]\n"
            "  -b, --batch B      rows (sequences for attn) per micro-batch, 1..65536 [64]\n"
            "  -i, --iters K      measured repetitions; medians are reported, 1..100000 [10]\n"
            "  -w, --warmup W     unmeasured repetitions first, 0..1000 [2]\n"
            "  -h, --help         this help\n"
            "Exit status: 0 measured, 2 bad usage, 3 runtime fault.\n",
            default_models[0], default_models[1], default_models[2], default_models[3], default_models[4]);
}

static int bench_error(const char *opt, const char *msg)
{
    return cli_usage_error("bench model", opt, msg);
}

static int bench_model_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"model", required_argument, NULL, 'm'}, {"batch", required_argument, NULL, 'b'},
        {"iters", required_argument, NULL, 'i'}, {"warmup", required_argument, NULL, 'w'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *models[BENCH_MAX_MODELS];
    int nmodels = 0;
    long batch = 64, iters = 10, warmup = 2;
    char msg[256];
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then also forgets a half-parsed option cluster from an earlier call */
    int c;
    while ((c = getopt_long(argc, argv, ":m:b:i:w:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (nmodels == BENCH_MAX_MODELS)
                return bench_error("--model", "at most 16 models per run");
            models[nmodels++] = optarg;
            break;
        case 'b':
            if (units_parse_long(optarg, 1, 65536, &batch, msg, sizeof msg))
                return bench_error("--batch", msg);
            break;
        case 'i':
            if (units_parse_long(optarg, 1, 100000, &iters, msg, sizeof msg))
                return bench_error("--iters", msg);
            break;
        case 'w':
            if (units_parse_long(optarg, 0, 1000, &warmup, msg, sizeof msg))
                return bench_error("--warmup", msg);
            break;
        case 'h': bench_usage(stdout); return DDPSIM_EXIT_PASS;
        default: return bench_error(NULL, cli_getopt_message(c, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return bench_error(NULL, cli_getopt_message(0, argv, msg, sizeof msg));
    if (nmodels == 0)
        for (size_t i = 0; i < sizeof default_models / sizeof default_models[0]; i++)
            models[nmodels++] = default_models[i];

    printf("# ddpsim bench model: forward+backward vs plain cblas_sgemm of the same shapes, same run\n");
    printf("# OpenBLAS %s, 1 thread; batch %ld; medians of %ld after %ld warm-up\n", openblas_get_corename(), batch,
           iters, warmup);
    printf("#%-26s %11s %12s %9s %12s %9s %7s\n", "model", "params", "fwdbwd_us", "GFLOP/s", "sgemm_us", "GFLOP/s",
           "ratio");
    fflush(stdout);
    for (int i = 0; i < nmodels; i++) {
        bench_model_result r;
        ddp_status s = bench_model_run(models[i], (int)batch, (int)warmup, (int)iters, &r);
        if (s != DDP_OK) {
            fprintf(stderr, "ddpsim bench: %s\n", ddp_error_last());
            return s == DDP_ERR_INVALID ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_FAULT;
        }
        printf(" %-26s %11zu %12.1f %9.2f %12.1f %9.2f %7.2f\n", r.spec, r.params, r.model_us, r.model_gflops,
               r.gemm_us, r.gemm_gflops, r.model_gflops / r.gemm_gflops);
        fflush(stdout);
    }
    printf("# ratio: model GFLOP/s over sgemm GFLOP/s for the same shapes (1.0: all time in sgemm)\n");
    return DDPSIM_EXIT_PASS;
}

int bench_main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_PASS;
    }
    if (strcmp(argv[1], "model") == 0)
        return bench_model_main(argc - 1, argv + 1);
    return bench_error(NULL, "unknown benchmark (available: model)");
}
