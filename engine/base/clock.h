/*
 * clock.h - the monotonic clock every timing in ddpsim reads (watchdogs,
 * deadlines, benchmarks, the report's time line), and an uninterruptible
 * sleep. Wall-clock time never enters a result.
 */
#ifndef DDPSIM_CLOCK_H
#define DDPSIM_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in seconds, microseconds and nanoseconds. */
double clock_now_s(void);
double clock_now_us(void);
uint64_t clock_now_ns(void);
/* CPU time this process has used, all its threads, user and system (0 where the clock is missing). */
uint64_t clock_cpu_ns(void);
/* CPU time the calling thread has used (0 where the clock is missing). */
uint64_t clock_thread_cpu_ns(void);

/* Sleep us microseconds, resuming after signals. */
void clock_sleep_us(unsigned us);

#endif
