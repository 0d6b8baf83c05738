/*
 * selfcheck.c - `ddpsim selfcheck`: options, run, report (selfcheck.h).
 */
#include "selfcheck.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "collcheck.h"
#include "config.h"
#include "optable.h"
#include "units.h"
#include "world.h"

#define DEFAULT_RANKS 2
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
    int jitter_us;
    int quiet;
} selfcheck_options;

static void init(void *o)
{
    *(selfcheck_options *)o = (selfcheck_options){
        .ranks = DEFAULT_RANKS,
        .timeout_s = WORLD_DEFAULT_TIMEOUT_S,
        .algo = -1,
        .count = DEFAULT_COUNT,
        .iters = DEFAULT_ITERS,
        .slot_bytes = WORLD_DEFAULT_SLOT_BYTES,
        .jitter_seed = 1,
    };
}

static int validate(void *o, const char **which, char *msg, size_t len)
{
    /* The segment holds one slot per rank plus a result slot. */
    const selfcheck_options *opt = o;
    if ((uint64_t)opt->ranks * opt->slot_bytes > ((uint64_t)16 << 30)) {
        *which = "slot-bytes";
        snprintf(msg, len, "ranks x slot bytes exceeds 16 GiB of shared memory");
        return -1;
    }
    return 0;
}

#define F(field) offsetof(selfcheck_options, field)
static const opt_spec specs[] = {
    {"ranks", 'n', "N", "rank processes", OPT_INT, F(ranks), 1, WORLD_MAX_RANKS, NULL, NULL},
    {"algo", 'a', "ordered|ring|exact", "check only this reduction order", OPT_CHOICE, F(algo), 0, 0, NULL, "all three"},
    {"count", 'c', "N", "elements per allreduce, K/M/G allowed", OPT_SIZE, F(count), 1, 2147483648.0, NULL, NULL},
    {"iters", 'i', "K", "repetitions of each allreduce", OPT_INT, F(iters), 1, 10000, NULL, NULL},
    {"slot-bytes", 0, "SIZE", "per-rank staging buffer in the shared segment", OPT_SIZE, F(slot_bytes), 64,
     1073741824.0, NULL, NULL},
    {"jitter", 0, "US", "random delay of up to US microseconds before every\nbarrier arrival, to shake the arrival order",
     OPT_INT, F(jitter_us), 0, 1000000, NULL, NULL},
    {"jitter-seed", 0, "S", "seed of those delays", OPT_U64, F(jitter_seed), 0, 0, NULL, NULL},
    {"timeout", 't', "SEC", "watchdog: stop when no rank progresses for SEC seconds,\n0 disables", OPT_SECONDS,
     F(timeout_s), 0, 1e7, NULL, NULL},
    {"quiet", 'q', NULL, "print only the verdict line", OPT_FLAG, F(quiet), 0, 0, NULL, NULL},
    {"help", 'h', NULL, "this help", OPT_HELP, 0, 0, 0, NULL, NULL},
    {NULL, 0, NULL, NULL, OPT_FLAG, 0, 0, 0, NULL, NULL},
};

static const opt_command selfcheck_command = {
    .name = "selfcheck",
    .usage = "[OPTIONS]",
    .about = "The collectives self-check: every algorithm, type and op is allreduced over N\n"
             "rank processes on inputs whose sums are exact, and every element and every\n"
             "rank's bits are checked.",
    .opts = specs,
    .opts_size = sizeof(selfcheck_options),
    .init = init,
    .validate = validate,
    .epilog = "Exit status: 0 passed, 1 a wrong element or disagreeing ranks, 2 bad usage,\n"
              "3 runtime fault, 130/143 interrupted by SIGINT/SIGTERM.\n",
};

int selfcheck_main(int argc, char **argv)
{
    selfcheck_options opt;
    int r = opt_parse(&selfcheck_command, argc, argv, &opt);
    if (r != OPT_RUN)
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
        .jitter_max_us = (unsigned)opt.jitter_us,
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
        printf("# ranks %d, count %llu, iters %d, slot %s, jitter %d us (seed %llu), timeout %g s\n", opt.ranks,
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
