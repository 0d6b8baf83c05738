/*
 * repeat.h - `--repeat K` / `--chaos A..B`: the same run under consecutive
 * chaos seeds, to shake out order-dependent and flaky behaviour.
 */
#ifndef DDPSIM_REPEAT_H
#define DDPSIM_REPEAT_H

#include "options.h"

/* Returns 0 when every seed passed; 1 on any divergence; 3 when runs only faulted. */
int repeat_main(const ddpsim_options *opt);

#endif
