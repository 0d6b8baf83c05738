/*
 * clock.c - monotonic time and sleeping (clock.h).
 */
#include "clock.h"

#include <time.h>

uint64_t clock_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_clock_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t clock_cpu_ns(void)
{
    return cpu_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}

uint64_t clock_thread_cpu_ns(void)
{
    return cpu_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

double clock_now_s(void)
{
    return (double)clock_now_ns() * 1e-9;
}

double clock_now_us(void)
{
    return (double)clock_now_ns() * 1e-3;
}

void clock_sleep_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}
