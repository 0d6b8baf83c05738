/*
 * options.c - getopt_long parsing and validation of a verification run.
 */
#include "options.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gpu_probe.h"
#include "hash.h"
#include "model.h"
#include "units.h"
#include "world.h"

#define DEFAULT_RANKS 2
#define DEFAULT_BATCH 4
#define DEFAULT_TIMEOUT_S 60.0
#define DEFAULT_LR 0.1
#define MAX_SCHEDULE_FILE ((size_t)1 << 20)

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim [OPTIONS]\n"
            "       ddpsim selfcheck [OPTIONS]   the collectives self-check\n"
            "       ddpsim bench allreduce|model|run [OPTIONS]   benchmarks (see ddpsim bench)\n"
            "\n"
            "Runs N rank processes over shared memory. Each trains the model through the\n"
            "schedule with a reference DDP (PyTorch's semantics) and with the implementation\n"
            "under test, and at every grab compares their gradients on every rank.\n"
            "\n"
            "Options (default in brackets):\n"
            "  -n, --ranks N            rank processes, 1..%d [%d]\n"
            "  -I, --impl NAME|PATH     implementation under test: a built-in (see --list) or a\n"
            "                           plugin's path, e.g. ./libmine.so [reference]\n"
            "      --list               list the built-in implementations and the bug catalogue\n"
            "      --mutants            run every catalogued bug and report which were caught\n"
            "  -m, --model SPEC         mlp:IN-H-...-OUT | branchy[:IN-H-OUT] | attn[:V-T-C]\n"
            "                           [%s]\n"
            "  -s, --schedule SPEC      ops: fwd bwd grab zero step enter exit, nosync{...},\n"
            "                           N*(...); or @FILE to read it from a file\n"
            "                           [%s]\n"
            "  -b, --batch B            rows per micro-batch (sequences for attn), 1..65536 [%d]\n"
            "  -S, --seed S             seed of init, data and every random choice [1]\n"
            "  -T, --tolerance TOL      bitwise | ulp:N | ulp-of-max:N | rtol=X,atol=Y\n"
            "                           [bitwise; ulp-of-max:%d with --backend nccl]\n"
            "  -a, --algo NAME          reduction order: ordered | ring | exact [ordered]\n"
            "      --backend cpu|nccl   where the implementation under test reduces: the CPU\n"
            "                           collectives or NCCL on GPU rank %% ngpus (the reference\n"
            "                           always reduces on the CPU) [cpu]\n"
            "      --nccl-op sum|avg    NCCL: 1/N then ncclSum, or unscaled buckets and ncclAvg\n"
            "                           (reference and bucketed only) [sum]\n"
            "      --bucket-cap SIZE    DDP bucket size limit in bytes, K/M/G [25M]\n"
            "      --first-bucket-cap SIZE  limit of the first-filled bucket [1M]\n"
            "      --find-unused        find_unused_parameters=True (needed by branchy)\n"
            "      --bucket-view        gradient_as_bucket_view=True: divide by N in place\n"
            "      --lr X               SGD learning rate of step [%g]\n"
            "      --inputs DIR         initial parameters and batches from a dump directory\n"
            "                           (DIR/init, DIR/rank<r>/batch<b>.{x,y}.npy)\n"
            "      --dump DIR           write parameters, batches and every grab's gradients\n"
            "      --json FILE          write the report as JSON\n"
            "      --chaos C|A..B       shake timing with chaos seed C (delays before collectives, a\n"
            "                           straggler, ready-event and bucket orders); a range repeats\n"
            "      --repeat K           K runs with consecutive chaos seeds (from --chaos or 1)\n"
            "      --fail-fast          stop repeating at the first failing seed\n"
            "      --trace FILE         write a JSON-lines event log (ready events, arrivals)\n"
            "      --replay FILE        force the ready-event and arrival order a trace recorded\n"
            "      --fault SPEC         inject a fault, repeatable: crash:rank=R,op=K  abort:rank=R,op=K\n"
            "                           hang:rank=R,op=K  slow:rank=R,ms=M  flip:rank=R,op=K\n"
            "  -t, --timeout SEC        watchdog: stop when no rank progresses for SEC s, 0 off [%.0f]\n"
            "  -q, --quiet              print only the verdict (and the first divergence)\n"
            "  -h, --help               this help\n"
            "  -V, --version            version and build configuration\n"
            "\n"
            "Exit status:\n"
            "  0  every grab matched on every rank\n"
            "  1  a divergence (or the reference failed its own sanity checks)\n"
            "  2  bad usage or input\n"
            "  3  runtime fault: a rank died, the watchdog fired, a backend failed\n"
            "  130/143  interrupted by SIGINT/SIGTERM (all ranks are stopped first)\n",
            WORLD_MAX_RANKS, DEFAULT_RANKS, MODEL_DEFAULT_SPEC, SCHED_DEFAULT, DEFAULT_BATCH, NCCL_DEFAULT_ULPS, DEFAULT_LR,
            DEFAULT_TIMEOUT_S);
}

