/*
 * scenarios.h - what `ddpsim` runs by default: the scenario battery
 * (engine/verify/battery.h), every scenario at the requested rank count,
 * one table row each (grabs, syncs, verdict, first divergence), one
 * verdict, and for every failing scenario the command that reruns it alone.
 */
#ifndef DDPSIM_SCENARIOS_H
#define DDPSIM_SCENARIOS_H

#include "options.h"

/* --scenarios: every scenario, what it exposes, its model and schedule. */
int scenarios_list(shard_mode mode); /* --scenarios [--shard MODE] */

/*
 * The battery: every scenario's configuration is checked before any rank
 * starts (a usage error names the scenario), then each runs. Returns the
 * exit code: 0 all pass, 1 some diverge, 3 a fault and no divergence, 4
 * nothing verified.
 */
int battery_main(const ddpsim_options *opt);

#endif
