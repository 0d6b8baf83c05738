/*
 * selfcheck.c - `ddpsim selfcheck`: options, run, report (selfcheck.h).
 */
#include "selfcheck.h"

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "collcheck.h"
#include "config.h"
#include "units.h"
#include "world.h"

#define DEFAULT_RANKS 2
#define DEFAULT_TIMEOUT_S 60.0
#define DEFAULT_COUNT 100003 /* a prime: slices and ring chunks never divide it evenly */
#define DEFAULT_ITERS 5

typedef struct selfcheck_options {
    int ranks;
    double timeout_s;
    int algo; /* -1: every algorithm */
    uint64_t count;
    int iters;
    uint64_t slot_bytes;
    uint64_t jitter_seed;
    unsigned jitter_us;
    int quiet;
} selfcheck_options;

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim selfcheck [OPTIONS]\n"
            "The collectives self-check: every algorithm, type and op is allreduced over N\n"
            "rank processes on inputs whose sums are exact, and every element and every\n"
            "rank's bits are checked.\n"
            "\n"
            "Options (default in brackets):\n"
            "  -n, --ranks N          rank processes, 1..%d [%d]\n"
            "  -a, --algo NAME        reduction order: ordered | ring | exact [all three]\n"
            "  -c, --count N          elements per allreduce, K/M/G allowed [%d]\n"
            "  -i, --iters K          repetitions of each allreduce, 1..10000 [%d]\n"
            "      --slot-bytes SIZE  per-rank staging buffer in the shared segment [1M]\n"
            "      --jitter US        random delay of up to US microseconds before every\n"
            "                         barrier arrival, to shake the arrival order [0]\n"
            "      --jitter-seed S    seed of those delays [1]\n"
            "  -t, --timeout SEC      watchdog: stop when no rank progresses for SEC seconds,\n"
            "                         0 disables [%.0f]\n"
            "  -q, --quiet            print only the verdict line\n"
            "  -h, --help             this help\n"
            "\n"
            "Exit status: 0 passed, 1 a wrong element or disagreeing ranks, 2 bad usage,\n"
            "3 runtime fault, 130/143 interrupted by SIGINT/SIGTERM.\n",
            WORLD_MAX_RANKS, DEFAULT_RANKS, DEFAULT_COUNT, DEFAULT_ITERS, DEFAULT_TIMEOUT_S);
}

#define ERR(opt, msg) cli_usage_error("selfcheck", (opt), (msg))