#define ERR(opt, msg) cli_usage_error(NULL, (opt), (msg))

static void record_command(ddpsim_options *opt, int argc, char **argv)
{
    size_t n = 0;
    opt->command[0] = '\0';
    for (int i = 0; i < argc && n + 4 < sizeof opt->command; i++) {
        const char *a = i == 0 ? "ddpsim" : argv[i];
        int plain = *a != '\0';
        for (const char *p = a; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=:./,@+", *p))
                plain = 0;
        int w = snprintf(opt->command + n, sizeof opt->command - n, plain ? "%s%s" : "%s'%s'", i ? " " : "", a);
        if (w < 0)
            break;
        n += (size_t)w;
    }
    if (n >= sizeof opt->command)
        strcpy(opt->command + sizeof opt->command - 5, " ...");
}

/* "C" or "A..B" (A <= B, at most a million seeds). */
static int parse_chaos(const char *text, ddpsim_options *opt, char *msg, size_t len)
{
    char first[32];
    const char *dots = strstr(text, "..");
    if (!dots) {
        if (units_parse_u64(text, &opt->chaos_first, msg, len))
            return -1;
        opt->chaos_last = opt->chaos_first;
    } else {
        size_t n = (size_t)(dots - text);
        if (n == 0 || n >= sizeof first) {
            snprintf(msg, len, "'%s' is not a seed or a range A..B", text);
            return -1;
        }
        memcpy(first, text, n);
        first[n] = '\0';
        if (units_parse_u64(first, &opt->chaos_first, msg, len) || units_parse_u64(dots + 2, &opt->chaos_last, msg, len))
            return -1;
        if (opt->chaos_last < opt->chaos_first || opt->chaos_last - opt->chaos_first >= 1000000) {
            snprintf(msg, len, "the range %s must run upward over at most 1000000 seeds", text);
            return -1;
        }
    }
    opt->chaos_given = 1;
    return 0;
}

static uint64_t schedule_hash(const sched *s)
{
    uint64_t h = HASH_INIT;
    for (size_t i = 0; i < s->nops; i++)
        h = hash_word(h, (uint64_t)s->ops[i]);
    return h;
}

/* The command without --chaos, --repeat and --fail-fast: a failing seed's replay line appends "--chaos S". */
static void build_replay_base(ddpsim_options *opt, int argc, char **argv)
{
    char *keep[256];
    int n = 0;
    for (int i = 0; i < argc && n < 256; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--fail-fast") == 0)
            continue;
        if (strcmp(a, "--chaos") == 0 || strcmp(a, "--repeat") == 0) {
            i++;
            continue;
        }
        if (strncmp(a, "--chaos=", 8) == 0 || strncmp(a, "--repeat=", 9) == 0)
            continue;
        keep[n++] = argv[i];
    }
    char saved[sizeof opt->command];
    memcpy(saved, opt->command, sizeof saved);
    record_command(opt, n, keep);
    memcpy(opt->replay_base, opt->command, sizeof opt->replay_base);
    memcpy(opt->command, saved, sizeof saved);
}

int options_parse(int argc, char **argv, ddpsim_options *opt)
{
    enum { OPT_BUCKET = 256, OPT_FIRST_BUCKET, OPT_FIND_UNUSED, OPT_BUCKET_VIEW, OPT_LR, OPT_INPUTS, OPT_DUMP,
           OPT_JSON, OPT_LIST, OPT_MUTANTS, OPT_CHAOS, OPT_REPEAT, OPT_FAIL_FAST, OPT_TRACE, OPT_REPLAY, OPT_FAULT,
           OPT_BACKEND, OPT_NCCL_OP };
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'n'},
        {"impl", required_argument, NULL, 'I'},
        {"model", required_argument, NULL, 'm'},
        {"schedule", required_argument, NULL, 's'},
        {"batch", required_argument, NULL, 'b'},
        {"seed", required_argument, NULL, 'S'},
        {"tolerance", required_argument, NULL, 'T'},
        {"algo", required_argument, NULL, 'a'},
        {"bucket-cap", required_argument, NULL, OPT_BUCKET},
        {"first-bucket-cap", required_argument, NULL, OPT_FIRST_BUCKET},
        {"find-unused", no_argument, NULL, OPT_FIND_UNUSED},
        {"bucket-view", no_argument, NULL, OPT_BUCKET_VIEW},
        {"lr", required_argument, NULL, OPT_LR},
        {"inputs", required_argument, NULL, OPT_INPUTS},
        {"dump", required_argument, NULL, OPT_DUMP},
        {"json", required_argument, NULL, OPT_JSON},
        {"list", no_argument, NULL, OPT_LIST},
        {"mutants", no_argument, NULL, OPT_MUTANTS},
        {"chaos", required_argument, NULL, OPT_CHAOS},
        {"repeat", required_argument, NULL, OPT_REPEAT},
        {"fail-fast", no_argument, NULL, OPT_FAIL_FAST},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"replay", required_argument, NULL, OPT_REPLAY},
        {"fault", required_argument, NULL, OPT_FAULT},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"nccl-op", required_argument, NULL, OPT_NCCL_OP},
        {"timeout", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    memset(opt, 0, sizeof *opt);
    verify_config *run = &opt->run;
    run->nranks = DEFAULT_RANKS;
    run->impl = "reference";
    run->model_spec = MODEL_DEFAULT_SPEC;
    run->batch = DEFAULT_BATCH;
    run->seed = 1;
    run->timeout_s = DEFAULT_TIMEOUT_S;
    run->ddp = (ddp_config){COLL_ORDERED, DDP_DEFAULT_BUCKET_CAP, DDP_DEFAULT_FIRST_BUCKET_CAP, 0, 0, DEFAULT_LR};
    opt->lr = DEFAULT_LR;
    const char *schedule_arg = SCHED_DEFAULT;
    record_command(opt, argc, argv);

    char msg[512];
    long v, repeat = 0;
    uint64_t u;
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then also forgets a half-parsed option cluster from an earlier call */
    int c;
    while ((c = getopt_long(argc, argv, ":n:I:m:s:b:S:T:a:t:qhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (units_parse_long(optarg, 1, WORLD_MAX_RANKS, &v, msg, sizeof msg))
                return ERR("--ranks", msg);
            run->nranks = (int)v;
            break;
        case 'I': run->impl = optarg; break;
        case 'm': run->model_spec = optarg; break;
        case 's': schedule_arg = optarg; break;
        case 'b':
            if (units_parse_long(optarg, 1, MODEL_MAX_DIM, &v, msg, sizeof msg))
                return ERR("--batch", msg);
            run->batch = (int)v;
            break;
        case 'S':
            if (units_parse_u64(optarg, &u, msg, sizeof msg))
                return ERR("--seed", msg);
            run->seed = u;
            break;
        case 'T':
            if (tol_parse(optarg, &run->tol) != DDP_OK)
                return ERR("--tolerance", ddp_error_text());
            opt->tol_given = 1;
            break;
        case OPT_BACKEND:
            if (strcmp(optarg, "cpu") == 0)
                run->backend = VERIFY_BACKEND_CPU;
            else if (strcmp(optarg, "nccl") == 0)
                run->backend = VERIFY_BACKEND_NCCL;
            else
                return ERR("--backend", "expected cpu or nccl");
            break;
        case OPT_NCCL_OP:
            if (strcmp(optarg, "sum") != 0 && strcmp(optarg, "avg") != 0)
                return ERR("--nccl-op", "expected sum or avg");
            run->nccl_avg = strcmp(optarg, "avg") == 0;
            opt->nccl_op_given = 1;
            break;
        case 'a':
            if (coll_algo_parse(optarg, &run->ddp.algo) != DDP_OK)
                return ERR("--algo", ddp_error_text());
            break;
        case OPT_BUCKET:
        case OPT_FIRST_BUCKET:
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return ERR(c == OPT_BUCKET ? "--bucket-cap" : "--first-bucket-cap", msg);
            if (u == 0 || u > ((uint64_t)1 << 40))
                return ERR(c == OPT_BUCKET ? "--bucket-cap" : "--first-bucket-cap", "must be 1 byte .. 1T");
            if (c == OPT_BUCKET)
                run->ddp.bucket_cap = u;
            else
                run->ddp.first_bucket_cap = u;
            break;
        case OPT_FIND_UNUSED: run->ddp.find_unused = 1; break;
        case OPT_BUCKET_VIEW: run->ddp.bucket_view = 1; break;
        case OPT_LR: {
            char *end;
            double lr = strtod(optarg, &end);
            if (end == optarg || *end || !isfinite(lr) || fabs(lr) > 1e6)
                return ERR("--lr", "expected a finite number (|lr| <= 1e6)");
            run->ddp.lr = (float)lr;
            opt->lr = lr;
            break;
        }
        case OPT_INPUTS: run->inputs_dir = optarg; break;
        case OPT_DUMP: run->dump_dir = optarg; break;
        case OPT_JSON: opt->json_path = optarg; break;
        case OPT_LIST: opt->list = 1; return DDPSIM_EXIT_PASS;
        case OPT_MUTANTS: opt->mutants = 1; break;
        case OPT_CHAOS:
            if (parse_chaos(optarg, opt, msg, sizeof msg))
                return ERR("--chaos", msg);
            break;
        case OPT_REPEAT:
            if (units_parse_long(optarg, 1, 1000000, &v, msg, sizeof msg))
                return ERR("--repeat", msg);
            repeat = v;
            break;
        case OPT_FAIL_FAST: opt->fail_fast = 1; break;
        case OPT_TRACE: run->trace_path = optarg; break;
        case OPT_REPLAY: opt->replay_path = optarg; break;
        case OPT_FAULT:
            if (run->nfaults == VERIFY_MAX_FAULTS)
                return ERR("--fault", "at most 16 faults");
            if (fault_parse(optarg, &run->faults[run->nfaults]) != DDP_OK)
                return ERR("--fault", ddp_error_text());
            run->nfaults++;
            break;
        case 't':
            if (units_parse_seconds(optarg, &run->timeout_s, msg, sizeof msg))
                return ERR("--timeout", msg);
            break;
        case 'q': opt->quiet = 1; break;
        case 'h': usage(stdout); return DDPSIM_EXIT_PASS;
        case 'V': cli_print_version(); return DDPSIM_EXIT_PASS;
        default: return ERR(NULL, cli_getopt_message(c, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return ERR(NULL, cli_getopt_message(0, argv, msg, sizeof msg));

    /* ---- combinations and inputs ---- */
    if (impl_open(run->impl, &opt->impl) != DDP_OK)
        return ERR("--impl", ddp_error_text());
    run->impl_ops = opt->impl.ops;
    model *layout = NULL;
    if (model_create_layout(run->model_spec, run->batch, &layout) != DDP_OK)
        return ERR("--model", ddp_error_text());
    int branchy = strcmp(model_family(layout), "branchy") == 0;
    model_destroy(layout);
    if (branchy && !run->ddp.find_unused)
        return ERR("--model", "branchy has parameters that some forwards do not use; PyTorch DDP needs "
                              "find_unused_parameters=True for it: add --find-unused");
    if (schedule_arg[0] == '@') {
        opt->schedule_text = cli_read_file(schedule_arg + 1, MAX_SCHEDULE_FILE, msg, sizeof msg);
        if (!opt->schedule_text)
            return ERR("--schedule", msg);
    } else {
        opt->schedule_text = strdup(schedule_arg);
    }
    if (!opt->schedule_text || sched_parse(opt->schedule_text, &opt->schedule) != DDP_OK)
        return ERR("--schedule", opt->schedule_text ? ddp_error_text() : "out of memory");
    run->schedule = &opt->schedule;
    if (run->ddp.first_bucket_cap > run->ddp.bucket_cap && run->ddp.first_bucket_cap != DDP_DEFAULT_FIRST_BUCKET_CAP)
        return ERR("--first-bucket-cap", "is larger than --bucket-cap");
    for (int f = 0; f < run->nfaults; f++) {
        const verify_fault *ft = &run->faults[f];
        if (ft->rank >= run->nranks) {
            snprintf(msg, sizeof msg, "rank %d does not exist (--ranks %d)", ft->rank, run->nranks);
            return ERR("--fault", msg);
        }
        if (ft->kind != FAULT_SLOW && (size_t)ft->op >= run->schedule->nops) {
            snprintf(msg, sizeof msg, "op %ld is past the schedule's %zu ops", ft->op, run->schedule->nops);
            return ERR("--fault", msg);
        }
    }
    /* The NCCL backend. */
    if (run->backend == VERIFY_BACKEND_NCCL) {
        if (!gpu_probe_built())
            return ERR("--backend", GPU_PROBE_NOT_BUILT);
        if (run->nccl_avg && run->impl_ops != &impl_reference_ops && run->impl_ops != &impl_bucketed_ops)
            return ERR("--nccl-op", "avg: only the built-in reference and bucketed implementations leave their "
                                    "buckets unscaled for ncclAvg");
        if (!opt->tol_given)
            run->tol = (tolerance){.kind = TOL_ULP_OF_MAX, .ulps = NCCL_DEFAULT_ULPS};
    } else if (opt->nccl_op_given) {
        return ERR("--nccl-op", "goes with --backend nccl");
    }
        /* Chaos and repetition. */
    if (repeat) {
        if (opt->chaos_given && opt->chaos_first != opt->chaos_last)
            return ERR("--repeat", "give either --repeat K or a --chaos A..B range, not both");
        if (!opt->chaos_given)
            opt->chaos_first = 1;
        opt->chaos_last = opt->chaos_first + (uint64_t)repeat - 1;
        opt->chaos_given = 1;
    }
    opt->repeat_mode = opt->chaos_given && opt->chaos_last != opt->chaos_first;
    run->chaos = opt->chaos_given;
    run->chaos_seed = opt->chaos_first;
    if (opt->fail_fast && !opt->repeat_mode)
        return ERR("--fail-fast", "goes with --repeat K or --chaos A..B");
    if (opt->repeat_mode && (run->trace_path || opt->replay_path || run->dump_dir || opt->json_path))
        return ERR("--repeat", "--trace, --replay, --dump and --json belong to single runs: replay one seed");
    snprintf(opt->run_key, sizeof opt->run_key, "ranks=%d seed=%llu model=%s batch=%d impl=%s ops=%zu hash=%016llx",
             run->nranks, (unsigned long long)run->seed, run->model_spec, run->batch, run->impl,
             run->schedule->nops, (unsigned long long)schedule_hash(run->schedule));
    if (opt->replay_path) {
        if (trace_load(opt->replay_path, opt->run_key, run->nranks, &opt->replay) != DDP_OK)
            return ERR(NULL, ddp_error_text());
        run->replay = &opt->replay;
    }
    build_replay_base(opt, argc, argv);
    return OPTIONS_RUN;
}

void options_free(ddpsim_options *opt)
{
    impl_close(&opt->impl);
    trace_free(&opt->replay);
    sched_free(&opt->schedule);
    free(opt->schedule_text);
}
