/*
 * bench_run.h - whole verification runs timed against unverified DDP
 * (bench_ddp.h) of the same schedule, in the same process and rounds, and
 * the scenario battery timed against its classic scenario: what `ddpsim
 * bench run` and `ddpsim bench battery` measure. Printing is the caller's.
 *
 * A micro-step's cost is measured at the margin: the default schedule and
 * the same three times over, run taking turns; the difference of their
 * medians over the difference of their backwards is the time of a
 * micro-step in a running verification, without what a run pays once
 * (fork, the replicas' creation and broadcast, the first touch of every
 * buffer, PyTorch's first-iteration bucket), which the whole run's time per
 * step also shows. The unverified run takes its turn in each round, so a
 * noisy moment hits both.
 */
#ifndef DDPSIM_BENCH_RUN_H
#define DDPSIM_BENCH_RUN_H

#include <stddef.h>

#include "status.h"
#include "verify.h"
#include "world.h"

typedef struct bench_run_result {
    size_t params;          /* the model's parameters */
    size_t steps, steps3;   /* micro-steps of the default schedule, and of it three times over */
    double run_s;           /* median wall time of a whole run of the default schedule */
    double step_ms;         /* a verified micro-step at the margin */
    double ddp_ms;          /* an unverified DDP micro-step at the margin */
    double x_verify;        /* step_ms / ddp_ms; 0 when a margin was lost in the noise */
    double coll_share;      /* median share of the average rank's wall time inside collectives */
    double hidden;          /* median share of the implementation's collective time overlapped with backward */
    double cpu_spread;      /* median of the busiest rank's CPU time outside collectives over the median rank's */
    double cost_ms[COST_N]; /* of a verified micro-step at the margin, the average rank's wall time in each check
                             * and in the implementation's callbacks (verify_cost) */
} bench_run_result;

/*
 * Measure vc's model (vc's schedule is replaced by the default schedule and by it three times over) over iters
 * rounds. A verified run that fails stops it: its status returned, and *failed holds its result for the
 * caller's message (verify_result_free it); otherwise failed->w is NULL.
 */
ddp_status bench_run_measure(const verify_config *vc, int iters, bench_run_result *out, verify_result *failed);
/* The micro-steps (backwards) of the default schedule a measurement runs once, before its threefold copy. */
size_t bench_run_default_steps(void);

typedef struct bench_battery_result {
    int nscenarios;
    double *scenario_s;     /* [nscenarios]: each scenario's median */
    double total_s;         /* the battery's median */
    double classic_s;       /* classic alone, the baseline: median */
    int nranks;
    double rank_ops_s[WORLD_MAX_RANKS];   /* each rank's median CPU time outside collectives over the ops */
    double rank_setup_s[WORLD_MAX_RANKS]; /* ... and in its setups */
    char failed[512];       /* classic did not pass: why (the measurement stops) */
    /* with a sharded configuration: its mode's battery in the same rounds */
    int sharded_n;
    double *sharded_scenario_s; /* [sharded_n]: medians */
    double sharded_total_s;
} bench_battery_result;

/*
 * The battery at vc (every scenario, battery.h) and its classic scenario
 * alone, iters rounds: medians. With sharded (a --shard configuration, or
 * NULL), its mode's battery too, in every round after the plain one.
 */
ddp_status bench_battery_measure(const verify_config *vc, const verify_config *sharded, int iters,
                                 bench_battery_result *out);
void bench_battery_free(bench_battery_result *r);

#endif
