/*
 * options.c - getopt_long parsing and validation of ddpsim's options.
 */
#include "options.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "gpu_probe.h"
#include "units.h"
#include "world.h"

#define DEFAULT_RANKS 2
#define DEFAULT_TIMEOUT_S 60.0
#define DEFAULT_COUNT 100003 /* a prime: slices and ring chunks never divide it evenly */
#define DEFAULT_ITERS 5

void options_usage(FILE *out)
{
    fprintf(out,
            "Usage: ddpsim [OPTIONS]\n"
            "Deterministic verification of data-parallel gradient synchronization on one machine.\n"
            "\n"
            "Runs N rank processes over shared memory. This build runs the collectives\n"
            "self-check: every algorithm, type and op is allreduced on inputs whose sums\n"
            "are exact, and every element and every rank's bits are checked.\n"
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
            "  -V, --version          version and build configuration\n"
            "\n"
            "Exit status:\n"
            "  0  every check passed\n"
            "  1  a check found a difference\n"
            "  2  bad usage or input\n"
            "  3  runtime fault: a rank died, the watchdog fired, a backend failed\n"
            "  130/143  interrupted by SIGINT/SIGTERM (all ranks are stopped first)\n",
            WORLD_MAX_RANKS, DEFAULT_RANKS, DEFAULT_COUNT, DEFAULT_ITERS, DEFAULT_TIMEOUT_S);
}

static void print_version(void)
{
    char gpu[256];
    gpu_probe_describe(gpu, sizeof gpu);
    printf("ddpsim %s\n", PACKAGE_VERSION);
    printf("NCCL backend: %s\n", gpu);
}

static int usage_error(const char *opt, const char *msg)
{
    fprintf(stderr, "ddpsim: %s%s%s\n", opt ? opt : "", opt ? ": " : "", msg);
    fprintf(stderr, "Try 'ddpsim --help' for the options and their defaults.\n");
    return OPTIONS_ERROR;
}

const char *options_getopt_message(int c, char **argv, char *msg, size_t len)
{
    if (c == ':')
        snprintf(msg, len, "option '%s' needs a value", argv[optind - 1]);
    else if (c == 0)
        snprintf(msg, len, "unexpected argument '%s'", argv[optind]);
    else
        snprintf(msg, len, "unknown option '%s'", argv[optind - 1]);
    return msg;
}

int options_parse(int argc, char **argv, ddpsim_options *opt)
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
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    *opt = (ddpsim_options){
        .ranks = DEFAULT_RANKS,
        .timeout_s = DEFAULT_TIMEOUT_S,
        .algo = -1,
        .count = DEFAULT_COUNT,
        .iters = DEFAULT_ITERS,
        .slot_bytes = WORLD_DEFAULT_SLOT_BYTES,
        .jitter_seed = 1,
    };
    char msg[256];
    long v;
    uint64_t u;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, ":n:a:c:i:t:qhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (units_parse_long(optarg, 1, WORLD_MAX_RANKS, &v, msg, sizeof msg))
                return usage_error("--ranks", msg);
            opt->ranks = (int)v;
            break;
        case 'a': {
            coll_algo a;
            if (coll_algo_parse(optarg, &a) != DDP_OK)
                return usage_error("--algo", strchr(ddp_error_last(), ' ') + 1);
            opt->algo = (int)a;
            break;
        }
        case 'c':
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return usage_error("--count", msg);
            if (u == 0 || u > ((uint64_t)1 << 31))
                return usage_error("--count", "must be between 1 and 2G elements");
            opt->count = u;
            break;
        case 'i':
            if (units_parse_long(optarg, 1, 10000, &v, msg, sizeof msg))
                return usage_error("--iters", msg);
            opt->iters = (int)v;
            break;
        case OPT_SLOT:
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return usage_error("--slot-bytes", msg);
            if (u < 64 || u > ((uint64_t)1 << 30))
                return usage_error("--slot-bytes", "must be between 64 and 1G bytes");
            opt->slot_bytes = u;
            break;
        case OPT_JITTER:
            if (units_parse_long(optarg, 0, 1000000, &v, msg, sizeof msg))
                return usage_error("--jitter", msg);
            opt->jitter_us = (unsigned)v;
            break;
        case OPT_JITTER_SEED:
            if (units_parse_size(optarg, &u, msg, sizeof msg))
                return usage_error("--jitter-seed", msg);
            opt->jitter_seed = u;
            break;
        case 't':
            if (units_parse_seconds(optarg, &opt->timeout_s, msg, sizeof msg))
                return usage_error("--timeout", msg);
            break;
        case 'q': opt->quiet = 1; break;
        case 'h': options_usage(stdout); return OPTIONS_EXIT_OK;
        case 'V': print_version(); return OPTIONS_EXIT_OK;
        default: return usage_error(NULL, options_getopt_message(c, argv, msg, sizeof msg));
        }
    }
    if (optind < argc)
        return usage_error(NULL, options_getopt_message(0, argv, msg, sizeof msg));
    /* Combinations: the segment holds one slot per rank plus a result slot. */
    if ((uint64_t)opt->ranks * opt->slot_bytes > ((uint64_t)16 << 30))
        return usage_error("--slot-bytes", "ranks x slot bytes exceeds 16 GiB of shared memory");
    return OPTIONS_RUN;
}