static int parse(int argc, char **argv, selfcheck_options *opt, int *exit_now)
{
    enum { OPT_SLOT = 256, OPT_JITTER, OPT_JITTER_SEED };
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'n'},
        {"algo", required_argument, NULL, 'a'},
        {"count", required_argument, NULL, 'c'},
        {"iters", required_argument, NULL, 'i'},
        {"slot-bytes", required_argument, NULL, OPT_SLOT},
        {"jitter", required_argument, NULL, OPT_JITTER},
        {"jitter-seed", required_argument, NULL, OPT_JITTER_SEED},
        {"timeout", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *opt = (selfcheck_options){
        .ranks = DEFAULT_RANKS,
        .timeout_s = DEFAULT_TIMEOUT_S,
        .algo = -1,
        .count = DEFAULT_COUNT,
        .iters = DEFAULT_ITERS,
        .slot_bytes = WORLD_DEFAULT_SLOT_BYTES,
        .jitter_seed = 1,
    };
    *exit_now = 0;
    char msg[256];
    long v;
    uint64_t u;
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then also forgets a half-parsed option cluster from an earlier call */
    int c;
    while ((c = getopt_long(argc, argv, ":n:a:c:i:t:qh", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (units_parse_long(optarg, 1, WORLD_MAX_RANKS, &v, msg, sizeof msg))
                return ERR("--ranks", msg);
            opt->ranks = (int)v;
            break;
        case 'a': {
            coll_algo a;
            if (coll_algo_parse(optarg, &a) != DDP_OK)
                return ERR("--algo", ddp_error_text());
            opt->algo = (int)a;
            break;
        }
        case 'c':
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return ERR("--count", msg);
            if (u == 0 || u > ((uint64_t)1 << 31))
                return ERR("--count", "must be between 1 and 2G elements");
            opt->count = u;
            break;
        case 'i':
            if (units_parse_long(optarg, 1, 10000, &v, msg, sizeof msg))
                return ERR("--iters", msg);
            opt->iters = (int)v;
            break;
        case OPT_SLOT:
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return ERR("--slot-bytes", msg);
            if (u < 64 || u > ((uint64_t)1 << 30))
                return ERR("--slot-bytes", "must be between 64 and 1G bytes");
            opt->slot_bytes = u;
            break;
        case OPT_JITTER:
            if (units_parse_long(optarg, 0, 1000000, &v, msg, sizeof msg))
                return ERR("--jitter", msg);
            opt->jitter_us = (unsigned)v;
            break;
        case OPT_JITTER_SEED:
            if (units_parse_u64(optarg, &u, msg, sizeof msg))
                return ERR("--jitter-seed", msg);
            opt->jitter_seed = u;
            break;
        case 't':
            if (units_parse_seconds(optarg, &opt->timeout_s, msg, sizeof msg))
                return ERR("--timeout", msg);
            break;
        case 'q': opt->quiet = 1; break;
        case 'h':
            usage(stdout);
            *exit_now = 1;
            return DDPSIM_EXIT_PASS;
        default: return ERR(NULL, cli_getopt_message(c, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return ERR(NULL, cli_getopt_message(0, argv, msg, sizeof msg));
    /* Combinations: the segment holds one slot per rank plus a result slot. */
    if ((uint64_t)opt->ranks * opt->slot_bytes > ((uint64_t)16 << 30))
        return ERR("--slot-bytes", "ranks x slot bytes exceeds 16 GiB of shared memory");
    return DDPSIM_EXIT_PASS;
}

int selfcheck_main(int argc, char **argv)
{
    selfcheck_options opt;
    int exit_now;
    int r = parse(argc, argv, &opt, &exit_now);
    if (r != DDPSIM_EXIT_PASS || exit_now)
        return r;

    collcheck_case cases[COLL_NALGOS * 4];
    int ncases = 0;
    for (int a = 0; a < COLL_NALGOS; a++) {
        if (opt.algo >= 0 && a != opt.algo)
            continue;
        for (int t = 0; t < 2; t++)
            for (int op = 0; op < 2; op++)
                cases[ncases++] = (collcheck_case){(coll_algo)a, (coll_dtype)t, (coll_op)op, opt.count};
    }
    world_config cfg = {
        .nranks = opt.ranks,
        .timeout_s = opt.timeout_s,
        .slot_bytes = opt.slot_bytes,
        .user_bytes = collcheck_user_bytes(ncases, opt.ranks, opt.iters),
        .jitter_seed = opt.jitter_seed,
        .jitter_max_us = opt.jitter_us,
    };
    world *w = NULL;
    ddp_status s = world_create(&cfg, &w);
    if (s != DDP_OK) {
        fprintf(stderr, "ddpsim: %s\n", ddp_error_last());
        return s == DDP_ERR_INVALID ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_FAULT;
    }
    char slot[32];
    if (!opt.quiet) {
        printf("# ddpsim %s: collectives self-check\n", PACKAGE_VERSION);
        printf("# ranks %d, count %llu, iters %d, slot %s, jitter %u us (seed %llu), timeout %.0f s\n", opt.ranks,
               (unsigned long long)opt.count, opt.iters, units_format_size(opt.slot_bytes, slot, sizeof slot),
               opt.jitter_us, (unsigned long long)opt.jitter_seed, opt.timeout_s);
        printf("# inputs: integers and quarters, so every sum is exact and every element has one right answer\n");
        fflush(stdout);
    }
    collcheck_result res[COLL_NALGOS * 4];
    s = collcheck_run(w, cases, ncases, opt.iters, res);
    if (s != DDP_OK) {
        int code = cli_fault_exit(w, s);
        world_destroy(w);
        return code;
    }
    world_destroy(w);

    uint64_t wrong = 0;
    int disagree = 0;
    if (!opt.quiet)
        printf("#%8s %7s %4s %11s %12s %8s %6s\n", "algo", "type", "op", "count", "median_us", "wrong", "agree");
    for (int k = 0; k < ncases; k++) {
        const collcheck_result *cr = &res[k];
        wrong += cr->wrong;
        disagree += !cr->ranks_agree;
        if (!opt.quiet)
            printf("%9s %7s %4s %11zu %12.1f %8llu %6s\n", coll_algo_name(cr->c.algo), coll_dtype_name(cr->c.type),
                   coll_op_name(cr->c.op), cr->c.count, cr->median_us, (unsigned long long)cr->wrong,
                   cr->ranks_agree ? "yes" : "NO");
    }
    int pass = wrong == 0 && disagree == 0;
    printf("# verdict: %s (%d checks on %d ranks, %llu wrong elements, %d disagreeing)\n", pass ? "PASS" : "FAIL",
           ncases, opt.ranks, (unsigned long long)wrong, disagree);
    return pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
}
