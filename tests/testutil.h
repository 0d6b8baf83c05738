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

/*
 * Number of /dev/shm entries a world created by process `creator` named
 * ("ddpsim-<pid>-..."): other tests running at the same time do not count.
 */
int test_count_ddpsim_segments(pid_t creator);

/*
 * A new directory of the test's own, $TMPDIR/ddpsim-<stem>-XXXXXX (/tmp without TMPDIR), in buf of len; NULL
 * when it cannot be made. Paths a test needs missing or unwritable go inside it, never assumed of the machine.
 */
char *test_mkdtemp(char *buf, size_t len, const char *stem);

/* 1 if pid no longer runs (gone, or a zombie nobody reaped yet). */
int test_pid_gone(pid_t pid);

struct sched;
struct ddpsim_impl_ops;
struct verify_config;
/*
 * The verification runs the tests start from: 2 ranks, mlp:6-5-4, batch 3,
 * seed 1, the schedule s, ordered, default buckets, bitwise, ops under test
 * (the reference when NULL), a 60 s watchdog, every record kept (verify_at).
 * Tests change what they vary.
 */
void test_verify_config(struct verify_config *c, const struct sched *s, const struct ddpsim_impl_ops *ops);

/* Bit patterns and ULP distance, so comparisons are bitwise and NaN never passes. */
uint32_t test_bits_f(float x);
uint64_t test_bits_d(double x);

#endif
