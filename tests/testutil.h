/*
 * testutil.h - what every CUnit test program shares: table-driven
 * registration and a main that exits non-zero when any assertion failed
 * (CU_basic_run_tests() alone reports success either way), plus helpers to
 * look for leftover processes and shared-memory segments.
 */
#ifndef DDPSIM_TESTUTIL_H
#define DDPSIM_TESTUTIL_H

#include <CUnit/Basic.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct test_entry {
    const char *name;
    void (*fn)(void);
} test_entry;

#define TEST_END {NULL, NULL}

/* Register `tests` as one suite, run it, return 0 if everything passed and 1 otherwise. */
int test_run_suite(const char *suite, const test_entry *tests);

/* Number of /dev/shm entries whose name starts with "ddpsim-". */
int test_count_ddpsim_segments(void);

/* 1 if pid no longer runs (gone, or a zombie nobody reaped yet). */
int test_pid_gone(pid_t pid);

/* Bit patterns and ULP distance, so comparisons are bitwise and NaN never passes. */
uint32_t test_bits_f(float x);
uint64_t test_bits_d(double x);

#endif
