/*
 * battery_rows.c - the battery's rows (battery_rows.h).
 */
#include "battery_rows.h"

#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int battery_rows_extra_ranks(const ddpsim_options *opt)
{
    int n = opt->run.nranks;
    if (n < 2 || (n & (n - 1)) || opt->mesh_text || opt->world == CLI_WORLD_MPI) /* MPI: the job's size is fixed */
        return 0;
    return n == 2 ? 3 : n - 1;
}

int battery_rows(const ddpsim_options *opt, battery_row **rows)
{
    int n = battery_count_for(opt->run.shard), m = battery_rows_extra_ranks(opt), count = n;
    for (int i = 0; m && i < n; i++)
        count += battery_at_for(opt->run.shard, i)->divisor;
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
    *rows = r;
    return count;
}

verify_config battery_row_config(const ddpsim_options *opt, const battery_row *row)
{
    verify_config c = opt->run;
    if (row->nranks != c.nranks) {
        c.nranks = row->nranks;
        if (c.shard != SHARD_NONE) /* no --mesh here (battery_rows_extra_ranks): the mode's own for M ranks */
            c.mesh = shard_default_mesh(c.shard, row->nranks);
    }
    return c;
}

void battery_row_replay(const ddpsim_options *opt, const battery_row *row, char *out, size_t len)
{
    if (row->nranks == opt->run.nranks)
        snprintf(out, len, " --scenario %s", row->sc->name);
    else
        snprintf(out, len, " --scenario %s --ranks %d", row->sc->name, row->nranks);
}
