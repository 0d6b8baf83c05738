/*
 * stats.h - the clock and the median the benchmarks and self-checks report.
 */
#ifndef DDPSIM_STATS_H
#define DDPSIM_STATS_H

#include <stddef.h>

/* Microseconds on the monotonic clock. */
double stats_now_us(void);

/* The median of v[0..n) (n > 0); sorts v in place. */
double stats_median(double *v, size_t n);

#endif
