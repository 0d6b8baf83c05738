/*
 * bench.c - the `ddpsim bench` subcommands (allreduce, model, run, battery): their
 * option tables, their output (tables and JSON) and exit codes; the measuring
 * is engine/bench's (bench_coll.h, bench_model.h, bench_run.h).
 */
#include "bench.h"

#include <cblas.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench_coll.h"
#include "battery.h"
#include "bench_ddp.h"
#include "bench_model.h"
#include "bench_run.h"
#include "dump.h"
#include "file.h"
#include "cli.h"
#include "clock.h"
#include "impl.h"
#include "jsonw.h"
#include "model.h"
#include "optable.h"
#include "stats.h"
#include "units.h"
#include "verify.h"
#include "world.h"

#define BENCH_MAX_MODELS OPT_LIST_MAX

static int write_coll_json(const char *path, const bench_coll_config *c, const bench_coll_result *r)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"memcpy_GBps\": ");
    jsonw_number(f, r->memcpy_gbps);
    fprintf(f, ", \"barrier_us\": ");
    jsonw_number(f, r->barrier_us);
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
        fprintf(f, ", \"sol_us\": ");
        jsonw_number(f, w->sol_us);
        fprintf(f, ", \"x_sol\": ");
        jsonw_number(f, w->x_sol);
        if (c->has_baseline) {
            fprintf(f, ", \"baseline_algo\": \"%s\", \"baseline_time_us\": ",
                    c->mpi_baseline ? "MPI_Allreduce" : coll_algo_name(c->baseline));
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

typedef struct allreduce_options {
    bench_coll_config c;
    const char *json;
    int world;      /* --world: CLI_WORLD_FORK or CLI_WORLD_MPI */
    opt_given seen;
} allreduce_options;

static void allreduce_init(void *o)
{
    *(allreduce_options *)o = (allreduce_options){
        .c = {4, (size_t)4 << 10, (size_t)64 << 20, COLL_ORDERED, COLL_FLOAT, 20, 3, 60, 0, COLL_ORDERED, 0}};
}

static int parse_bytes(void *o, const char *arg, char *msg, size_t len)
{
    allreduce_options *a = o;
    uint64_t u;
    if (units_parse_size(arg, &u, msg, len))
        return -1;
    a->c.min_bytes = a->c.max_bytes = (size_t)u;
    return 0;
}

static int parse_ar_baseline(void *o, const char *arg, char *msg, size_t len)
{
    allreduce_options *a = o;
    if (coll_algo_parse(arg, &a->c.baseline) != DDP_OK) {
        snprintf(msg, len, "%s", ddp_error_text());
        return -1;
    }
    a->c.has_baseline = 1;
    return 0;
}

extern const opt_command allreduce_command;

static int allreduce_validate(void *o, const char **which, char *msg, size_t len)
{
    allreduce_options *a = o;
    bench_coll_config *c = &a->c;
    if (cli_world_ranks(a->world, opt_was_given(&allreduce_command, a, "ranks"), &c->nranks, msg, len)) {
        *which = "ranks";
        return -1;
    }
    if (a->world == CLI_WORLD_MPI) {
        if (c->has_baseline) {
            *which = "baseline";
            snprintf(msg, len, "under --world mpi the baseline is MPI_Allreduce, timed in the same iterations");
            return -1;
        }
        c->has_baseline = c->mpi_baseline = 1;
    }
    if (c->min_bytes < coll_dtype_size(c->type) || c->max_bytes < c->min_bytes || c->max_bytes > BENCH_COLL_MAX_BYTES) {
        *which = "bytes";
        snprintf(msg, len, "sizes must run from one element up to at most 1G (got %zu..%zu)", c->min_bytes,
                 c->max_bytes);
        return -1;
    }
    if ((double)c->max_bytes * (c->nranks + 1) > 16.0 * (1 << 30)) {
        *which = "max-bytes";
        snprintf(msg, len, "ranks x size exceeds 16 GiB of shared memory");
        return -1;
    }
    return 0;
}

#define FA(field) offsetof(allreduce_options, field)
static const opt_spec allreduce_specs[] = {
    {"ranks", 'n', "N", "rank processes", OPT_INT, FA(c.nranks), 1, WORLD_MAX_RANKS, NULL, NULL},
    {"bytes", 'B', "SIZE", "one size (K/M/G suffixes)", OPT_CUSTOM, 0, 0, 0, parse_bytes, ""},
    {"min-bytes", 0, "SIZE", "smallest size of a doubling sweep", OPT_SIZE, FA(c.min_bytes), 1, BENCH_COLL_MAX_BYTES,
     NULL, NULL},
    {"max-bytes", 0, "SIZE", "largest size", OPT_SIZE, FA(c.max_bytes), 1, BENCH_COLL_MAX_BYTES, NULL, NULL},
    {"algo", 'a', "ordered|ring|exact", "summation order", OPT_CHOICE, FA(c.algo), 0, 0, NULL, NULL},
    {"baseline", 0, "NAME",
     "also time this algorithm in every iteration, side by side\n(taking turns going first), and report the median ratio",
     OPT_CUSTOM, 0, 0, 0, parse_ar_baseline, ""},
    {"type", 'T', "float|double", "element type", OPT_CHOICE, FA(c.type), 0, 0, NULL, NULL},
    {"iters", 'i', "K", "timed repetitions per size; medians are reported", OPT_INT, FA(c.iters), 1, 100000, NULL,
     NULL},
    {"warmup", 'w', "W", "untimed repetitions first", OPT_INT, FA(c.warmup), 0, 1000, NULL, NULL},
    {"json", 0, "FILE", "the results as JSON", OPT_STRING, FA(json), 0, 0, NULL, NULL},
    {"timeout", 't', "SEC", "watchdog", OPT_SECONDS, FA(c.timeout_s), 0, 1e7, NULL, NULL},
    {"world", 0, CLI_WORLD_CHOICES,
     "fork: shared memory; mpi: each process of an MPI job one rank,\nwith MPI_Allreduce timed beside in every iteration",
     OPT_CHOICE, FA(world), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

const opt_command allreduce_command = {
    .name = "bench allreduce",
    .usage = "[OPTIONS]",
    .about = "Times the one-copy in-place allreduce over shared memory, nccl-tests style, every\n"
             "result checked, next to this machine's memcpy bandwidth measured in the same run.",
    .opts = allreduce_specs,
    .opts_size = sizeof(allreduce_options),
    .init = allreduce_init,
    .validate = allreduce_validate,
    .tracks_given = 1,
    .given_offset = offsetof(allreduce_options, seen),
    .epilog = "Exit status: 0 every result right, 1 a wrong element, 2 bad usage, 3 runtime fault.\n",
};

static int bench_allreduce_main(int argc, char **argv)
{
    allreduce_options a;
    int rc = opt_parse(&allreduce_command, argc, argv, &a);
    if (rc != OPT_RUN)
        return rc;
    bench_coll_config c = a.c;
    const char *json = a.json;

    const char *base_name = c.mpi_baseline ? "MPI_Allreduce" : coll_algo_name(c.baseline);
    if (c.mpi_baseline)
        printf("# ddpsim bench allreduce: %d ranks, algo %s, type %s; over MPI, each process one rank: the bytes moved by "
               "MPI, summed in ddpsim's order\n",
               c.nranks, coll_algo_name(c.algo), coll_dtype_name(c.type));
    else
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
    if (!c.mpi_baseline)
        printf("# sol_us: the speed of light, the same traffic with no synchronization or order: min(ranks, cores) "
               "threads of rank 0 over the same slots, in the same iterations; x_sol = time / sol\n");
    printf("# barrier: %.1f us, a barrier of the %d ranks (a futex wake-up round trip: the floor of a small message)\n",
           r.barrier_us, c.nranks);
    if (c.has_baseline)
        printf("# base_us: %s timed in the same iterations; ratio: the median of time / base time\n", base_name);
    printf("#%11s %11s %7s %11s %11s %11s %11s %8s %11s %7s", "size", "count", "type", "time_us", "algbw_GBps",
           "busbw_GBps", "bound_us", "x_bound", "sol_us", "x_sol");
    if (c.has_baseline)
        printf(" %11s %7s", "base_us", "ratio");
    printf(" %8s\n", "#wrong");
    uint64_t wrong = 0;
    double busbw = 0;
    for (int k = 0; k < r.nrows; k++) {
        const bench_coll_row *w = &r.rows[k];
        printf(" %11zu %11zu %7s %11.1f %11.3f %11.3f %11.1f %8.2f", w->bytes, w->count, coll_dtype_name(c.type),
               w->time_us, w->algbw, w->busbw, w->bound_us, w->bound_us > 0 ? w->time_us / w->bound_us : 0.0);
        if (c.mpi_baseline)
            printf(" %11s %7s", "-", "-"); /* no speed-of-light kernel across processes */
        else
            printf(" %11.1f %7.2f", w->sol_us, w->x_sol);
        if (c.has_baseline)
            printf(" %11.1f %7.2f", w->baseline_us, w->ratio);
        printf(" %8llu\n", (unsigned long long)w->wrong);
        wrong += w->wrong;
        busbw += w->busbw;
    }
    printf("# avg busbw: %.3f GB/s\n", busbw / r.nrows);
    printf("# smallest message: %.1f us, %.2f x the barrier", r.rows[0].time_us,
           r.barrier_us > 0 ? r.rows[0].time_us / r.barrier_us : 0.0);
    if (c.mpi_baseline)
        printf("\n");
    else
        printf("; largest: x_sol %.2f\n", r.rows[r.nrows - 1].x_sol);
    if (c.has_baseline)
        printf("# %s / %s at %zu bytes: %.2fx (median of per-iteration ratios)\n", coll_algo_name(c.algo), base_name,
               r.rows[r.nrows - 1].bytes, r.rows[r.nrows - 1].ratio);
    printf("# verdict: %s (%llu wrong elements)\n", wrong ? "FAIL" : "PASS", (unsigned long long)wrong);
    if (json && write_coll_json(json, &c, &r) != 0) {
        fprintf(stderr, "ddpsim bench: cannot write --json %s\n", json);
        return DDPSIM_EXIT_USAGE;
    }
    return wrong ? DDPSIM_EXIT_MISMATCH : DDPSIM_EXIT_PASS;
}

/* `ddpsim bench run`: whole verification runs, timed, with the share spent in collectives. */
typedef struct run_options {
    int ranks, iters, batch;
    opt_list models;
    const char *impl;
    const char *json;
    const char *shard, *mesh; /* bench battery --shard, --mesh */
} run_options;

static void run_init(void *o)
{
    *(run_options *)o = (run_options){.ranks = 4, .iters = 5, .batch = 4, .impl = "reference"};
}

#define FR(field) offsetof(run_options, field)
static const opt_spec run_specs[] = {
    {"ranks", 'n', "N", "rank processes", OPT_INT, FR(ranks), 1, WORLD_MAX_RANKS, NULL, NULL},
    {"model", 'm', "SPEC", "a model to run; repeatable", OPT_LIST, FR(models), 0, BENCH_MAX_MODELS, NULL,
     MODEL_DEFAULT_SPEC ", branchy, attn, mlp:256-1024-1024-256"},
    {"impl", 'I', "NAME|PATH", "the implementation under test", OPT_STRING, FR(impl), 0, 0, NULL, NULL},
    {"iters", 'i', "K", "runs per model; medians are reported", OPT_INT, FR(iters), 1, 1000, NULL, NULL},
    {"batch", 'b', "B", "samples per rank per micro-step", OPT_INT, FR(batch), 1, 4096, NULL, NULL},
    {"json", 0, "FILE", "also write every model's figures as JSON", OPT_STRING, FR(json), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const opt_command run_command = {
    .name = "bench run",
    .usage = "[OPTIONS]",
    .about = "Times whole verification runs of the default schedule (reference and implementation\n"
             "on every rank, every grab compared) for each model: time per verification step\n"
             "(one forward + backward), steps per second, and the share of time in collectives;\n"
             "against a plain forward + backward on one rank and an unverified DDP run of the\n"
             "same schedule.",
    .opts = run_specs,
    .opts_size = sizeof(run_options),
    .init = run_init,
    .epilog = "Exit status: 0 measured, 2 bad usage, 3 runtime fault.\n",
};

/* `ddpsim bench run --json FILE`: every model's figures, as the table has them. */
static ddp_status write_run_json(const char *path, const run_options *ro, const char *const *models, int nmodels,
                                 const bench_run_result *res, const double *plain_ms, double share_cores)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ddp_error(DDP_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    fprintf(f, "{\"ranks\": %d, \"batch\": %d, \"iters\": %d, \"impl\": ", ro->ranks, ro->batch, ro->iters);
    jsonw_string(f, ro->impl);
    fprintf(f, ", \"schedule\": ");
    jsonw_string(f, SCHED_DEFAULT);
    fprintf(f, ", \"share_cores\": ");
    jsonw_number(f, share_cores);
    fprintf(f, ", \"models\": [");
    for (int k = 0; k < nmodels; k++) {
        const bench_run_result *r = &res[k];
        fprintf(f, "%s\n  {\"model\": ", k ? "," : "");
        jsonw_string(f, models[k]);
        fprintf(f, ", \"params\": %zu, \"steps\": %zu", r->params, r->steps);
        const struct {
            const char *name;
            double value;
        } figs[] = {{"run_ms", r->run_s * 1e3}, {"step_ms", r->step_ms},        {"ddp_ms", r->ddp_ms},
                    {"plain_ms", plain_ms[k]},  {"in_collectives", r->coll_share}, {"comm_hidden", r->hidden},
                    {"cpu_max", r->cpu_spread}};
        for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
            fprintf(f, ", \"%s\": ", figs[i].name);
            jsonw_number(f, figs[i].value);
        }
        fprintf(f, ", \"costs\": {");
        for (int c = 0; c < COST_N; c++) {
            fprintf(f, "%s\"%s\": ", c ? ", " : "", verify_cost_name((verify_cost)c));
            jsonw_number(f, r->cost_ms[c]);
        }
        fprintf(f, "}");
        /* A margin lost in the noise has no ratio: null, as the table's "-". */
        fprintf(f, ", \"x_verify\": ");
        if (r->x_verify > 0)
            jsonw_number(f, r->x_verify);
        else
            fprintf(f, "null");
        fprintf(f, ", \"x_ddp\": ");
        if (r->ddp_ms > 0 && plain_ms[k] > 0)
            jsonw_number(f, r->ddp_ms / plain_ms[k] / share_cores);
        else
            fprintf(f, "null");
        fprintf(f, "}");
    }
    fprintf(f, "\n]}\n");
    return file_close_written(f, path);
}

static int bench_run_main(int argc, char **argv)
{
    static const char *const run_models[] = {MODEL_DEFAULT_SPEC, "branchy", "attn", "mlp:256-1024-1024-256"};
    run_options ro;
    int rc = opt_parse(&run_command, argc, argv, &ro);
    if (rc != OPT_RUN)
        return rc;
    const char *const *models = ro.models.n ? ro.models.items : run_models;
    int nmodels = ro.models.n ? ro.models.n : (int)(sizeof run_models / sizeof run_models[0]);
    if (ro.json && dump_check_parent(ro.json) != DDP_OK)
        return cli_usage_error(run_command.name, "--json", ddp_error_text());
    const char *implname = ro.impl;
    long ranks = ro.ranks, iters = ro.iters;
    impl_handle h;
    if (impl_open(implname, &h) != DDP_OK)
        return cli_usage_error(run_command.name, "--impl", ddp_error_text());
    bench_run_result res[BENCH_MAX_MODELS];
    double plain_ms[BENCH_MAX_MODELS];
    size_t steps = bench_run_default_steps();
    printf("# ddpsim bench run: the default schedule (%zu micro-steps of forward + backward), %ld ranks, batch %d, "
           "%s under test\n", steps, ranks, ro.batch, implname);
    printf("# a micro-step runs the reference and the implementation on every rank (one forward and backward serve\n"
           "# both while their parameters are equal) and compares every grab; medians of %ld runs\n", iters);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    double share_cores = (double)ranks / (double)(ranks < cores ? ranks : cores);
    printf("# step_ms: a verified micro-step at the margin (the schedule 3 times over against once: %zu more\n"
           "# micro-steps); run_ms/step: the whole run of the default schedule over its micro-steps\n"
           "# plain_ms: the model's forward + backward alone on one rank, same batch (ddpsim bench model);\n"
           "# x_plain: step_ms over it. %ld ranks share %ld core%s here, so a micro-step with no verification\n"
           "# at all would show x_plain = %.2f (ranks / min(ranks, cores)); x_core divides that out\n",
           2 * steps, ranks, cores, cores == 1 ? "" : "s", share_cores);
    printf("# ddp_ms: an unverified DDP micro-step at the margin, the same way: the reference's replica alone on\n"
           "# every rank, nothing compared or checked (what the training costs with no verifier); x_ddp: ddp_ms\n"
           "# over plain_ms with the cores divided out, the floor under x_core (a verified micro-step runs the\n"
           "# implementation's DDP step too); x_verify: step_ms over ddp_ms, the price of verifying it\n");
    printf("#%-26s %11s %10s %11s %9s %9s %14s %11s %9s %8s %7s %9s %9s %7s %8s\n", "model", "params", "run_ms",
           "run_ms/step", "step_ms", "steps/s", "in_collectives", "comm_hidden", "plain_ms", "x_plain", "x_core",
           "cpu_max", "ddp_ms", "x_ddp", "x_verify");
    fflush(stdout);
    int code = DDPSIM_EXIT_PASS;
    int k;
    for (k = 0; k < nmodels && code == DDPSIM_EXIT_PASS; k++) {
        verify_config vc;
        verify_config_defaults(&vc);
        vc.nranks = (int)ranks;
        vc.model_spec = models[k];
        vc.batch = ro.batch;
        vc.ddp.find_unused = strncmp(models[k], "branchy", 7) == 0;
        vc.impl = implname;
        vc.impl_ops = h.ops;
        vc.timeout_s = 600;
        vc.rank_cpu = 1;
        verify_result failed;
        ddp_status st = bench_run_measure(&vc, (int)iters, &res[k], &failed);
        if (st != DDP_OK) {
            code = cli_fault_exit(failed.w, st);
            if (st == DDP_ERR_INVALID && !failed.w)
                code = DDPSIM_EXIT_USAGE;
            verify_result_free(&failed);
            break;
        }
        const bench_run_result *r = &res[k];
        bench_model_result plain;
        plain_ms[k] =
            bench_model_run(models[k], ro.batch, 1, (int)iters, 0, &plain) == DDP_OK ? plain.model_us * 1e-3 : 0;
        double xp = plain_ms[k] > 0 ? r->step_ms / plain_ms[k] : 0;
        /* A margin lost in the noise (a model too small for its runs to differ) has no ratio: "-". */
        char xd[16] = "-", xv[16] = "-";
        if (r->ddp_ms > 0 && plain_ms[k] > 0)
            snprintf(xd, sizeof xd, "%.2f", r->ddp_ms / plain_ms[k] / share_cores);
        if (r->x_verify > 0)
            snprintf(xv, sizeof xv, "%.2f", r->x_verify);
        printf(" %-26s %11zu %10.2f %11.3f %9.3f %9.0f %13.0f%% %10.0f%% %9.3f %8.2f %7.2f %8.2fx %9.3f %7s %8s\n",
               models[k], r->params, r->run_s * 1e3, r->run_s * 1e3 / (double)r->steps, r->step_ms,
               r->step_ms > 0 ? 1e3 / r->step_ms : 0, r->coll_share * 100, r->hidden * 100, plain_ms[k], xp,
               xp / share_cores, r->cpu_spread, r->ddp_ms, xd, xv);
        printf("#   of step_ms, a rank's wall time in:");
        for (int c = 0; c < COST_N; c++)
            if (c != COST_OUTPUT && c != COST_BOUND)
                printf(" %s %.3f", verify_cost_name((verify_cost)c), r->cost_ms[c]);
        printf("\n");
        fflush(stdout);
    }
    printf("# of step_ms, at the margin, the average rank's wall time (waiting in the checks' collectives included)\n"
           "# in: impl_ms the implementation's callbacks (its own DDP: a second replica's reductions), shared_test_ms\n"
           "# the test before each forward that one forward serves both sides, ref_sums_ms the exact sums of the\n"
           "# reference's own check (each backward), ref_check_ms their reduction and comparison (each synced grab),\n"
           "# agreement_ms the implementation's ranks' digests (each sync), compare_ms the grabs' and parameters'\n"
           "# comparisons; the rest of step_ms is the two sides' accumulation and the reference's own DDP\n");
    printf("# in_collectives: the average rank's time inside collectives (reducing and waiting), of the run\n");
    printf("# comm_hidden: of the implementation's collective time during backwards, the share spent while the\n"
           "# backward was still computing (overlapped) rather than waited for in backward_end\n");
    printf("# cpu_max: the busiest rank's CPU time outside collectives over the schedule's ops, over the median rank's\n"
           "# (1.00: no straggler)\n");
    impl_close(&h);
    if (code == DDPSIM_EXIT_PASS && ro.json &&
        write_run_json(ro.json, &ro, models, nmodels, res, plain_ms, share_cores) != DDP_OK) {
        fprintf(stderr, "ddpsim bench run: --json: %s\n", ddp_error_text());
        return DDPSIM_EXIT_USAGE;
    }
    return code;
}

typedef struct model_options {
    int batch, iters, warmup, portable;
    opt_list models;
} model_options;

static void bench_model_init(void *o)
{
    *(model_options *)o = (model_options){.batch = 64, .iters = 10, .warmup = 2};
}

#define FM(field) offsetof(model_options, field)
static const opt_spec model_specs[] = {
    {"model", 'm', "SPEC", "a model to measure; repeatable", OPT_LIST, FM(models), 0, BENCH_MAX_MODELS, NULL,
     "mlp:32-64-64-16, branchy, attn, mlp:256-1024-1024-256, mlp:1024-4096-4096-1024"},
    {"batch", 'b', "B", "rows (sequences for attn) per micro-batch", OPT_INT, FM(batch), 1, 65536, NULL, NULL},
    {"iters", 'i', "K", "measured repetitions; medians are reported", OPT_INT, FM(iters), 1, 100000, NULL, NULL},
    {"warmup", 'w', "W", "unmeasured repetitions first", OPT_INT, FM(warmup), 0, 1000, NULL, NULL},
    {"portable-math", 0, NULL, "also time each repetition under --portable-math's kernels, right after\nthe "
     "OpenBLAS one: its median and its cost over OpenBLAS", OPT_FLAG, FM(portable), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const opt_command model_command = {
    .name = "bench model",
    .usage = "[OPTIONS]",
    .about = "Times forward + backward of each model and, in the same run, plain cblas_sgemm\n"
             "calls of exactly the matrix shapes that forward + backward performs.",
    .opts = model_specs,
    .opts_size = sizeof(model_options),
    .init = bench_model_init,
    .epilog = "Exit status: 0 measured, 2 bad usage, 3 runtime fault.\n",
};

static int bench_model_main(int argc, char **argv)
{
    static const char *const default_models[] = {"mlp:32-64-64-16", "branchy", "attn", "mlp:256-1024-1024-256",
                                                  "mlp:1024-4096-4096-1024"};
    model_options mo;
    int rc = opt_parse(&model_command, argc, argv, &mo);
    if (rc != OPT_RUN)
        return rc;
    const char *const *models = mo.models.n ? mo.models.items : default_models;
    int nmodels = mo.models.n ? mo.models.n : (int)(sizeof default_models / sizeof default_models[0]);
    long batch = mo.batch, iters = mo.iters, warmup = mo.warmup;

    printf("# ddpsim bench model: forward+backward vs plain cblas_sgemm of the same shapes, same run\n");
    printf("# OpenBLAS %s, 1 thread; batch %ld; medians of %ld after %ld warm-up\n", openblas_get_corename(), batch,
           iters, warmup);
    printf("#%-26s %11s %12s %9s %12s %9s %7s", "model", "params", "fwdbwd_us", "GFLOP/s", "sgemm_us", "GFLOP/s",
           "ratio");
    printf(mo.portable ? " %12s %10s\n" : "\n", "portable_us", "x_portable");
    fflush(stdout);
    for (int i = 0; i < nmodels; i++) {
        bench_model_result r;
        ddp_status s = bench_model_run(models[i], (int)batch, (int)warmup, (int)iters, mo.portable, &r);
        if (s != DDP_OK) {
            fprintf(stderr, "ddpsim bench: %s\n", ddp_error_last());
            return s == DDP_ERR_INVALID ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_FAULT;
        }
        printf(" %-26s %11zu %12.1f %9.2f %12.1f %9.2f %7.2f", r.spec, r.params, r.model_us, r.model_gflops,
               r.gemm_us, r.gemm_gflops, r.model_gflops / r.gemm_gflops);
        if (mo.portable)
            printf(" %12.1f %10.2f", r.portable_us, r.portable_us / r.model_us);
        printf("\n");
        fflush(stdout);
    }
    printf("# ratio: model GFLOP/s over sgemm GFLOP/s for the same shapes (1.0: all time in sgemm)\n");
    if (mo.portable)
        printf("# x_portable: the portable kernels' median over OpenBLAS's, the same repetitions interleaved\n");
    return DDPSIM_EXIT_PASS;
}

/* `ddpsim bench battery`: the default run's scenario battery, timed against its classic scenario alone. */
static void battery_init(void *o)
{
    *(run_options *)o = (run_options){.ranks = 4, .iters = 11, .impl = "reference"};
}

static const opt_spec battery_specs[] = {
    {"ranks", 'n', "N", "rank processes", OPT_INT, FR(ranks), 1, WORLD_MAX_RANKS, NULL, NULL},
    {"impl", 'I', "NAME|PATH", "the implementation under test", OPT_STRING, FR(impl), 0, 0, NULL, NULL},
    {"iters", 'i', "K", "repetitions; medians are reported", OPT_INT, FR(iters), 1, 1000, NULL, NULL},
    {"shard", 0, "MODE", "also the sharded battery of MODE (zero1 | zero2 | fsdp | hsdp)\nwith its built-in, in the "
     "same rounds: its median against the plain one's", OPT_STRING, FR(shard), 0, 0, NULL, NULL},
    {"mesh", 0, "RxS", "the sharded battery's mesh (default: the mode's)", OPT_STRING, FR(mesh), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const opt_command battery_command = {
    .name = "bench battery",
    .usage = "[OPTIONS]",
    .about = "Times the scenario battery (what `ddpsim --ranks N` runs) and, as the baseline in\n"
             "the same process, its classic scenario alone (the former default run): medians of\n"
             "both, their ratio, and each scenario's median. The budget is 1 s at 4 ranks.",
    .opts = battery_specs,
    .opts_size = sizeof(run_options),
    .init = battery_init,
    .epilog = "Exit status: 0 measured, 2 bad usage, 3 runtime fault.\n",
};

static int bench_battery_main(int argc, char **argv)
{
    run_options ro;
    int rc = opt_parse(&battery_command, argc, argv, &ro);
    if (rc != OPT_RUN)
        return rc;
    impl_handle h;
    if (impl_open(ro.impl, &h) != DDP_OK)
        return cli_usage_error(battery_command.name, "--impl", ddp_error_text());
    verify_config vc;
    verify_config_defaults(&vc);
    vc.nranks = ro.ranks;
    vc.impl = ro.impl;
    vc.impl_ops = h.ops;
    vc.timeout_s = 600;
    vc.rank_cpu = 1;
    verify_config sc = vc; /* --shard: the mode's built-in on its battery */
    if (ro.shard) {
        /* the parsers' messages start with the option's name, which cli_usage_error puts first itself */
        if (shard_mode_parse(ro.shard, &sc.shard) != DDP_OK)
            return cli_usage_error(battery_command.name, "--shard", ddp_error_text() + strlen("--shard: "));
        sc.mesh = shard_default_mesh(sc.shard, ro.ranks);
        if (ro.mesh && mesh_parse(ro.mesh, ro.ranks, "--mesh", &sc.mesh) != DDP_OK)
            return cli_usage_error(battery_command.name, "--mesh", ddp_error_text() + strlen("--mesh: "));
        sc.impl_ops = impl_sharded_default((int)sc.shard);
        sc.impl = sc.impl_ops->name;
    } else if (ro.mesh) {
        return cli_usage_error(battery_command.name, "--mesh", "goes with --shard");
    }
    printf("# ddpsim bench battery: %d scenarios at %d ranks, %s under test; medians of %d repetitions\n",
           battery_count(), ro.ranks, ro.impl, ro.iters);
    if (ro.shard)
        printf("# ... and the sharded battery of --shard %s (%d scenarios, %s on a %dx%d mesh) in the same rounds\n",
               shard_mode_name(sc.shard), battery_count_for(sc.shard), sc.impl, sc.mesh.replicas, sc.mesh.shards);
    fflush(stdout);
    bench_battery_result r;
    ddp_status st = bench_battery_measure(&vc, ro.shard ? &sc : NULL, ro.iters, &r);
    impl_close(&h);
    if (st != DDP_OK) {
        fprintf(stderr, "ddpsim: bench battery: %s\n", r.failed[0] ? r.failed : ddp_error_text());
        bench_battery_free(&r);
        return DDPSIM_EXIT_FAULT;
    }
    printf("#%-16s %10s\n", "scenario", "median_ms");
    for (int k = 0; k < r.nscenarios; k++)
        printf(" %-16s %10.2f\n", battery_at(k)->name, r.scenario_s[k] * 1e3);
    printf("# battery: median %.3f s (budget 1 s at 4 ranks); classic alone: median %.3f s; ratio %.1f\n", r.total_s,
           r.classic_s, r.total_s / r.classic_s);
    if (ro.shard) {
        for (int k = 0; k < r.sharded_n; k++)
            printf(" %-16s %10.2f\n", battery_at_for(sc.shard, k)->name, r.sharded_scenario_s[k] * 1e3);
        printf("# sharded battery (--shard %s): median %.3f s; x_sharded = %.2f (its median over the plain battery's; "
               "target <= 2)\n",
               shard_mode_name(sc.shard), r.sharded_total_s, r.total_s > 0 ? r.sharded_total_s / r.total_s : 0);
    }
    /* Is any rank a straggler? Each rank's CPU time outside collectives over the battery's ops (its median over
     * the repetitions), against the median rank's; and the same of the setups, which every collective's wait
     * does not see: a rank that sets up late only starts late. */
    int most = 0, most_setup = 0;
    double ops[WORLD_MAX_RANKS], setup[WORLD_MAX_RANKS];
    for (int k = 0; k < r.nranks; k++) {
        ops[k] = r.rank_ops_s[k];
        setup[k] = r.rank_setup_s[k];
        most = ops[k] > ops[most] ? k : most;
        most_setup = setup[k] > setup[most_setup] ? k : most_setup;
    }
    double most_s = ops[most], typical = stats_median(ops, (size_t)r.nranks);
    double most_setup_s = setup[most_setup], typical_setup = stats_median(setup, (size_t)r.nranks);
    printf("# ranks' CPU time outside collectives over the battery's ops: median rank %.1f ms, most rank %d %.1f ms "
           "(%.2fx the median); %.1f ms of wall time per rank\n",
           typical * 1e3, most, most_s * 1e3, typical > 0 ? most_s / typical : 0, r.total_s * 1e3 / r.nranks);
    printf("# ... in their setups (both replicas built before the first op): median rank %.1f ms, most rank %d "
           "%.1f ms (%.2fx)\n",
           typical_setup * 1e3, most_setup, most_setup_s * 1e3, typical_setup > 0 ? most_setup_s / typical_setup : 0);
    bench_battery_free(&r);
    return DDPSIM_EXIT_PASS;
}

static const opt_subcommand benchmarks[] = {
    {"allreduce", "the in-place allreduce over shared memory against memcpy's bandwidth", bench_allreduce_main},
    {"model", "forward + backward of each model against plain sgemm of the same shapes", bench_model_main},
    {"run", "whole verification runs of the classic schedule", bench_run_main},
    {"battery", "the scenario battery of the default run, against its classic scenario alone", bench_battery_main},
    {NULL, NULL, NULL},
};

int bench_main(int argc, char **argv)
{
    return opt_dispatch("bench", benchmarks, argc, argv, 0);
}
