/*
 * main.c - ddpsim: parse the options, hand the engine a complete run
 * description, print the report, and turn the outcome into an exit code.
 * Results go to stdout, diagnostics to stderr.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "collcheck.h"
#include "config.h"
#include "options.h"
#include "units.h"
#include "world.h"

static int fault_exit(world *w, ddp_status s)
{
    fprintf(stderr, "ddpsim: %s\n", ddp_error_last());
    if (w) {
        char detail[WORLD_MAX_RANKS * 200];
        world_describe(w, detail, sizeof detail);
        fputs(detail, stderr);
    }
    if (s == DDP_ERR_INTERRUPTED && w)
        return 128 + world_interrupt_signal(w);
    return DDPSIM_EXIT_FAULT;
}

static int run_selfcheck(const ddpsim_options *opt)
{
    collcheck_case cases[COLL_NALGOS * 4];
    int ncases = 0;
    for (int a = 0; a < COLL_NALGOS; a++) {
        if (opt->algo >= 0 && a != opt->algo)
            continue;
        for (int t = 0; t < 2; t++)
            for (int op = 0; op < 2; op++)
                cases[ncases++] = (collcheck_case){(coll_algo)a, (coll_dtype)t, (coll_op)op, opt->count};
    }
    world_config cfg = {
        .nranks = opt->ranks,
        .timeout_s = opt->timeout_s,
        .slot_bytes = opt->slot_bytes,
        .user_bytes = collcheck_user_bytes(ncases, opt->ranks, opt->iters),
        .jitter_seed = opt->jitter_seed,
        .jitter_max_us = opt->jitter_us,
    };
    world *w = NULL;
    ddp_status s = world_create(&cfg, &w);
    if (s != DDP_OK) {
        fprintf(stderr, "ddpsim: %s\n", ddp_error_last());
        return s == DDP_ERR_INVALID ? DDPSIM_EXIT_USAGE : DDPSIM_EXIT_FAULT;
    }
    char slot[32];
    if (!opt->quiet) {
        printf("# ddpsim %s: collectives self-check\n", PACKAGE_VERSION);
        printf("# ranks %d, count %llu, iters %d, slot %s, jitter %u us (seed %llu), timeout %.0f s\n",
               opt->ranks, (unsigned long long)opt->count, opt->iters,
               units_format_size(opt->slot_bytes, slot, sizeof slot), opt->jitter_us,
               (unsigned long long)opt->jitter_seed, opt->timeout_s);
        printf("# inputs: integers and quarters, so every sum is exact and every element has one right answer\n");
        fflush(stdout);
    }
    collcheck_result res[COLL_NALGOS * 4];
    s = collcheck_run(w, cases, ncases, opt->iters, res);
    if (s != DDP_OK) {
        int code = fault_exit(w, s);
        world_destroy(w);
        return code;
    }
    world_destroy(w);

    uint64_t wrong = 0;
    int disagree = 0;
    if (!opt->quiet)
        printf("#%8s %7s %4s %11s %12s %8s %6s\n", "algo", "type", "op", "count", "median_us", "wrong", "agree");
    for (int k = 0; k < ncases; k++) {
        const collcheck_result *r = &res[k];
        wrong += r->wrong;
        disagree += !r->ranks_agree;
        if (!opt->quiet)
            printf("%9s %7s %4s %11zu %12.1f %8llu %6s\n", coll_algo_name(r->c.algo), coll_dtype_name(r->c.type),
                   coll_op_name(r->c.op), r->c.count, r->median_us, (unsigned long long)r->wrong,
                   r->ranks_agree ? "yes" : "NO");
    }
    int pass = wrong == 0 && disagree == 0;
    printf("# verdict: %s (%d checks on %d ranks, %llu wrong elements, %d disagreeing)\n", pass ? "PASS" : "FAIL",
           ncases, opt->ranks, (unsigned long long)wrong, disagree);
    return pass ? DDPSIM_EXIT_PASS : DDPSIM_EXIT_MISMATCH;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "bench") == 0)
        return bench_main(argc - 1, argv + 1);
    ddpsim_options opt;
    int r = options_parse(argc, argv, &opt);
    if (r == OPTIONS_EXIT_OK)
        return DDPSIM_EXIT_PASS;
    if (r == OPTIONS_ERROR)
        return DDPSIM_EXIT_USAGE;
    return run_selfcheck(&opt);
}
