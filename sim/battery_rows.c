/*
 * battery_rows.c - the battery's rows (battery_rows.h).
 */
#include "battery_rows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x)

int battery_rows_extra_ranks(const ddpsim_options *opt)
{
    int n = opt->run.nranks;
    if (n < 2 || (n & (n - 1)) || opt->mesh_text || opt->world == CLI_WORLD_MPI) /* MPI: the job's size is fixed */
        return 0;
    return n == 2 ? 3 : n - 1;
}

int battery_rows_sched(const ddpsim_options *opt)
{
    return strchr(opt->run.impl, '/') && !opt->race && opt->world != CLI_WORLD_MPI &&
           opt->run.backend == VERIFY_BACKEND_CPU;
}

int battery_rows(const ddpsim_options *opt, battery_row **rows)
{
    int n = battery_count_for(opt->run.shard), m = battery_rows_extra_ranks(opt), count = n;
    int chaos = !opt->run.chaos; /* under --chaos SEED every row is under that seed already */
    for (int i = 0; i < n; i++)
        count += (m && battery_at_for(opt->run.shard, i)->divisor) +
                 (chaos && battery_at_for(opt->run.shard, i)->chaos_seeds > 0);
    battery_row *r = count > 0 ? calloc((size_t)count, sizeof *r) : NULL;
    if (!r)
        return -1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        r[k].sc = battery_at_for(opt->run.shard, i);
        r[k].nranks = opt->run.nranks;
        snprintf(r[k].label, sizeof r[k].label, "%s", r[k].sc->name);
        k++;
    }
    for (int i = 0; m && i < n; i++) {
        const scenario *sc = battery_at_for(opt->run.shard, i);
        if (!sc->divisor)
            continue;
        r[k].sc = sc;
        r[k].nranks = m;
        snprintf(r[k].label, sizeof r[k].label, "%s at %d", sc->name, m);
        k++;
    }
    for (int i = 0; chaos && i < n; i++) {
        const scenario *sc = battery_at_for(opt->run.shard, i);
        if (sc->chaos_seeds <= 0)
            continue;
        r[k].sc = sc;
        r[k].nranks = opt->run.nranks;
        r[k].chaos_seeds = sc->chaos_seeds;
        snprintf(r[k].label, sizeof r[k].label, "%s, chaos 1-%d", sc->name, sc->chaos_seeds);
        k++;
    }
    *rows = r;
    return count;
}

void battery_rows_chaos_pass(const battery_row *rows, int n, int *nrows, int *nruns)
{
    *nrows = *nruns = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].chaos_seeds) {
            (*nrows)++;
            *nruns += rows[i].runs;
        }
}

verify_config battery_row_config(const ddpsim_options *opt, const battery_row *row)
{
    verify_config c = opt->run;
    if (row->chaos_seeds && battery_rows_sched(opt))
        c.interleave = (interleave_config){.mode = INTERLEAVE_PCT, .depth = BATTERY_SCHED_DEPTH};
    if (row->nranks != c.nranks) {
        c.nranks = row->nranks;
        if (c.shard != SHARD_NONE) /* no --mesh here (battery_rows_extra_ranks): the mode's own for M ranks */
            c.mesh = shard_default_mesh(c.shard, row->nranks);
    }
    return c;
}

void battery_row_replay(const ddpsim_options *opt, const battery_row *row, char *out, size_t len)
{
    if (row->chaos_seeds)
        snprintf(out, len, " --scenario %s%s --chaos %d", row->sc->name,
                 battery_rows_sched(opt) ? " --sched pct:" STRINGIFY(BATTERY_SCHED_DEPTH) : "",
                 row->failed_seed ? row->failed_seed : 1);
    else if (row->nranks == opt->run.nranks)
        snprintf(out, len, " --scenario %s", row->sc->name);
    else
        snprintf(out, len, " --scenario %s --ranks %d", row->sc->name, row->nranks);
}
