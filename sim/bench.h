/*
 * bench.h - `ddpsim bench ...`: the benchmarks, each printing medians and a
 * ratio against a baseline measured in the same run.
 */
#ifndef DDPSIM_BENCH_H
#define DDPSIM_BENCH_H

/* argv[0] is "bench". Returns the process exit code. */
int bench_main(int argc, char **argv);

#endif
