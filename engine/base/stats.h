/*
 * stats.h - the median the benchmarks and self-checks report (the clock is
 * clock.h).
 */
#ifndef DDPSIM_STATS_H
#define DDPSIM_STATS_H

#include <stddef.h>

/* The median of v[0..n) (n > 0); sorts v in place. */
double stats_median(double *v, size_t n);

#endif
