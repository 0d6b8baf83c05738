/*
 * battery_rows.h - the rows of the battery a plain `ddpsim --ranks N` runs:
 * every scenario of the mode (battery_at_for) at N ranks, and, when N is a
 * power of two, the scenarios that show a bug in the order of scaling and
 * summing (scenario.divisor) once more at M = N-1 ranks (3 for N = 2), as
 * rows of their own labelled "NAME at M". 1/N is exact for a power of two,
 * so such a bug gives the same bits there: the extra rows are what lets the
 * plain command catch it. Not with --mesh (the mesh fixes the rank count)
 * nor under --world mpi (the job's size does).
 */
#ifndef DDPSIM_BATTERY_ROWS_H
#define DDPSIM_BATTERY_ROWS_H

#include "battery.h"
#include "options.h"

typedef struct battery_row {
    const scenario *sc;
    int nranks;      /* the user's N, or M for an extra row */
    char label[48];  /* the scenario's name, or "NAME at M" */
} battery_row;

/* The extra rows' rank count M for opt, or 0 when there are none (N not a power of two, N < 2, --mesh, MPI). */
int battery_rows_extra_ranks(const ddpsim_options *opt);

/* The rows of opt's battery into *rows (freed by the caller): their count, or -1 when out of memory. */
int battery_rows(const ddpsim_options *opt, battery_row **rows);

/* The run of a row on top of opt->run: its rank count and, for a sharded mode without --mesh, its mesh. */
verify_config battery_row_config(const ddpsim_options *opt, const battery_row *row);

/* What a row's replay line adds to the command: " --scenario NAME", and " --ranks M" for an extra row. */
void battery_row_replay(const ddpsim_options *opt, const battery_row *row, char *out, size_t len);

#endif
