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

#include "bench_coll.h"
#include "bench_model.h"
#include "impl.h"
#include "verify.h"
#include "jsonw.h"
#include "model.h"
#include "stats.h"
#include "world.h"
#include "cli.h"
#include "units.h"

#define BENCH_MAX_MODELS 16

static const char *const default_models[] = {"mlp:32-64-64-16", "branchy", "attn", "mlp:256-1024-1024-256",
                                              "mlp:1024-4096-4096-1024"};

static void allreduce_usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim bench allreduce [OPTIONS]\n"
            "Times the one-copy in-place allreduce over shared memory, nccl-tests style, every\n"
            "result checked, next to this machine's memcpy bandwidth measured in the same run.\n"
            "\n"
            "Options (default in brackets):\n"
            "  -n, --ranks N          rank processes, 1..%d [4]\n"
            "  -B, --bytes SIZE       one size (K/M/G suffixes)\n"
            "      --min-bytes SIZE   smallest size of a doubling sweep [4K]\n"
            "      --max-bytes SIZE   largest size, at most 1G [64M]\n"
            "  -a, --algo NAME        ordered | ring | exact [ordered]\n"
            "      --baseline NAME    also time this algorithm in every iteration, side by side\n"
            "                         (taking turns going first), and report the median ratio\n"
            "  -T, --type NAME        float | double [float]\n"
            "  -i, --iters K          timed repetitions per size; medians are reported [20]\n"
            "  -w, --warmup W         untimed repetitions first [3]\n"
            "      --json FILE        the results as JSON\n"
            "  -t, --timeout SEC      watchdog [60]\n"
            "  -h, --help             this help\n"
            "Exit status: 0 every result right, 1 a wrong element, 2 bad usage, 3 runtime fault.\n",
            WORLD_MAX_RANKS);
}

static int allreduce_error(const char *opt, const char *msg)
{
    return cli_usage_error("bench allreduce", opt, msg);
}

static int write_coll_json(const char *path, const bench_coll_config *c, const bench_coll_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"memcpy_GBps\": ");
    jsonw_number(f, r->memcpy_gbps);
    fprintf(f, ", \"results\": [");
    for (int k = 0; k < r->nrows; k++) {
        const bench_coll_row *w = &r->rows[k];
        fprintf(f, "%s\n  {\"bytes\": %zu, \"count\": %zu, \"type\": \"%s\", \"ranks\": %d, \"algo\": \"%s\", "
                   "\"time_us\": ",
                k ? "," : "", w->bytes, w->count, coll_dtype_name(c->type), c->nranks, coll_algo_name(c->algo));
        jsonw_number(f, w->time_us);
        fprintf(f, ", \"algbw_GBps\": ");
        jsonw_number(f, w->algbw);
        fprintf(f, ", \"busbw_GBps\": ");
        jsonw_number(f, w->busbw);
        fprintf(f, ", \"bound_us\": ");
        jsonw_number(f, w->bound_us);
        if (c->has_baseline) {
            fprintf(f, ", \"baseline_algo\": \"%s\", \"baseline_time_us\": ", coll_algo_name(c->baseline));
            jsonw_number(f, w->baseline_us);
            fprintf(f, ", \"ratio\": ");
            jsonw_number(f, w->ratio);
        }
        fprintf(f, ", \"wrong\": %llu}", (unsigned long long)w->wrong);
    }
    fprintf(f, "\n]}\n");
    int bad = ferror(f);
    return (fclose(f) != 0 || bad) ? -1 : 0;
}

