/*
 * catalogue.c - an implementation through the whole battery (catalogue.h).
 */
#include "catalogue.h"

#include <stdio.h>
#include <string.h>

void catalogue_run(const verify_config *base, const battery_given *given, const ddpsim_impl_ops *ops,
                   catalogue_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->first = -1;
    verify_config c = *base;
    c.impl = ops->name;
    c.impl_ops = ops;
    c.dump_dir = c.record_dir = c.inputs_dir = c.trace_path = NULL;
    c.replay = NULL;
    c.nfaults = 0;
    c.timeout_s = CATALOGUE_TIMEOUT_S;
    for (int i = 0; i < battery_count_for(c.shard) && i < CATALOGUE_MAX_SCENARIOS; i++) {
        battery_outcome o;
        battery_run_one(&c, given, battery_at_for(c.shard, i), &o);
        if (o.interrupted) {
            out->interrupted = o.interrupted;
            return;
        }
        if (!battery_failed(&o))
            continue;
        out->caught[i] = 1;
        out->ncaught++;
        if (out->first >= 0)
            continue;
        out->first = i;
        out->fault = o.status != DDP_OK;
        snprintf(out->where, sizeof out->where, "%.250s", o.first);
    }
    if (out->first < 0 || out->fault || c.shard != SHARD_NONE) /* a sharded run is bitwise only (run.c check_shard) */
        return;
    verify_config loose = c;
    tol_parse(CATALOGUE_LOOSE_TOLERANCE, &loose.tol);
    battery_outcome o;
    battery_run_one(&loose, given, battery_at_for(c.shard, out->first), &o);
    out->interrupted = o.interrupted; /* a signal in any run stops them all */
    out->loose_known = !(o.status != DDP_OK && o.refused); /* --loss-scale's scenario refuses the order tolerance */
    out->bitwise_only = out->loose_known && !battery_failed(&o);
}
