/*
 * battery_rows.h - the rows of the battery a plain `ddpsim --ranks N` runs:
 * every scenario of the mode (battery_at_for) at N ranks, and, when N is a
 * power of two, the scenarios that show a bug in the order of scaling and
 * summing (scenario.divisor) once more at M = N-1 ranks (3 for N = 2), as
 * rows of their own labelled "NAME at M". 1/N is exact for a power of two,
 * so such a bug gives the same bits there: the extra rows are what lets the
 * plain command catch it. Not with --mesh (the mesh fixes the rank count)
 * nor under --world mpi (the job's size does).
 *
 * Then the chaos pass: each scenario with chaos_seeds (the order gradients
 * become ready and buckets launch matters there) once more at N ranks under
 * chaos seeds 1..chaos_seeds, one run per seed, stopping at the first that
 * fails, as a row "NAME, chaos 1-8"; its replay line names the failing
 * seed. Not when the whole battery runs under --chaos SEED already. For a
 * plugin the pass also runs its threads under --sched pct:2 (interleave.h),
 * each seed one interleaving, so a race between them that a seed makes fire
 * fails the row, and its replay line fires it again (not beside --race,
 * under --world mpi or with --backend nccl, which --sched refuses).
 */
#ifndef DDPSIM_BATTERY_ROWS_H
#define DDPSIM_BATTERY_ROWS_H

#include "battery.h"
#include "options.h"

typedef struct battery_row {
    const scenario *sc;
    int nranks;      /* the user's N, or M for an extra row */
    int chaos_seeds; /* a row of the chaos pass: seeds 1..chaos_seeds (0: an ordinary row) */
    int failed_seed; /* ... the seed that failed (0: none, or not run yet) */
    int runs;        /* ... the runs it made (the seeds up to the failing one; 0: refused) */
    char label[48];  /* the scenario's name, "NAME at M" or "NAME, chaos 1-K" */
} battery_row;

/* Whether the chaos pass schedules the implementation's threads (a plugin, --sched allowed): pct:2. */
int battery_rows_sched(const ddpsim_options *opt);
#define BATTERY_SCHED_DEPTH 2

/* The extra rows' rank count M for opt, or 0 when there are none (N not a power of two, N < 2, --mesh, MPI). */
int battery_rows_extra_ranks(const ddpsim_options *opt);

/* The rows of opt's battery into *rows (freed by the caller): their count, or -1 when out of memory. */
int battery_rows(const ddpsim_options *opt, battery_row **rows);

/* The run of a row on top of opt->run: its rank count and, for a sharded mode without --mesh, its mesh. */
verify_config battery_row_config(const ddpsim_options *opt, const battery_row *row);

/* The chaos rows, and the runs they made, for the verdict (0, 0: none). */
void battery_rows_chaos_pass(const battery_row *rows, int n, int *nrows, int *nruns);

/* What a row's replay line adds to the command: " --scenario NAME", " --ranks M" for a row at M, " --chaos S"
 * for a chaos row's failing seed (after " --sched pct:2" when the pass schedules). */
void battery_row_replay(const ddpsim_options *opt, const battery_row *row, char *out, size_t len);

#endif