static int bench_allreduce_main(int argc, char **argv)
{
    enum { OPT_MIN = 256, OPT_MAX, OPT_JSON, OPT_BASELINE };
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'n'},     {"bytes", required_argument, NULL, 'B'},
        {"min-bytes", required_argument, NULL, OPT_MIN}, {"max-bytes", required_argument, NULL, OPT_MAX},
        {"algo", required_argument, NULL, 'a'},      {"type", required_argument, NULL, 'T'},
        {"iters", required_argument, NULL, 'i'},     {"warmup", required_argument, NULL, 'w'},
        {"json", required_argument, NULL, OPT_JSON}, {"timeout", required_argument, NULL, 't'},
        {"baseline", required_argument, NULL, OPT_BASELINE},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    bench_coll_config c = {4, (size_t)4 << 10, (size_t)64 << 20, COLL_ORDERED, COLL_FLOAT, 20, 3, 60, 0, COLL_ORDERED};
    const char *json = NULL;
    char msg[256];
    long v;
    uint64_t u;
    opterr = 0;
    optind = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":n:B:a:T:i:w:t:h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'n':
            if (units_parse_long(optarg, 1, WORLD_MAX_RANKS, &v, msg, sizeof msg))
                return allreduce_error("--ranks", msg);
            c.nranks = (int)v;
            break;
        case 'B':
        case OPT_MIN:
        case OPT_MAX:
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return allreduce_error(ch == 'B' ? "--bytes" : ch == OPT_MIN ? "--min-bytes" : "--max-bytes", msg);
            if (ch != OPT_MAX)
                c.min_bytes = (size_t)u;
            if (ch != OPT_MIN)
                c.max_bytes = (size_t)u;
            break;
        case 'a':
            if (coll_algo_parse(optarg, &c.algo) != DDP_OK)
                return allreduce_error("--algo", ddp_error_text());
            break;
        case OPT_BASELINE:
            if (coll_algo_parse(optarg, &c.baseline) != DDP_OK)
                return allreduce_error("--baseline", ddp_error_text());
            c.has_baseline = 1;
            break;
        case 'T':
            if (strcmp(optarg, "float") == 0)
                c.type = COLL_FLOAT;
            else if (strcmp(optarg, "double") == 0)
                c.type = COLL_DOUBLE;
            else
                return allreduce_error("--type", "expected float or double");
            break;
        case 'i':
            if (units_parse_long(optarg, 1, 100000, &v, msg, sizeof msg))
                return allreduce_error("--iters", msg);
            c.iters = (int)v;
            break;
        case 'w':
            if (units_parse_long(optarg, 0, 1000, &v, msg, sizeof msg))
                return allreduce_error("--warmup", msg);
            c.warmup = (int)v;
            break;
        case OPT_JSON: json = optarg; break;
        case 't':
            if (units_parse_seconds(optarg, &c.timeout_s, msg, sizeof msg))
                return allreduce_error("--timeout", msg);
            break;
        case 'h': allreduce_usage(stdout); return DDPSIM_EXIT_PASS;
        default: return allreduce_error(NULL, cli_getopt_message(ch, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return allreduce_error(NULL, cli_getopt_message(0, argv, msg, sizeof msg));
    size_t esz = coll_dtype_size(c.type);
    if (c.min_bytes < esz || c.max_bytes < c.min_bytes || c.max_bytes > ((size_t)1 << 30))
        return allreduce_error("--bytes", "sizes must be at least one element and at most 1G, min <= max");
    if ((double)c.max_bytes * (c.nranks + 1) > 16.0 * (1 << 30))
        return allreduce_error("--max-bytes", "ranks x size exceeds 16 GiB of shared memory");

    printf("# ddpsim bench allreduce: %d ranks, algo %s, type %s; one-copy in-place allreduce over shared memory\n",
           c.nranks, coll_algo_name(c.algo), coll_dtype_name(c.type));
    printf("# medians of %d iterations after %d warm-up, the slowest rank of each; every result checked\n", c.iters,
           c.warmup);
    fflush(stdout);
    bench_coll_result r;
    ddp_status s = bench_coll_run(&c, &r);
    if (s != DDP_OK) {
        fprintf(stderr, "ddpsim bench: %s\n", ddp_error_text());
        return s == DDP_ERR_INVALID ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_FAULT;
    }
    printf("# memcpy: %.2f GB/s (min(ranks, cores) concurrent copies of 32 MiB, medians of 7, summed)\n",
           r.memcpy_gbps);
    printf("# bound_us: the bytes the allreduce reads and writes on all ranks, 2nN, at 2 x that rate (caches can beat it)\n");
    if (c.has_baseline)
        printf("# base_us: %s timed in the same iterations; ratio: the median of time / base time\n",
               coll_algo_name(c.baseline));
    printf("#%11s %11s %7s %11s %11s %11s %11s %8s", "size", "count", "type", "time_us", "algbw_GBps",
           "busbw_GBps", "bound_us", "x_bound");
    if (c.has_baseline)
        printf(" %11s %7s", "base_us", "ratio");
    printf(" %8s\n", "#wrong");
    uint64_t wrong = 0;
    double busbw = 0;
    for (int k = 0; k < r.nrows; k++) {
        const bench_coll_row *w = &r.rows[k];
        printf(" %11zu %11zu %7s %11.1f %11.3f %11.3f %11.1f %8.2f", w->bytes, w->count, coll_dtype_name(c.type),
               w->time_us, w->algbw, w->busbw, w->bound_us, w->bound_us > 0 ? w->time_us / w->bound_us : 0.0);
        if (c.has_baseline)
            printf(" %11.1f %7.2f", w->baseline_us, w->ratio);
        printf(" %8llu\n", (unsigned long long)w->wrong);
        wrong += w->wrong;
        busbw += w->busbw;
    }
    printf("# avg busbw: %.3f GB/s\n", busbw / r.nrows);
    if (c.has_baseline)
        printf("# %s / %s at %zu bytes: %.2fx (median of per-iteration ratios)\n", coll_algo_name(c.algo),
               coll_algo_name(c.baseline), r.rows[r.nrows - 1].bytes, r.rows[r.nrows - 1].ratio);
    printf("# verdict: %s (%llu wrong elements)\n", wrong ? "FAIL" : "PASS", (unsigned long long)wrong);
    if (json && write_coll_json(json, &c, &r) != 0) {
        fprintf(stderr, "ddpsim bench: cannot write --json %s\n", json);
        return DDPSIM_EXIT_USAGE;
    }
    return wrong ? DDPSIM_EXIT_MISMATCH : DDPSIM_EXIT_PASS;
}

static const char *const run_models[] = {MODEL_DEFAULT_SPEC, "branchy", "attn", "mlp:256-1024-1024-256"};

/* `ddpsim bench run`: whole verification runs, timed, with the share spent in collectives. */
static int bench_run_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'n'}, {"model", required_argument, NULL, 'm'},
        {"impl", required_argument, NULL, 'I'},  {"iters", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},        {NULL, 0, NULL, 0},
    };
    const char *models[BENCH_MAX_MODELS], *implname = "reference";
    int nmodels = 0;
    long ranks = 4, iters = 5;
    char msg[256];
    opterr = 0;
    optind = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":n:m:I:i:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (units_parse_long(optarg, 1, WORLD_MAX_RANKS, &ranks, msg, sizeof msg))
                return cli_usage_error("bench run", "--ranks", msg);
            break;
        case 'm':
            if (nmodels == BENCH_MAX_MODELS)
                return cli_usage_error("bench run", "--model", "at most 16 models per run");
            models[nmodels++] = optarg;
            break;
        case 'I': implname = optarg; break;
        case 'i':
            if (units_parse_long(optarg, 1, 1000, &iters, msg, sizeof msg))
                return cli_usage_error("bench run", "--iters", msg);
            break;
        case 'h':
            printf("Usage: ddpsim bench run [--ranks N] [--model SPEC]... [--impl NAME] [--iters K]\n"
                   "Times whole verification runs of the default schedule (reference and implementation\n"
                   "on every rank, every grab compared) for each model: time per verification step\n"
                   "(one forward + backward), steps per second, and the share of time in collectives.\n"
                   "Defaults: 4 ranks, reference, %s, branchy, attn, mlp:256-1024-1024-256; medians of 5.\n",
                   MODEL_DEFAULT_SPEC);
            return DDPSIM_EXIT_PASS;
        default: return cli_usage_error("bench run", NULL, cli_getopt_message(c, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return cli_usage_error("bench run", NULL, cli_getopt_message(0, argv, msg, sizeof msg));
    if (nmodels == 0)
        for (size_t i = 0; i < sizeof run_models / sizeof run_models[0]; i++)
            models[nmodels++] = run_models[i];
    impl_handle h;
    if (impl_open(implname, &h) != DDP_OK)
        return cli_usage_error("bench run", "--impl", ddp_error_text());
    sched s;
    if (sched_parse(SCHED_DEFAULT, &s) != DDP_OK) {
        impl_close(&h);
        return DDPSIM_EXIT_FAULT;
    }
    size_t steps = 0;
    for (size_t i = 0; i < s.nops; i++)
        steps += s.ops[i] == OP_BWD;
    printf("# ddpsim bench run: the default schedule (%zu steps of forward + backward), %ld ranks, %s under test\n",
           steps, ranks, implname);
    printf("# a step runs the reference and the implementation on every rank (rank 0 also the global-batch\n"
           "# check) and compares every grab; medians of %ld runs\n", iters);
    printf("#%-26s %11s %10s %10s %9s %12s\n", "model", "params", "run_ms", "ms/step", "steps/s", "in_collectives");
    fflush(stdout);
    int code = DDPSIM_EXIT_PASS;
    for (int k = 0; k < nmodels && code == DDPSIM_EXIT_PASS; k++) {
        verify_config vc;
        memset(&vc, 0, sizeof vc);
        vc.nranks = (int)ranks;
        vc.model_spec = models[k];
        vc.batch = 4;
        vc.seed = 1;
        vc.schedule = &s;
        vc.ddp = (ddp_config){COLL_ORDERED, DDP_DEFAULT_BUCKET_CAP, DDP_DEFAULT_FIRST_BUCKET_CAP,
                              strncmp(models[k], "branchy", 7) == 0, 0, 0.1f};
        vc.tol.kind = TOL_BITWISE;
        vc.impl = implname;
        vc.impl_ops = h.ops;
        vc.timeout_s = 600;
        double wall[1000], share[1000];
        size_t params = 0;
        for (long it = 0; it < iters; it++) {
            verify_result res;
            ddp_status st = verify_run(&vc, &res);
            if (st != DDP_OK) {
                code = cli_fault_exit(res.w, st);
                if (st == DDP_ERR_INVALID && !res.w)
                    code = DDPSIM_EXIT_USAGE;
                verify_result_free(&res);
                break;
            }
            double coll = 0;
            for (int r = 0; r < res.nranks; r++)
                coll += (double)world_outcome(res.w, r)->coll_ns * 1e-9;
            wall[it] = res.wall_s;
            share[it] = coll / res.nranks / res.wall_s;
            verify_result_free(&res);
        }
        if (code != DDPSIM_EXIT_PASS)
            break;
        model *m = NULL;
        if (model_create_layout(models[k], 4, &m) == DDP_OK)
            params = model_size(m);
        double w = stats_median(wall, (size_t)iters), sh = stats_median(share, (size_t)iters);
        printf(" %-26s %11zu %10.2f %10.3f %9.0f %11.0f%%\n", m ? model_spec(m) : models[k], params, w * 1e3,
               w * 1e3 / (double)steps, (double)steps / w, sh * 100);
        model_destroy(m);
        fflush(stdout);
    }
    printf("# in_collectives: the average rank's time inside collectives (reducing and waiting), of the run\n");
    sched_free(&s);
    impl_close(&h);
    return code;
}

static void bench_usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim bench allreduce [OPTIONS]   (see ddpsim bench allreduce --help)\n"
            "       ddpsim bench run [OPTIONS]         (see ddpsim bench run --help)\n"
            "       ddpsim bench model [OPTIONS]\n"
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
    if (strcmp(argv[1], "allreduce") == 0)
        return bench_allreduce_main(argc - 1, argv + 1);
    if (strcmp(argv[1], "run") == 0)
        return bench_run_main(argc - 1, argv + 1);
    return bench_error(NULL, "unknown benchmark (available: allreduce, model, run)");
}
